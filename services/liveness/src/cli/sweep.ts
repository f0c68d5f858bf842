/**
 * Runs a sweep now (operators, load tests): the service's sweep over DATABASE_SCHEMA, `--repeat K`
 * times (default 1) in batches of `--limit` (default 1000), as the service's sweeper runs it. Each
 * flag is logged (stderr) and its ConversationStalled goes to the outbox, which the running
 * service's relay publishes; so does the ConversationClosed of each conversation whose reply window
 * ended. Prints one JSON line: {"flagged":<flagged by the first sweep>,"closed":<closed by it>,"sweepsMs":[...]}
 * (milliseconds per sweep, measured in this process). The schema must exist (the service migrates it).
 *
 *   DATABASE_URL=... [DATABASE_SCHEMA=liveness] [TOPIC_PREFIX=] node dist/cli/sweep.js [--repeat K] [--limit 1000]
 */
import { parseArgs } from 'node:util';
import { createLogger, createMetricsRegistry } from '@outreach/shared';
import { Sweeper } from '../workflow/sweeper.js';
import { commandConfig, count, fail, openRepository } from './command.js';

const COMMAND = 'liveness-sweep';
const { values } = parseArgs({ options: { repeat: { type: 'string' }, limit: { type: 'string' } } });
const repeat = count(COMMAND, 'repeat', values.repeat, 1);
const limit = count(COMMAND, 'limit', values.limit, 1_000);
if (repeat < 1 || limit < 1) fail(COMMAND, '--repeat and --limit must be at least 1');
const config = commandConfig(COMMAND);

const { pool, repository } = openRepository(COMMAND, config);
// stdout carries only the result line; the sweeper's alert lines go to stderr.
const logger = createLogger({ name: COMMAND, level: config.LOG_LEVEL }, process.stderr);
const sweeper = new Sweeper(repository, logger, createMetricsRegistry(COMMAND, false), config.SWEEP_INTERVAL_MS, limit);
try {
  const swept: Array<{ flagged: number; closed: number }> = [];
  const sweepsMs: number[] = [];
  for (let k = 0; k < repeat; k++) {
    const t = performance.now();
    swept.push(await sweeper.sweep());
    sweepsMs.push(Math.round((performance.now() - t) * 1000) / 1000);
  }
  console.log(JSON.stringify({ flagged: swept[0]?.flagged, closed: swept[0]?.closed, sweepsMs }));
} finally {
  await pool.end();
}
