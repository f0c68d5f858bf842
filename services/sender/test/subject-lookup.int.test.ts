/**
 * How an erasure or an export finds a person's sends (adapters/subjects-repository.ts PERSON_SENDS):
 * `sends` has no index by candidate key or by address alone (each would cost every send an entry at
 * its claim and at both status changes); the campaigns are walked through the unique keys, which
 * lead with the campaign, and each is probed. These tests hold both halves: the right rows, and no
 * scan of the table.
 */
import { planScans, type IsolatedSchema } from '@outreach/testkit';
import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, expect, inject, it } from 'vitest';
import { PERSON_SENDS } from '../src/adapters/subjects-repository.js';
import { migratedSenderSchema } from './harness.js';

const databaseUrl = inject('databaseUrl');
let db: IsolatedSchema;
beforeAll(async () => {
  db = await migratedSenderSchema(databaseUrl, 'sender_subject_lookup');
  // 40 campaigns of 250 sends each (10,000 rows), then the person's sends: by candidate key in two
  // campaigns, by address in a third (the same address under another candidate key), and a
  // look-alike in a fourth (same address but another letter's case is not the canonical form).
  await db.pool.query(
    `INSERT INTO sends (send_id, campaign_id, candidate_id, candidate_key, email, email_norm, email_hash, step,
                        subject, body, request_id, correlation_id, status, attempts)
     SELECT gen_random_uuid(), 'camp-' || (i % 40), 'c' || i, 'key-' || i, 'p' || i || '@example.com',
            'p' || i || '@example.com', md5(i::text), 'intro', 's', 'b', 'r' || i, 'x', 'sent', 1
     FROM generate_series(1, 10000) AS i`,
  );
  const person = [
    ['camp-3', 'key-ada', 'ada@example.com', 'intro'],
    ['camp-17', 'key-ada', 'ada@example.com', 'follow-up'],
    ['camp-zzz', 'key-other', 'ada@example.com', 'intro'],
    ['camp-5', 'key-ada-not', 'Ada@example.com', 'intro'],
  ];
  for (const [campaign, key, email, step] of person)
    await db.pool.query(
      `INSERT INTO sends (send_id, campaign_id, candidate_id, candidate_key, email, email_norm, email_hash, step,
                          subject, body, request_id, correlation_id, status, attempts)
       VALUES ($1, $2, 'ada', $3, $4, $4, 'h', $5, 's', 'b', 'r', 'x', 'sent', 1)`,
      [randomUUID(), campaign, key, email, step],
    );
  await db.pool.query('ANALYZE sends');
});
afterAll(() => db?.drop());

it("finds exactly the person's sends, by candidate key and by canonical address, across campaigns", async () => {
  const { rows } = await db.pool.query<{ campaign_id: string; candidate_key: string }>(
    `SELECT campaign_id, candidate_key ${PERSON_SENDS} ORDER BY campaign_id`,
    [['key-ada'], ['ada@example.com']],
  );
  expect(rows).toEqual([
    { campaign_id: 'camp-17', candidate_key: 'key-ada' },
    { campaign_id: 'camp-3', candidate_key: 'key-ada' },
    { campaign_id: 'camp-zzz', candidate_key: 'key-other' },
  ]);
  // Nobody: no rows, and empty lists are fine.
  expect((await db.pool.query(`SELECT 1 ${PERSON_SENDS}`, [['key-nobody'], []])).rows).toEqual([]);
  expect((await db.pool.query(`SELECT 1 ${PERSON_SENDS}`, [[], []])).rows).toEqual([]);
});

it('reads sends through its unique keys, never a scan of the table', async () => {
  const scans = await planScans(db.pool, `SELECT * ${PERSON_SENDS} ORDER BY send_id FOR UPDATE`, [
    ['key-ada'],
    ['ada@example.com'],
  ]);
  const onSends = scans.filter((s) => s.relation === 'sends');
  expect(onSends.length).toBeGreaterThan(0);
  for (const scan of onSends) expect(scan.node, JSON.stringify(scans)).not.toBe('Seq Scan');
  // The probes by candidate key and by address go through the unique keys (the walk over the
  // campaigns may take any index that leads with the campaign).
  const used = new Set(onSends.flatMap((s) => s.indexes));
  expect(used).toContain('sends_one_per_candidate_step');
  expect(used).toContain('sends_one_per_address_step');
});

it('sends has no index by candidate key or by address alone (the hot table stays lean)', async () => {
  const { rows } = await db.pool.query<{ indexdef: string }>(
    `SELECT indexdef FROM pg_indexes WHERE schemaname = current_schema() AND tablename = 'sends'`,
  );
  for (const { indexdef } of rows) expect(indexdef).not.toMatch(/\((candidate_key|email_norm)\)/);
});
