/**
 * Rebuilds do not resurrect (ADR 014): the backfill (the CLI as a process) skips the provider-history
 * rows of a person erased here, by the address's keyed hash and by the candidate key's, so an
 * import after an erasure does not write the address back. It counts what it skipped.
 */
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { candidateKeyFor } from '@outreach/contracts';
import { loadSuppressionKey, subjectHash } from '@outreach/shared';
import { TEST_SUPPRESSION_KEY_ENV, testEmailHashKey } from '@outreach/testkit';
import { afterAll, expect, inject, it } from 'vitest';
import { API_TOKEN, runBackfill, senderTestEnv, type SenderTestEnv } from './harness.js';

const infra = { kafkaBrokers: inject('kafkaBrokers'), databaseUrl: inject('databaseUrl') };
const key = loadSuppressionKey({ ...TEST_SUPPRESSION_KEY_ENV, SUPPRESSION_KEY_FILE: '' })!;
let t: SenderTestEnv | undefined;
afterAll(() => t?.cleanup());

it('an import after an erasure skips the erased address and candidate, and writes no trace of them', async () => {
  t = await senderTestEnv(infra);
  const app = await t.startApp();
  const erase = (payload: Record<string, unknown>) =>
    app.inject({
      method: 'POST',
      url: '/v1/subject-parts/erase',
      headers: { authorization: `Bearer ${API_TOKEN}` },
      payload,
    });
  const address = 'gone.person@example.com';
  const addressHash = subjectHash(key, 'address', address);
  expect(
    (await erase({ candidates: [], addresses: [{ email: address, hash: addressHash }], subject: addressHash }))
      .statusCode,
  ).toBe(200);
  const candidateKey = candidateKeyFor('Gone-Candidate', testEmailHashKey());
  const candidateHash = subjectHash(key, 'candidate', candidateKey);
  expect(
    (await erase({ candidates: [{ key: candidateKey, hash: candidateHash }], addresses: [], subject: candidateHash }))
      .statusCode,
  ).toBe(200);

  const file = join(mkdtempSync(join(tmpdir(), 'backfill-erased-')), 'history.csv');
  writeFileSync(
    file,
    [
      'recipient,campaign,step,timestamp,provider_message_id,candidate_id',
      `${address},camp-b,intro,2026-11-28T09:00:00Z,<p1@provider>,`,
      'Gone.Person@Example.com,camp-b,intro,2026-11-28T09:05:00Z,<p2@provider>,',
      'other.address@example.com,camp-b,intro,2026-11-28T09:10:00Z,<p3@provider>,Gone-Candidate',
      'kept@example.com,camp-b,intro,2026-11-28T09:20:00Z,<p4@provider>,',
    ].join('\n') + '\n',
  );
  const run = runBackfill(t, file, [], { TOPIC_PREFIX: t.prefix, ...TEST_SUPPRESSION_KEY_ENV });
  expect(run.status, run.stdout + run.stderr).toBe(0);
  expect(run.stdout).toMatch(/4 rows, 1 imported, 1 new sent-log entries, 0 invalid, 3 of erased people skipped/);

  const tables = await t.query<{ table_name: string }>(
    `SELECT table_name FROM information_schema.tables WHERE table_schema = $1 AND table_type = 'BASE TABLE'`,
    [t.schema],
  );
  const hits: string[] = [];
  for (const { table_name } of tables)
    for (const row of await t.query<{ text: string }>(`SELECT x::text AS text FROM "${t.schema}"."${table_name}" x`))
      if (/gone\.person|other\.address|gone-candidate/i.test(row.text) || row.text.includes(candidateKey))
        hits.push(`${table_name}: ${row.text}`);
  expect(hits).toEqual([]);
  expect(await t.query(`SELECT 1 FROM provider_history WHERE email_norm = 'kept@example.com'`)).toHaveLength(1);
}, 60_000);
