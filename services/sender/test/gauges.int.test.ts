/**
 * The sender's scrape-time gauges read the database through partial indexes: the queries they run
 * (captured from the repository) are explained with sequential scans off, and each table must be
 * read through the index made for it, not scanned whole or through an index of all sends.
 */
import { createMetricsRegistry, type Registry } from '@outreach/shared';
import { planScans, testEmailHashKey, type IsolatedSchema } from '@outreach/testkit';
import { afterAll, beforeAll, expect, inject, it } from 'vitest';
import { registerSenderGauges } from '../src/adapters/gauges.js';
import { ReportsRepository } from '../src/adapters/reports-repository.js';
import { migratedSenderSchema } from './harness.js';
import { recordingPool } from './recording-pool.js';

const databaseUrl = inject('databaseUrl');
let db: IsolatedSchema;
beforeAll(async () => {
  db = await migratedSenderSchema(databaseUrl, 'sender_gauges');
});
afterAll(() => db?.drop());

/** The gauges over a pool that remembers every statement they send. */
function gaugesRecording(): { registry: Registry; statements: readonly string[] } {
  const { pool: recording, statements } = recordingPool(db.pool);
  const registry = createMetricsRegistry('sender', false);
  registerSenderGauges(registry, new ReportsRepository(recording, testEmailHashKey()), {
    get: async () => ({ paused: false }) as never,
  });
  return { registry, statements };
}

it('ambiguous and held sends are counted through their partial indexes', async () => {
  const { registry, statements } = gaugesRecording();
  const text = await registry.metrics();
  expect(text).toMatch(/^outreach_sender_ambiguous_sends\{service="sender"\} 0$/m);
  const ambiguous = statements.find((s) => s.includes("'ambiguous'"));
  const held = statements.find((s) => s.includes("'held'"));
  expect(ambiguous, 'the ambiguous count ran').toBeDefined();
  expect(held, 'the held count ran').toBeDefined();

  const reads = async (sql: string) =>
    (await planScans(db.pool, sql)).filter((s) => s.relation === 'sends').map((s) => s.indexes);
  expect(await reads(ambiguous as string)).toEqual([['sends_lookup_idx']]);
  expect(await reads(held as string)).toEqual([['sends_held_idx']]);
});
