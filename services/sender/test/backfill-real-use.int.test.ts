/**
 * The backfill survives real use (issue #18): the CLI as a process against real PostgreSQL (and the
 * sender, where live sends are involved). Running it twice changes nothing; history that overlaps
 * live sending is matched by Message-ID and counted once; an ambiguous send the history shows
 * delivered is recorded sent through the domain's transition, with its SendRecorded; the duplicates
 * report gives send times, the window and the source; `--step` mismatches and steps a campaign never
 * had are refused by line number; the blind window is printed with the history's time range.
 */
import { randomUUID } from 'node:crypto';
import { copyFileSync, mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { topicName } from '@outreach/shared';
import { eventCodec, type SendRecorded, type SendRequested } from '@outreach/contracts';
import { readTopic, waitFor, type SmtpHostility } from '@outreach/testkit';
import { afterEach, describe, expect, inject, it } from 'vitest';
import {
  API_TOKEN,
  runBackfill,
  senderTestEnv,
  sendRequested,
  type BackfillRun,
  type SenderTestEnv,
} from './harness.js';

const infra = { kafkaBrokers: inject('kafkaBrokers'), databaseUrl: inject('databaseUrl') };
const auth = { authorization: `Bearer ${API_TOKEN}` };
let t: SenderTestEnv | undefined;
afterEach(async () => {
  await t?.cleanup();
  t = undefined;
});

function csv(lines: readonly string[]): string {
  const file = join(mkdtempSync(join(tmpdir(), 'backfill-')), 'history.csv');
  writeFileSync(file, `${lines.join('\n')}\n`);
  return file;
}

/** The backfill CLI on `file`, writing its SendRecorded events to the env's topics. */
function backfill(env: SenderTestEnv, file: string, ...args: string[]): BackfillRun {
  return runBackfill(env, file, args, { TOPIC_PREFIX: env.prefix });
}

/** Everything an import writes, in a stable order. */
async function snapshot(env: SenderTestEnv): Promise<unknown> {
  return {
    sends: await env.query(
      'SELECT send_id, status, source, sent_at, provider_message_id, reason, updated_at FROM sends ORDER BY send_id',
    ),
    history: await env.query('SELECT import_id, line, send_id, sent_at, imported_at FROM provider_history ORDER BY id'),
    imports: await env.query('SELECT * FROM provider_imports ORDER BY import_id'),
    outbox: await env.query<{ n: number }>('SELECT count(*)::int AS n FROM outbox'),
  };
}

describe('the backfill, run again and again', { timeout: 60_000 }, () => {
  it('changes nothing the second time, or for a copy of the file; other options on the same file are refused', async () => {
    t = await senderTestEnv(infra);
    const file = csv([
      'recipient,campaign,step,timestamp,provider_message_id',
      'ada@example.com,camp-r,intro,2026-11-28T09:00:00Z,<p1@provider>',
      'grace@example.com,camp-r,intro,2026-11-28T09:01:00Z,<p2@provider>',
      'ada@example.com,camp-r,intro,2026-11-28T15:00:00Z,<p3@provider>',
    ]);
    const first = backfill(t, file);
    expect(first.status, first.stdout + first.stderr).toBe(0);
    expect(first.stdout).toMatch(/3 rows, 3 imported, 2 new sent-log entries, 0 invalid/);
    const importId = /import ([0-9a-f-]{36}):/.exec(first.stdout)?.[1];
    const before = await snapshot(t);

    const second = backfill(t, file);
    expect(second.status, second.stdout + second.stderr).toBe(0);
    expect(second.stdout).toContain(`import ${importId}: this file was imported at`);
    expect(second.stdout).toMatch(/nothing changed/);
    expect(await snapshot(t)).toEqual(before);

    // The import id is the content's: another path, the same bytes, the same import.
    const copy = join(mkdtempSync(join(tmpdir(), 'backfill-copy-')), 'renamed.csv');
    copyFileSync(file, copy);
    const third = backfill(t, copy);
    expect(third.stdout).toContain(`import ${importId}: this file was imported at`);
    expect(await snapshot(t)).toEqual(before);

    // The same deliveries read as another campaign would be counted twice: refused.
    const other = backfill(t, file, '--campaign', 'camp-x');
    expect(other.status).toBe(1);
    expect(other.stdout).toMatch(/refused: nothing was imported/);
    expect(other.stdout).toMatch(/importing it again with other options would count its deliveries twice/);
    expect(await snapshot(t)).toEqual(before);
  });
});

describe('--step and the steps a campaign had', { timeout: 60_000 }, () => {
  it('refuses a step column that contradicts --step, listing the lines, and imports nothing', async () => {
    t = await senderTestEnv(infra);
    const file = csv([
      'recipient,campaign,step,timestamp,provider_message_id',
      'ada@example.com,camp-s,intro,2026-11-28T09:00:00Z,<p1@provider>',
      'grace@example.com,camp-s,follow-up-1,2026-11-28T09:01:00Z,<p2@provider>',
      'linus@example.com,camp-s,,2026-11-28T09:02:00Z,<p3@provider>',
      'alan@example.com,camp-s,Follow-Up-1,2026-11-28T09:03:00Z,<p4@provider>',
    ]);
    const run = backfill(t, file, '--step', 'Intro');
    expect(run.status, run.stdout + run.stderr).toBe(1);
    expect(run.stdout).toMatch(/refused: nothing was imported/);
    expect(run.stdout).toContain('--step intro: the step column names another step on lines 3, 5');
    expect(await t.query('SELECT 1 FROM sends')).toEqual([]);
    expect(await t.query('SELECT 1 FROM provider_history')).toEqual([]);
    expect(await t.query('SELECT 1 FROM provider_imports')).toEqual([]);

    // Without --step the file's own steps are imported (a blank step is then invalid, and skipped).
    const fine = backfill(t, file);
    expect(fine.status, fine.stdout + fine.stderr).toBe(0);
    expect(fine.stdout).toMatch(/4 rows, 3 imported, 3 new sent-log entries, 1 invalid/);
    expect(fine.stdout).toMatch(/invalid line 4: no step \(column or --step\)/);
  });

  it('refuses a step a known campaign never had, unless --allow-new-steps', async () => {
    t = await senderTestEnv(infra);
    const known = backfill(
      t,
      csv([
        'recipient,campaign,timestamp,provider_message_id',
        'ada@example.com,camp-k,2026-11-28T09:00:00Z,<p1@provider>',
      ]),
      '--step',
      'intro',
    );
    expect(known.status, known.stdout + known.stderr).toBe(0);
    const typo = csv([
      'recipient,campaign,step,timestamp,provider_message_id',
      'grace@example.com,camp-k,intro,2026-11-29T09:00:00Z,<p2@provider>',
      'ada@example.com,camp-k,folow-up-1,2026-11-30T09:00:00Z,<p3@provider>',
      'linus@example.com,camp-new,follow-up-7,2026-11-30T09:00:00Z,<p4@provider>',
    ]);
    const refused = backfill(t, typo);
    expect(refused.status, refused.stdout + refused.stderr).toBe(1);
    expect(refused.stdout).toContain('campaign camp-k never had step folow-up-1 (line 3)');
    // A campaign the sender has never seen is new as a whole: its steps are not refused.
    expect(refused.stdout).not.toContain('camp-new');
    expect(await t.query('SELECT 1 FROM provider_history')).toHaveLength(1);

    const allowed = backfill(t, typo, '--allow-new-steps');
    expect(allowed.status, allowed.stdout + allowed.stderr).toBe(0);
    expect(allowed.stdout).toMatch(/3 rows, 3 imported, 3 new sent-log entries/);
  });
});

describe('history that overlaps live sending', { timeout: 90_000 }, () => {
  /** A sender whose SMTP server drops the first `cut` transactions after the final dot: those sends end ambiguous. */
  async function liveSends(cut: number, count: number) {
    const hostile = (n: number): SmtpHostility | undefined => (n <= cut ? { at: 'dot', act: 'drop' } : undefined);
    t = await senderTestEnv(infra, { sink: { hostile }, env: { SEND_CONCURRENCY: '1' } });
    const app = await t.startApp();
    const campaignId = `live-${randomUUID().slice(0, 8)}`;
    const requests = Array.from({ length: count }, (_, i) =>
      sendRequested({ campaignId, candidateId: `cand-${i}`, email: `cand-${i}@example.com` }),
    );
    await t.publishRequests(requests);
    const env = t;
    await waitFor(
      async () =>
        (await env.query(`SELECT 1 FROM sends WHERE status IN ('sent', 'ambiguous')`)).length === requests.length,
      { timeoutMs: 30_000, description: 'every live send recorded' },
    );
    return { env, app, campaignId, requests };
  }

  it('is matched by Message-ID and counted once; the report gives times, the window and the source', async () => {
    const { env, app, campaignId, requests } = await liveSends(0, 2);
    const [first, second] = requests as [SendRequested, SendRequested];
    const sentAt = (
      await env.query<{ at: Date }>('SELECT sent_at AS at FROM sends WHERE send_id = $1', [first.sendId])
    )[0]?.at as Date;
    const file = csv([
      'recipient,campaign,step,timestamp,message_id',
      // The provider's record of the live send itself: the same delivery.
      `${first.email},${campaignId},intro,${sentAt.toISOString()},<${first.sendId}@outreach.local>`,
      // Another message to the second address at the same step: a real second delivery.
      `${second.email},${campaignId},intro,2026-11-28T09:00:00Z,<older@provider>`,
    ]);
    const run = backfill(env, file);
    expect(run.status, run.stdout + run.stderr).toBe(0);
    expect(run.stdout).toMatch(/2 rows, 2 imported, 0 new sent-log entries/);
    expect(run.stdout).toMatch(/matched by Message-ID: 1 rows are live sends' deliveries \(counted once\)/);
    expect(await env.query('SELECT send_id FROM provider_history WHERE send_id IS NOT NULL')).toEqual([
      { send_id: first.sendId },
    ]);
    expect(await env.query(`SELECT 1 FROM sends WHERE source = 'backfill'`)).toEqual([]);

    const report = (await app.inject({ url: `/v1/reports/duplicates?campaignId=${campaignId}`, headers: auth })).json();
    const liveAt = (
      await env.query<{ at: Date }>('SELECT sent_at AS at FROM sends WHERE send_id = $1', [second.sendId])
    )[0]?.at as Date;
    // Only the second address (the history row has no candidate id, so no candidate group).
    expect(report.total).toBe(1);
    expect(report.duplicates[0]).toEqual({
      campaignId,
      step: 'intro',
      kind: 'address',
      key: expect.stringMatching(/^[0-9a-f]{64}$/),
      count: 2,
      sources: ['backfill', 'live'],
      firstAt: '2026-11-28T09:00:00.000Z',
      lastAt: liveAt.toISOString(),
      windowMs: liveAt.getTime() - Date.parse('2026-11-28T09:00:00Z'),
      deliveries: [
        { at: '2026-11-28T09:00:00.000Z', source: 'backfill' },
        { at: liveAt.toISOString(), source: 'live' },
      ],
    });
  });

  it('settles an ambiguous send the history shows delivered: sent, through its transition, with its SendRecorded', async () => {
    const { env, requests } = await liveSends(2, 2);
    const [shown, unshown] = requests as [SendRequested, SendRequested];
    expect(await env.query(`SELECT status FROM sends ORDER BY status`)).toEqual([
      { status: 'ambiguous' },
      { status: 'ambiguous' },
    ]);
    const end = new Date(Date.now() + 60_000);
    const file = csv([
      'recipient,campaign,step,timestamp,provider_message_id',
      `${shown.email},${shown.campaignId},intro,${end.toISOString()},<${shown.sendId}@outreach.local>`,
    ]);
    const run = backfill(env, file);
    expect(run.status, run.stdout + run.stderr).toBe(0);
    expect(run.stdout).toMatch(/1 ambiguous sends recorded sent/);
    // The blind window: the history's range, and the ambiguous send before its end that it does not show.
    expect(run.stdout).toContain(`to ${end.toISOString()}. Blind window:`);
    expect(run.stdout).toMatch(/and 1 ambiguous sends attempted before its end are not in it/);
    expect(
      await env.query('SELECT send_id, status, provider_message_id, sent_at FROM sends ORDER BY status, send_id'),
    ).toEqual([
      { send_id: unshown.sendId, status: 'ambiguous', provider_message_id: null, sent_at: null },
      {
        send_id: shown.sendId,
        status: 'sent',
        provider_message_id: `<${shown.sendId}@outreach.local>`,
        sent_at: end,
      },
    ]);
    // Its SendRecorded went out through the outbox: ambiguous first, then sent.
    const events = (
      await readTopic(env.kafka, topicName('sendRecorded', env.prefix), (m) =>
        m.some((x) => (eventCodec.decode(x.value as Buffer) as SendRecorded).outcome === 'sent'),
      )
    ).map((m) => eventCodec.decode(m.value as Buffer) as SendRecorded);
    expect(events.filter((e) => e.sendId === shown.sendId).map((e) => e.outcome)).toEqual(['ambiguous', 'sent']);
    // Running it again changes nothing.
    const again = backfill(env, file);
    expect(again.stdout).toMatch(/nothing changed$/m);
    expect(await env.query(`SELECT count(*)::int AS n FROM sends WHERE status = 'sent'`)).toEqual([{ n: 1 }]);
  });
});
