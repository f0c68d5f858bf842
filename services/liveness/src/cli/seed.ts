/**
 * Seeds synthetic open conversations, for load tests and synthetic data only: `--open N` open
 * conversations in campaign `--campaign` (default `bench`), `--due M` of them already a minute past
 * their deadline (workflow/seed.ts). A campaign that has any conversation is refused (exit 3), so it
 * never writes into real data by accident. Applies the service's migrations to DATABASE_SCHEMA
 * first (as the service does on start), then ANALYZEs the tables. Prints one JSON line,
 * {"seeded":N,"due":M,"seconds":x}: x the seconds the inserts and ANALYZE took, migrations not counted.
 *
 *   DATABASE_URL=... [DATABASE_SCHEMA=liveness] [GRACE_*_MS=...] node dist/cli/seed.js --open N --due M [--campaign bench]
 */
import { parseArgs } from 'node:util';
import { migrate } from '@outreach/shared';
import { canonicalCampaignId, idProblem } from '@outreach/contracts';
import { migrationsDir } from '../app.js';
import { seedConversations } from '../workflow/seed.js';
import { commandConfig, count, fail, openRepository } from './command.js';

const COMMAND = 'liveness-seed';
const { values } = parseArgs({
  options: { open: { type: 'string' }, due: { type: 'string' }, campaign: { type: 'string', default: 'bench' } },
});
const open = count(COMMAND, 'open', values.open);
const due = count(COMMAND, 'due', values.due);
if (due > open) fail(COMMAND, `--due (${due}) cannot exceed --open (${open})`);
// The form the projection stores campaigns under, so the routes and graces find these conversations.
const campaignId = canonicalCampaignId(values.campaign);
const problem = idProblem('--campaign', campaignId);
if (problem) fail(COMMAND, problem);
const config = commandConfig(COMMAND);

await migrate({ databaseUrl: config.DATABASE_URL, schema: config.DATABASE_SCHEMA, dir: migrationsDir, outbox: true });
const { pool, repository } = openRepository(COMMAND, config);
const started = performance.now();
try {
  const result = await seedConversations(repository, { campaignId, open, due });
  if (result.kind === 'campaign-in-use') {
    fail(COMMAND, `campaign ${campaignId} already has conversations; seed only a campaign of its own`, 3);
  }
  await repository.analyze();
  const seconds = Math.round((performance.now() - started) / 100) / 10;
  console.log(JSON.stringify({ seeded: result.count, due, seconds }));
} finally {
  await pool.end();
}
