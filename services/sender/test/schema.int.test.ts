/**
 * The migrated schema against domain/send.ts, the one home of the send statuses: the check
 * constraint on `sends.status` allows exactly SEND_STATUSES, and the partial indexes cover the
 * statuses the queries built from TRANSITIONS ask for. A status or transition changed in the domain
 * fails here until a migration follows it (the existing migrations are never edited).
 */
import { afterAll, beforeAll, expect, inject, it } from 'vitest';
import { SEND_STATUSES, statusesFor } from '../src/domain/send.js';
import { senderTestEnv, type SenderTestEnv } from './harness.js';

let t: SenderTestEnv;
beforeAll(async () => {
  t = await senderTestEnv({ kafkaBrokers: inject('kafkaBrokers'), databaseUrl: inject('databaseUrl') });
});
afterAll(() => t?.cleanup());

/** The string literals of a constraint's or an index's definition, as PostgreSQL prints it. */
function literals(definition: string): string[] {
  return [...definition.matchAll(/'([^']*)'::text/g)].map((m) => m[1] as string).sort();
}

it('the check constraint on sends.status allows exactly the domain status list', async () => {
  const rows = await t.query<{ definition: string }>(
    `SELECT pg_get_constraintdef(c.oid) AS definition FROM pg_constraint c
     WHERE c.conrelid = 'sends'::regclass AND c.contype = 'c'
       AND c.conkey = ARRAY[(SELECT attnum FROM pg_attribute WHERE attrelid = 'sends'::regclass AND attname = 'status')]`,
  );
  expect(rows).toHaveLength(1);
  expect(literals(rows[0]?.definition ?? '')).toEqual([...SEND_STATUSES].sort());
});

it('the partial indexes cover the statuses their sweeps and releases select', async () => {
  const rows = await t.query<{ name: string; definition: string }>(
    `SELECT indexname AS name, indexdef AS definition FROM pg_indexes
     WHERE schemaname = current_schema() AND indexname IN ('sends_expired_leases_idx', 'sends_held_idx', 'sends_lookup_idx')`,
  );
  const predicate = (name: string) => literals(rows.find((r) => r.name === name)?.definition ?? '');
  // The reconciler's two sweeps of lapsed leases: claims to take over, sends in flight to settle.
  expect(predicate('sends_expired_leases_idx'), 'sends_expired_leases_idx').toEqual(
    [...statusesFor('TakeOverClaim'), ...statusesFor('ExpireSendingLease')].sort(),
  );
  // The delivery lookup's sweep of sends in doubt (ADR 009).
  expect(predicate('sends_lookup_idx'), 'sends_lookup_idx').toEqual([...statusesFor('LookUp')].sort());
  // A resume releases the campaign's held sends.
  expect(predicate('sends_held_idx'), 'sends_held_idx').toEqual([...statusesFor('Resume')].sort());
});
