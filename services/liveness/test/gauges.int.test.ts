/**
 * The liveness gauges read the database at scrape time through partial indexes: the queries they run
 * (captured from the repository) are explained with sequential scans off, and `conversations` must be
 * read through the index made for each, not scanned whole.
 */
import { createMetricsRegistry, type Registry } from '@outreach/shared';
import { migratedSchema, planScans, recordingPool, type IsolatedSchema } from '@outreach/testkit';
import { afterAll, beforeAll, expect, inject, it } from 'vitest';
import { ConversationsRepository } from '../src/adapters/conversations-repository.js';
import { registerLivenessGauges } from '../src/adapters/gauges.js';
import { migrationsDir } from '../src/app.js';

const databaseUrl = inject('databaseUrl');
let db: IsolatedSchema;
beforeAll(async () => {
  db = await migratedSchema(databaseUrl, 'liveness_gauges', migrationsDir);
});
afterAll(() => db?.drop());

function gaugesRecording(): { registry: Registry; statements: string[] } {
  const { pool: recording, statements } = recordingPool(db.pool);
  const registry = createMetricsRegistry('liveness', false);
  const graces = { inboundMs: 1, outboundMs: 1, overdueMs: 1, replyWindowMs: 1 };
  registerLivenessGauges(
    registry,
    new ConversationsRepository(recording, { liveness: 'unused', conversationEvents: 'unused' }, graces),
  );
  return { registry, statements };
}

it('stalled conversations and the oldest obligation are read through their partial indexes', async () => {
  const { registry, statements } = gaugesRecording();
  const text = await registry.metrics();
  expect(text).toMatch(/^outreach_liveness_stalled_conversations\{reason="no_next_step",service="liveness"\} 0$/m);
  expect(text).toMatch(/^outreach_liveness_oldest_obligation_age_seconds\{service="liveness"\} 0$/m);
  const stalled = statements.find((s) => s.includes('stalled_reason IS NOT NULL'));
  const obligation = statements.find((s) => s.includes('min(obligation_since)'));
  expect(stalled, 'the stalled count ran').toBeDefined();
  expect(obligation, 'the obligation age ran').toBeDefined();

  const reads = async (sql: string) =>
    (await planScans(db.pool, sql)).filter((s) => s.relation === 'conversations').map((s) => s.indexes);
  expect(await reads(stalled as string)).toEqual([['conversations_stalled_idx']]);
  expect(await reads(obligation as string)).toEqual([['conversations_obligation_idx']]);
});
