/**
 * Seed 000-1 step 2 (docs/seeds.md): provider history imported into the sent log blocks re-sends, duplicates in it are
 * reported, and importing never sends.
 */
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { waitFor } from '@outreach/testkit';
import { afterEach, expect, inject, it } from 'vitest';
import { API_TOKEN, runBackfill, senderTestEnv, sendRequested, type SenderTestEnv } from './harness.js';

const auth = { authorization: `Bearer ${API_TOKEN}` };

let t: SenderTestEnv;
afterEach(() => t?.cleanup());

it('imports provider history with progress, reports its duplicates, never sends, and blocks a re-send', async () => {
  t = await senderTestEnv({ kafkaBrokers: inject('kafkaBrokers'), databaseUrl: inject('databaseUrl') });
  const csv = join(mkdtempSync(join(tmpdir(), 'backfill-')), 'history.csv');
  writeFileSync(
    csv,
    [
      'Recipient,Campaign,Timestamp,Provider_Message_Id',
      'ada@example.com,camp-b,2026-11-28T09:00:00Z,<p1@provider>',
      'grace@example.com,camp-b,2026-11-28T09:01:00Z,<p2@provider>',
      ' ADA@example.com ,camp-b,2026-11-28T15:30:00Z,<p3@provider>',
      'not-an-address,camp-b,2026-11-28T15:31:00Z,<p4@provider>',
      'linus@example.com,camp-b,yesterday-ish,<p5@provider>',
    ].join('\n'),
  );
  const run = runBackfill(t, csv, ['--step', 'intro']);
  expect(run.status, run.stderr).toBe(0);
  expect(run.stderr).toMatch(/backfill: 5 rows read, 2 new sent-log entries, 2 invalid/);
  expect(run.stdout).toMatch(/5 rows, 3 imported, 2 new sent-log entries, 2 invalid/);
  expect(run.stdout).toMatch(/invalid line 5: recipient is not an address/);
  expect(run.stdout).toMatch(/invalid line 6: timestamp is missing or not a date/);
  expect(run.stdout).toMatch(/duplicates in this history: 1 /);
  expect(await t.query(`SELECT source, status, sent_at AS "sentAt" FROM sends ORDER BY sent_at`)).toEqual([
    { source: 'backfill', status: 'sent', sentAt: new Date('2026-11-28T09:00:00Z') },
    { source: 'backfill', status: 'sent', sentAt: new Date('2026-11-28T09:01:00Z') },
  ]);

  const app = await t.startApp();
  const report = (await app.inject({ url: '/v1/reports/duplicates?campaignId=camp-b', headers: auth })).json();
  expect(report).toMatchObject({
    total: 1,
    duplicates: [{ campaignId: 'camp-b', step: 'intro', kind: 'address', count: 2, sources: ['backfill'] }],
  });

  // The batch re-runs through the live path: Ada was already mailed at this step.
  await t.publishRequests([
    sendRequested({ campaignId: 'camp-b', candidateId: 'ada-42', email: 'Ada@Example.com' }),
    sendRequested({ campaignId: 'camp-b', candidateId: 'new', email: 'new@example.com' }),
  ]);
  await waitFor(
    async () => (await t.query('SELECT 1 FROM skipped_sends')).length === 1 && t.sink.messages.length === 1,
    {
      timeoutMs: 20_000,
      description: 'the re-send skipped and the new one sent',
    },
  );
  expect(t.sink.messages.map((m) => m.to)).toEqual([['new@example.com']]);
  const check = (
    await app.inject({
      url: '/v1/sends/check?campaignId=camp-b&candidateId=whoever&step=intro&email=grace@EXAMPLE.com',
      headers: auth,
    })
  ).json();
  expect(check).toMatchObject({ alreadySent: true, existing: { source: 'backfill' } });
});
