/**
 * Canonical keys at every sender ingress (issue #15): spellings of one campaign, step, candidate or
 * address that a person would call the same collapse to one send, through Kafka, the HTTP API, the
 * suppression list and the backfill; a candidate id that is an address is filed under its keyed
 * hash; and the emailHash on SendRecorded is keyed, with its key id.
 */
import { createHash } from 'node:crypto';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { topicName } from '@outreach/shared';
import { addressCandidateKey, emailHash, eventCodec, type SendRecorded } from '@outreach/contracts';
import { readTopic, testEmailHashKey, waitFor } from '@outreach/testkit';
import { afterEach, describe, expect, inject, it } from 'vitest';
import { API_TOKEN, runBackfill, senderTestEnv, sendRequested, type SenderTestEnv } from './harness.js';

const infra = { kafkaBrokers: inject('kafkaBrokers'), databaseUrl: inject('databaseUrl') };
const auth = { authorization: `Bearer ${API_TOKEN}` };
const key = testEmailHashKey();
let t: SenderTestEnv;

afterEach(async () => {
  await t?.cleanup();
});

async function sendCount(): Promise<number> {
  return (await t.query<{ n: number }>('SELECT count(*)::int AS n FROM sends'))[0]?.n ?? 0;
}

/** Waits until every published request has been claimed or skipped, and no send is in flight. */
async function settled(expectedSends: number, expectedSkipped = 0): Promise<void> {
  await waitFor(
    async () => {
      const [row] = await t.query<{ done: number; open: number; skipped: number }>(
        `SELECT count(*) FILTER (WHERE status NOT IN ('claimed', 'sending'))::int AS done,
                count(*) FILTER (WHERE status IN ('claimed', 'sending'))::int AS open,
                (SELECT count(*)::int FROM skipped_sends) AS skipped
         FROM sends`,
      );
      return row?.done === expectedSends && row.open === 0 && row.skipped === expectedSkipped;
    },
    { timeoutMs: 30_000, description: `${expectedSends} sends settled, ${expectedSkipped} skipped` },
  );
}

describe('canonical keys in the sender', () => {
  it('collapses variants of each key (campaign, step, candidate, address) to one send', async () => {
    t = await senderTestEnv(infra);
    await t.startApp();
    // Each group varies one key only; the other keys keep the two unique constraints apart, so
    // without canonicalization every variant would be a send of its own.
    const groups = {
      campaign: ['camp-a', ' CAMP-A', 'camp-a\u200b', 'Camp-\uff41'].map((campaignId) =>
        sendRequested({ campaignId, candidateId: 'c-campaign', email: 'campaign@example.com' }),
      ),
      step: ['intro', 'Intro', ' INTRO\u200d', 'in\u2060tro'].map((step) =>
        sendRequested({ campaignId: 'camp-b', candidateId: 'c-step', email: 'step@example.com', step }),
      ),
      candidate: ['cand-1', ' cand-1\ufeff', 'cand-\uff11', 'cand\u00ad-1'].map((candidateId, i) =>
        sendRequested({ campaignId: 'camp-c', candidateId, email: `distinct-${i}@example.com` }),
      ),
      address: [
        'ada@example.com',
        '  ADA@Example.COM ',
        'ada\u200b@example.com',
        'ada@\uff45\uff58\uff41\uff4d\uff50\uff4c\uff45.com',
      ].map((email, i) => sendRequested({ campaignId: 'camp-d', candidateId: `ada-${i}`, email })),
      idn: ['bob@b\u00fccher.de', 'bob@xn--bcher-kva.de', 'BOB@B\u00dcCHER.DE'].map((email, i) =>
        sendRequested({ campaignId: 'camp-e', candidateId: `bob-${i}`, email }),
      ),
    };
    // One group at a time: the first variant is sent before the others arrive (they land on other
    // partitions, so publishing them together would race the claim, which is fine but not the point).
    for (const variants of Object.values(groups)) {
      const before = t.sink.messages.length;
      await t.publishRequests([variants[0] as (typeof variants)[number]]);
      await waitFor(() => t.sink.messages.length === before + 1, { timeoutMs: 20_000, description: 'first variant' });
      await t.publishRequests(variants.slice(1));
    }
    // Address variants differ in sendId (other candidates): each later one is a skipped duplicate.
    await settled(5, 3 + 2);
    expect(await sendCount()).toBe(5);
    expect(t.sink.messages).toHaveLength(5);
    // (The sink's SMTP server shows an IDNA domain in Unicode; the sender mailed its ASCII form.)
    expect(t.sink.messages.map((m) => m.to).sort()).toEqual([
      ['ada@example.com'],
      ['bob@b\u00fccher.de'],
      ['campaign@example.com'],
      ['distinct-0@example.com'],
      ['step@example.com'],
    ]);
    expect(
      await t.query(`SELECT campaign_id, candidate_key, step, email, email_norm FROM sends ORDER BY campaign_id`),
    ).toEqual([
      {
        campaign_id: 'camp-a',
        candidate_key: 'c-campaign',
        step: 'intro',
        email: 'campaign@example.com',
        email_norm: 'campaign@example.com',
      },
      {
        campaign_id: 'camp-b',
        candidate_key: 'c-step',
        step: 'intro',
        email: 'step@example.com',
        email_norm: 'step@example.com',
      },
      {
        campaign_id: 'camp-c',
        candidate_key: 'cand-1',
        step: 'intro',
        email: 'distinct-0@example.com',
        email_norm: 'distinct-0@example.com',
      },
      {
        campaign_id: 'camp-d',
        candidate_key: 'ada-0',
        step: 'intro',
        email: 'ada@example.com',
        email_norm: 'ada@example.com',
      },
      {
        campaign_id: 'camp-e',
        candidate_key: 'bob-0',
        step: 'intro',
        email: 'bob@xn--bcher-kva.de',
        email_norm: 'bob@xn--bcher-kva.de',
      },
    ]);

    // The SendRecorded events: canonical keys, and a keyed hash with its key id (not SHA-256).
    const events = (await readTopic(t.kafka, topicName('sendRecorded', t.prefix), (m) => m.length >= 10)).map(
      (m) => eventCodec.decode(m.value as Buffer) as SendRecorded,
    );
    expect(events.filter((e) => e.outcome === 'sent')).toHaveLength(5);
    expect(events.filter((e) => e.outcome === 'skipped_duplicate')).toHaveLength(5);
    for (const event of events) expect(event.emailHashKeyId).toBe(key.id);
    const ada = events.filter((e) => e.campaignId === 'camp-d');
    expect(new Set(ada.map((e) => e.emailHash))).toEqual(new Set([emailHash('ada@example.com', key)]));
    expect(ada[0]?.emailHash).not.toBe(createHash('sha256').update('ada@example.com').digest('hex'));
  });

  it('answers the HTTP API by canonical keys: check, list, campaigns', async () => {
    t = await senderTestEnv(infra);
    const app = await t.startApp();
    const sent = sendRequested({ campaignId: 'camp-h', candidateId: 'cand-h', email: 'hal@example.com' });
    await t.publishRequests([sent]);
    await waitFor(() => t.sink.messages.length === 1, { timeoutMs: 20_000, description: 'the send' });
    await settled(1);

    const check = await app.inject({
      url: `/v1/sends/check?campaignId=${encodeURIComponent(' CAMP-H')}&candidateId=${encodeURIComponent('cand-h\u200b')}&step=Intro`,
      headers: auth,
    });
    expect(check.json()).toMatchObject({ sendId: sent.sendId, alreadySent: true });
    const byAddress = await app.inject({
      url: `/v1/sends/check?campaignId=camp-h&candidateId=other&step=intro&email=${encodeURIComponent('HAL@EXAMPLE.COM\ufeff')}`,
      headers: auth,
    });
    expect(byAddress.json()).toMatchObject({ alreadySent: true });
    const listed = await app.inject({ url: '/v1/sends?status=sent&campaignId=Camp-H', headers: auth });
    expect(listed.json()).toMatchObject({ sends: [{ sendId: sent.sendId, emailHashKeyId: key.id }] });
    const pause = await app.inject({
      method: 'POST',
      url: '/v1/campaigns/CAMP-H%20/pause',
      headers: auth,
      payload: {},
    });
    expect(pause.json()).toMatchObject({ campaignId: 'camp-h', paused: true });
    const campaign = await app.inject({ url: '/v1/campaigns/camp-h', headers: auth });
    expect(campaign.json()).toMatchObject({ campaignId: 'camp-h', paused: true, counts: { sent: 1 } });
  });

  it('matches suppressions by the canonical address (IDNA, case, invisible characters), plus-tags apart', async () => {
    t = await senderTestEnv(infra);
    const app = await t.startApp();
    const suppress = (email: string) =>
      app.inject({
        method: 'PUT',
        url: `/v1/suppressions/${encodeURIComponent(email)}`,
        headers: auth,
        payload: { reason: 'unsubscribe' },
      });
    const put = await suppress('Gone@B\u00dcCHER.de');
    expect(put.statusCode).toBe(200);
    expect(put.json()).toEqual({
      emailHash: emailHash('gone@xn--bcher-kva.de', key),
      emailHashKeyId: key.id,
      suppressed: true,
      reason: 'unsubscribe',
    });
    expect((await suppress('quiet@example.com\u200b')).statusCode).toBe(200);
    // Not an address a send could have: refused, not stored where it would never match.
    const bad = await suppress('\uff51uiet@example.com');
    expect(bad.statusCode).toBe(400);
    expect(bad.body).not.toContain('uiet@');
    const found = await app.inject({
      url: `/v1/suppressions/${encodeURIComponent('GONE@xn--bcher-kva.de')}`,
      headers: auth,
    });
    expect(found.json()).toMatchObject({ suppressed: true, emailHash: emailHash('gone@xn--bcher-kva.de', key) });

    await t.publishRequests([
      sendRequested({ campaignId: 'c', candidateId: 'gone', email: 'gone@xn--bcher-kva.de' }),
      sendRequested({ campaignId: 'c', candidateId: 'gone-idn', email: ' GONE@b\u00fccher.de' }),
      sendRequested({ campaignId: 'c', candidateId: 'quiet', email: 'Quiet@Example.com' }),
      // Plus-tags are distinct addresses (schemas/README.md, "Keys"): this one is mailed.
      sendRequested({ campaignId: 'c', candidateId: 'quiet-tagged', email: 'quiet+jobs@example.com' }),
    ]);
    await waitFor(
      async () => {
        const rows = await t.query<{ status: string; n: number }>(
          'SELECT status, count(*)::int AS n FROM sends GROUP BY status ORDER BY status',
        );
        return (
          JSON.stringify(rows) ===
          JSON.stringify([
            { status: 'sent', n: 1 },
            { status: 'suppressed', n: 2 },
          ])
        );
      },
      { timeoutMs: 20_000, description: 'two suppressed (one skipped as a duplicate address), one sent' },
    );
    expect(t.sink.messages.map((m) => m.to)).toEqual([['quiet+jobs@example.com']]);
  });

  it('imports provider history under canonical keys, with no address in a candidate key', async () => {
    t = await senderTestEnv(infra);
    const csv = join(mkdtempSync(join(tmpdir(), 'backfill-keys-')), 'history.csv');
    writeFileSync(
      csv,
      [
        'recipient,campaign,step,timestamp,provider_message_id',
        'ada@example.com,Camp-K ,Intro,2026-11-28T09:00:00Z,<p1@provider>',
        ' ADA@EXAMPLE.COM\u200b,camp-k,intro,2026-11-28T10:00:00Z,<p2@provider>',
        'grace@b\u00fccher.de,CAMP-K,INTRO,2026-11-28T11:00:00Z,<p3@provider>',
      ].join('\n'),
    );
    const run = runBackfill(t, csv);
    expect(run.status, run.stderr).toBe(0);
    expect(run.stdout).toMatch(/3 rows, 3 imported, 2 new sent-log entries, 0 invalid/);
    expect(`${run.stdout}${run.stderr}`).not.toMatch(/ada@|grace@/i);
    const rows = await t.query<{ campaign_id: string; step: string; candidate_key: string; email_hash_key_id: string }>(
      'SELECT campaign_id, step, candidate_key, email_hash_key_id FROM sends ORDER BY email_norm',
    );
    expect(rows).toEqual([
      {
        campaign_id: 'camp-k',
        step: 'intro',
        candidate_key: `address:${key.id}:${emailHash('ada@example.com', key)}`,
        email_hash_key_id: key.id,
      },
      {
        campaign_id: 'camp-k',
        step: 'intro',
        candidate_key: `address:${key.id}:${emailHash('grace@xn--bcher-kva.de', key)}`,
        email_hash_key_id: key.id,
      },
    ]);

    // The live path, with other spellings of the same keys, is blocked by the imported history.
    await t.startApp();
    await t.publishRequests([
      sendRequested({ campaignId: 'CAMP-K', candidateId: 'ada-live', step: 'Intro', email: 'Ada@Example.com' }),
      sendRequested({ campaignId: 'camp-k', candidateId: 'grace-live', email: 'grace@xn--bcher-kva.de' }),
    ]);
    await waitFor(async () => (await t.query('SELECT 1 FROM skipped_sends')).length === 2, {
      timeoutMs: 20_000,
      description: 'both live sends skipped as duplicates of the history',
    });
    expect(t.sink.messages).toHaveLength(0);
  });

  it('never shows or publishes the unsalted hash of a row recorded before keyed hashes', async () => {
    t = await senderTestEnv(infra);
    const app = await t.startApp();
    const legacy = sendRequested({ campaignId: 'camp-l', candidateId: 'old', email: 'old@example.com' });
    const unsalted = createHash('sha256').update('old@example.com').digest('hex');
    await t.query(
      `INSERT INTO sends (send_id, campaign_id, candidate_id, candidate_key, email, email_norm, email_hash, step, subject,
                          body, request_id, correlation_id, status, attempts)
       VALUES ($1, 'camp-l', 'old', 'old', 'old@example.com', 'old@example.com', $2, 'intro', 's', 'b', 'r', 'c',
               'ambiguous', 1)`,
      [legacy.sendId, unsalted],
    );
    const shown = await app.inject({ url: `/v1/sends/${legacy.sendId}`, headers: auth });
    expect(shown.json()).toMatchObject({ emailHash: emailHash('old@example.com', key), emailHashKeyId: key.id });
    const resolved = await app.inject({
      method: 'POST',
      url: `/v1/sends/${legacy.sendId}/resolve`,
      headers: auth,
      payload: { resolution: 'sent' },
    });
    expect(resolved.statusCode, resolved.body).toBe(200);
    const [event] = (await readTopic(t.kafka, topicName('sendRecorded', t.prefix), (m) => m.length >= 1)).map(
      (m) => eventCodec.decode(m.value as Buffer) as SendRecorded,
    );
    expect(event).toMatchObject({
      outcome: 'sent',
      emailHash: emailHash('old@example.com', key),
      emailHashKeyId: key.id,
    });
    expect(JSON.stringify(event)).not.toContain(unsalted);
  });

  it('files a candidate whose id is an address under its keyed hash, and refuses a campaign id holding one', async () => {
    t = await senderTestEnv(infra);
    const app = await t.startApp();
    const pseudonym = addressCandidateKey('pia@example.com', key);
    await t.publishRequests([
      sendRequested({ campaignId: 'camp-p', candidateId: ' Pia@Example.com', email: 'pia@example.com' }),
    ]);
    await waitFor(() => t.sink.messages.length === 1, { timeoutMs: 20_000, description: 'the send' });
    await settled(1);
    const [recorded] = await readTopic(t.kafka, topicName('sendRecorded', t.prefix), (m) => m.length >= 1);
    expect(recorded?.key).toBe(pseudonym);
    expect(eventCodec.decode(recorded?.value as Buffer)).toMatchObject({ outcome: 'sent', candidateKey: pseudonym });
    const bytes = [recorded?.key, recorded?.value?.toString('latin1'), ...Object.values(recorded?.headers ?? {})];
    expect(bytes.join('\n')).not.toMatch(/pia@|pia%40/i);
    // Asked by the address (any spelling), the API finds the candidate by the same key.
    const check = await app.inject({
      url: `/v1/sends/check?campaignId=camp-p&candidateId=${encodeURIComponent('PIA@example.com\u200b')}&step=intro`,
      headers: auth,
    });
    expect(check.json()).toMatchObject({ alreadySent: true, existing: { candidateKey: pseudonym } });
    // No campaign is recorded under an id holding an address: a 400 naming the field, not the value.
    for (const url of ['/v1/campaigns/ivan%40leak.example/pause', '/v1/campaigns/ivan%E2%80%8B%40leak.example/pause']) {
      const paused = await app.inject({ method: 'POST', url, headers: auth, payload: {} });
      expect(paused.statusCode, url).toBe(400);
      expect(paused.body).toMatch(/campaignId must not contain an at-sign/);
      expect(paused.body).not.toMatch(/leak/);
    }
  });

  it('refuses to start without an emailHash key, naming the variable', async () => {
    t = await senderTestEnv(infra);
    const proc = t.startProcess({ EMAIL_HASH_KEY: '', EMAIL_HASH_KEY_ID: '' });
    expect(await proc.exited).toBe(78);
    expect(proc.stderrLines.join('\n')).toMatch(/EMAIL_HASH_KEY_FILE is required/);
  });
});
