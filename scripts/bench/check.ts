/**
 * The sender's check-before-compose endpoint (`GET /v1/sends/check`) at a fixed 1k requests/s, with
 * autocannon, over a sent log seeded with `rows` rows; half the checked candidates were sent to.
 * The sent log is the sender's, so the bench seeds it through the sender's documented backfill
 * command (services/sender/src/cli/backfill.ts), run as a process against the bench's own sender
 * schema with a generated history file, and never writes the table itself. The seed's time is
 * reported, not measured: the figure is the endpoint's latency.
 */
import { execFile } from 'node:child_process';
import { once } from 'node:events';
import { createWriteStream } from 'node:fs';
import { rm } from 'node:fs/promises';
import { join } from 'node:path';
import { promisify } from 'node:util';
import autocannon from 'autocannon';
import { root } from '../lib/paths.js';
import type { Stack } from '../lib/stack.js';
import { say } from './common.js';
import { benchStack, runId, tsNode, type BenchEnv } from './harness.js';
import type { CheckResult } from './report.js';

const TARGET_RATE = 1_000;

/** A provider history of `rows` deliveries, one per candidate `cand-<i>` of campaign `bench` at step intro. */
async function writeHistory(file: string, rows: number): Promise<void> {
  const out = createWriteStream(file);
  const sentAt = new Date('2026-11-01T09:00:00Z').toISOString();
  out.write('recipient,campaign,step,candidate_id,timestamp,provider_message_id\n');
  for (let i = 1; i <= rows; i++) {
    if (!out.write(`cand-${i}@example.com,bench,intro,cand-${i},${sentAt},<bench-${i}@provider>\n`))
      await once(out, 'drain');
  }
  out.end();
  await once(out, 'finish');
}

/** Runs the sender's backfill command from source on `file`, against the stack's sender schema. */
async function seed(stack: Stack, file: string): Promise<{ newSends: number; seconds: number }> {
  const script = join(root, 'services', 'sender', 'src', 'cli', 'backfill.ts');
  const env = stack.env('sender');
  const { stdout } = await promisify(execFile)(process.execPath, [...tsNode, script, '--file', file], {
    cwd: root,
    env: {
      PATH: process.env.PATH,
      DATABASE_URL: env.DATABASE_URL,
      DATABASE_SCHEMA: env.DATABASE_SCHEMA,
      TOPIC_PREFIX: env.TOPIC_PREFIX,
      EMAIL_HASH_KEY: env.EMAIL_HASH_KEY,
      EMAIL_HASH_KEY_ID: env.EMAIL_HASH_KEY_ID,
    },
    maxBuffer: 16 * 1024 * 1024,
  });
  const last = stdout.trim().split('\n').at(-1) ?? '';
  const result = JSON.parse(last) as { result?: string; newSends?: number; seconds?: number };
  if (result.result !== 'imported' || typeof result.newSends !== 'number' || typeof result.seconds !== 'number')
    throw new Error(`the sender's backfill did not import the history: ${stdout.slice(-1_000)}`);
  return { newSends: result.newSends, seconds: result.seconds };
}

export async function checkEndpoint(env: BenchEnv, rows: number, seconds = 20): Promise<CheckResult> {
  const stack = await benchStack(env, runId('check'), () => ({ MAIL_PROVIDER: 'null' }));
  // The sender migrates its schema on start; the backfill then writes into it.
  await stack.start('sender');
  const history = join(env.work, `${stack.run}-history.csv`);
  await writeHistory(history, rows);
  const seeded = await seed(stack, history).finally(() => rm(history, { force: true }));
  if (seeded.newSends !== rows) throw new Error(`the backfill seeded ${seeded.newSends} of ${rows} sends`);
  say(`  seeded ${rows} sent rows through the sender's backfill in ${seeded.seconds} s`);
  let i = 0;
  const result = await autocannon({
    url: stack.url('sender', ''),
    connections: 32,
    overallRate: TARGET_RATE,
    duration: seconds,
    requests: [
      {
        method: 'GET',
        // The check reveals send details: it needs the read scope.
        headers: { authorization: 'Bearer bench-token' },
        setupRequest: (request: autocannon.Request) => ({
          ...request,
          path: `/v1/sends/check?campaignId=bench&candidateId=cand-${(i++ * 7919) % (rows * 2)}&step=intro&email=cand-${i}@example.com`,
        }),
      },
    ],
  });
  await stack.stopAll();
  await stack.dropData(['sender']);
  return {
    rows,
    targetRate: TARGET_RATE,
    achievedRate: Math.round(result.requests.average),
    p50: result.latency.p50,
    p99: result.latency.p99,
    max: result.latency.max,
    errors: result.errors + result.non2xx,
    seedSeconds: seeded.seconds,
  };
}
