/**
 * Mailgun's webhooks as delivery evidence (issue #32, ADR 009), through the whole sender: Kafka in,
 * the real SmtpProvider against the SMTP test server, PostgreSQL state, and `POST
 * /v1/feedback/mailgun` signed as Mailgun signs (HMAC-SHA256 of timestamp + token under the webhook
 * signing key). A send whose connection was cut after the final dot is `ambiguous` with its message
 * at the server; Mailgun's signed `delivered` or `accepted` naming its signed Message-ID settles it
 * `sent`, and no second copy is made. Copies are counted at the server, never in the code under test.
 *
 * The attacker's side: another key, a stale signature, the bare `<sendId@domain>` anyone can compute,
 * our signed id reported for another recipient, the same delivery again, a captured signature carrying
 * another event (Mailgun signs the timestamp and token, not the event), garbage floods, deep nesting
 * and oversized bodies. Mailgun's failures and complaints are recorded and suppress nothing here.
 */
import { randomUUID } from 'node:crypto';
import { waitFor } from '@outreach/testkit';
import type { FastifyInstance } from 'fastify';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import type {} from '../src/plugins/sender.js';
import { mailgunEventData, mailgunWebhook, signMailgunWebhook } from './fixtures/feedback-fixtures.js';
import { messageIdOf, senderTestEnv, sendRequested, type SenderTestEnv } from './harness.js';

const infra = { kafkaBrokers: inject('kafkaBrokers'), databaseUrl: inject('databaseUrl') };
const SIGNING_KEY = 'test-mailgun-signing-key-0123456789abcdef';
const CAMPAIGN = `mailgun-evidence-${randomUUID().slice(0, 8)}`;

let t: SenderTestEnv;
let app: FastifyInstance;
/** Addresses and the sendId of the one email each was sent. */
const sendOf = new Map<string, string>();

interface Row {
  readonly status: string;
  readonly attempts: number;
  readonly reason: string | null;
}

async function rowOf(address: string): Promise<Row | undefined> {
  return (
    await t.query<Row>('SELECT status, attempts, reason FROM sends WHERE send_id = $1', [sendOf.get(address)])
  )[0];
}

async function until(address: string, status: string): Promise<Row> {
  let last: Row | undefined;
  await waitFor(
    async () => {
      last = await rowOf(address);
      return last?.status === status;
    },
    { timeoutMs: 30_000, description: `the send to ${address} to become ${status}` },
  ).catch((error: unknown) => {
    throw new Error(`${String(error)}; last ${JSON.stringify(last)}`);
  });
  return last as Row;
}

/** Our signed Message-ID of the send to `address`, as Mailgun reports it: without brackets. */
const reportedId = (address: string) => messageIdOf(sendOf.get(address) as string).slice(1, -1);

const post = (target: FastifyInstance, body: string) =>
  target.inject({
    method: 'POST',
    url: '/v1/feedback/mailgun',
    headers: { 'content-type': 'application/json' },
    payload: body,
  });

/** A Mailgun event for `address` naming `messageId`, signed now under the signing key (a fresh token). */
const signedEvent = (
  address: string,
  fields: { event: string; messageId?: string; id?: string; severity?: 'permanent' | 'temporary' },
) => mailgunWebhook(SIGNING_KEY, mailgunEventData({ recipient: address, ...fields }), signMailgunWebhook(SIGNING_KEY));

async function metric(target: FastifyInstance, name: string, labels: Record<string, string>): Promise<number> {
  const values = (await target.metrics.getSingleMetric(name)?.get())?.values ?? [];
  return values
    .filter((v) => Object.entries(labels).every(([k, value]) => v.labels[k] === value))
    .reduce((sum, v) => sum + v.value, 0);
}
const evidence = (outcome: string) =>
  metric(app, 'outreach_sender_delivery_evidence_total', { source: 'mailgun', outcome });
const settledFromAmbiguous = () =>
  metric(app, 'outreach_sender_settled_by_evidence_total', { source: 'mailgun', from: 'ambiguous' });

/** Publishes one request for `address` and waits for its send to reach `status`. */
async function sendTo(address: string, status: string): Promise<void> {
  const request = sendRequested({ campaignId: CAMPAIGN, candidateId: address.split('@')[0] as string, email: address });
  sendOf.set(address, request.sendId);
  await t.publishRequests([request]);
  await until(address, status);
}

beforeAll(async () => {
  t = await senderTestEnv(infra, {
    // Transactions 1 and 3 lose the answer to the final dot: the server holds the message, the
    // sender cannot know it (ambiguous; no lookup is configured, so nothing else settles it).
    sink: { hostile: (n) => (n === 1 || n === 3 ? { at: 'dot', act: 'drop' } : undefined) },
    env: { MAILGUN_WEBHOOK_SIGNING_KEY: SIGNING_KEY },
  });
  app = await t.startApp();
  await sendTo('ada@example.com', 'ambiguous');
  await sendTo('bob@example.com', 'sent');
  await sendTo('cy@example.com', 'ambiguous');
  expect(t.sink.misbehaved).toHaveLength(2);
  for (const address of sendOf.keys()) expect(t.sink.deliveredTo(address), address).toHaveLength(1);
}, 90_000);

afterAll(async () => {
  await t?.cleanup();
});

describe('Mailgun webhooks settle sends in doubt', () => {
  it('a forged or stale signature is refused (403) and changes nothing', async () => {
    const event = mailgunEventData({
      event: 'delivered',
      recipient: 'ada@example.com',
      messageId: reportedId('ada@example.com'),
    });
    const seconds = String(Math.floor(Date.now() / 1000));
    const forged = [
      mailgunWebhook(SIGNING_KEY, event, signMailgunWebhook('not-the-signing-key-0123456789abcdef', seconds)),
      mailgunWebhook(SIGNING_KEY, event, signMailgunWebhook(SIGNING_KEY, String(Number(seconds) - 3600))),
      mailgunWebhook(SIGNING_KEY, event, { ...signMailgunWebhook(SIGNING_KEY, seconds), token: 'a'.repeat(50) }),
      mailgunWebhook(SIGNING_KEY, event, null),
      JSON.stringify({ 'event-data': event }),
    ];
    for (const body of forged) {
      const answer = await post(app, body);
      expect(answer.statusCode, body.slice(0, 200)).toBe(403);
      expect(answer.json().message).toMatch(/^Mailgun signature/);
    }
    expect(await rowOf('ada@example.com')).toMatchObject({ status: 'ambiguous', attempts: 1 });
    expect(await evidence('settled')).toBe(0);
    expect(await t.query('SELECT 1 FROM feedback_events WHERE source = $1', ['mailgun'])).toHaveLength(0);
  });

  it('the bare <sendId@domain> anyone can compute, or our signed id for another recipient, settles nothing', async () => {
    const bare = await post(
      app,
      signedEvent('ada@example.com', {
        event: 'delivered',
        messageId: `${sendOf.get('ada@example.com')}@outreach.local`,
      }),
    );
    expect(bare.statusCode, bare.body).toBe(200);
    expect(bare.json()).toMatchObject({ received: 1, new: 1, unverified: 1 });
    const elsewhere = await post(
      app,
      signedEvent('eve@example.com', { event: 'delivered', messageId: reportedId('ada@example.com') }),
    );
    expect(elsewhere.statusCode, elsewhere.body).toBe(200);
    expect(elsewhere.json()).toMatchObject({ received: 1, new: 1, unverified: 0 });
    await app.reconciler.sweep();
    expect(await rowOf('ada@example.com')).toMatchObject({ status: 'ambiguous', attempts: 1 });
    expect(await evidence('settled')).toBe(0);
    expect(await evidence('kept')).toBe(0);
  });

  it("a signed delivered naming the send's signed Message-ID settles it sent, one copy at the server", async () => {
    const answer = await post(
      app,
      signedEvent('ada@example.com', {
        event: 'delivered',
        messageId: reportedId('ada@example.com'),
        id: 'ada-delivered-1',
      }),
    );
    expect(answer.statusCode, answer.body).toBe(200);
    expect(answer.json()).toEqual({ received: 1, new: 1, suppressed: 0, softBounced: 0, ignored: 0, unverified: 0 });
    expect(await rowOf('ada@example.com')).toEqual({
      status: 'sent',
      attempts: 1,
      reason: 'settled by delivery evidence (mailgun)',
    });
    expect(await evidence('settled')).toBe(1);
    expect(await settledFromAmbiguous()).toBe(1);
    await app.reconciler.sweep();
    await app.reconciler.sweep();
    expect(t.sink.deliveredTo('ada@example.com')).toHaveLength(1);
    expect(await rowOf('ada@example.com')).toMatchObject({ status: 'sent', attempts: 1 });
  });

  it('the same delivery again, the same event re-signed, or its signature carrying another event, changes nothing more', async () => {
    const event = mailgunEventData({
      event: 'delivered',
      recipient: 'ada@example.com',
      messageId: reportedId('ada@example.com'),
      id: 'ada-delivered-2',
    });
    const signature = signMailgunWebhook(SIGNING_KEY);
    const body = mailgunWebhook(SIGNING_KEY, event, signature);
    expect((await post(app, body)).json()).toMatchObject({ new: 1 });
    // The same request again: its token was taken.
    const replayed = await post(app, body);
    expect(replayed.statusCode).toBe(403);
    expect(replayed.json().message).toBe('Mailgun signature token already used');
    // Mailgun's retry of the same event under a fresh signature: seen before (its event id).
    const retried = await post(app, mailgunWebhook(SIGNING_KEY, event, signMailgunWebhook(SIGNING_KEY)));
    expect(retried.statusCode).toBe(200);
    expect(retried.json()).toMatchObject({ received: 1, new: 0 });
    // A captured signature with an event of the attacker's choosing (here, for cy's send in doubt).
    const captured = await post(
      app,
      mailgunWebhook(
        SIGNING_KEY,
        mailgunEventData({ event: 'delivered', recipient: 'cy@example.com', messageId: reportedId('cy@example.com') }),
        signature,
      ),
    );
    expect(captured.statusCode).toBe(403);
    expect(await rowOf('cy@example.com')).toMatchObject({ status: 'ambiguous', attempts: 1 });
    expect(await evidence('settled')).toBe(1);
    expect(await settledFromAmbiguous()).toBe(1);
    expect(t.sink.deliveredTo('ada@example.com')).toHaveLength(1);
  });

  it("Mailgun's accepted (it took the message for delivery) settles too", async () => {
    const answer = await post(
      app,
      signedEvent('cy@example.com', { event: 'accepted', messageId: reportedId('cy@example.com') }),
    );
    expect(answer.statusCode, answer.body).toBe(200);
    expect(await rowOf('cy@example.com')).toEqual({
      status: 'sent',
      attempts: 1,
      reason: 'settled by delivery evidence (mailgun)',
    });
    expect(await settledFromAmbiguous()).toBe(2);
    await app.reconciler.sweep();
    expect(t.sink.deliveredTo('cy@example.com')).toHaveLength(1);
  });

  it('evidence for a send that is not in doubt is kept, and changes nothing of it', async () => {
    const before = await rowOf('bob@example.com');
    expect(before?.status).toBe('sent');
    const kept = await evidence('kept');
    const answer = await post(
      app,
      signedEvent('bob@example.com', { event: 'delivered', messageId: reportedId('bob@example.com') }),
    );
    expect(answer.statusCode, answer.body).toBe(200);
    expect(await evidence('kept')).toBe(kept + 1);
    expect(await settledFromAmbiguous()).toBe(2);
    expect(await rowOf('bob@example.com')).toEqual(before);
    const stored = await t.query<{ decision: string; kind: string }>(
      'SELECT decision, kind FROM feedback_events WHERE source = $1 AND send_id = $2',
      ['mailgun', sendOf.get('bob@example.com')],
    );
    expect(stored).toEqual([{ decision: 'evidence', kind: 'delivered' }]);
  });

  it("Mailgun's failures and complaints are recorded and suppress nothing", async () => {
    for (const fields of [
      { event: 'failed', severity: 'permanent' as const },
      { event: 'failed', severity: 'temporary' as const },
      { event: 'complained' },
    ]) {
      const answer = await post(
        app,
        signedEvent('bob@example.com', { ...fields, messageId: reportedId('bob@example.com') }),
      );
      expect(answer.statusCode, answer.body).toBe(200);
      expect(answer.json()).toMatchObject({ new: 1, suppressed: 0 });
    }
    expect(await t.query('SELECT 1 FROM suppressions WHERE email_norm = $1', ['bob@example.com'])).toHaveLength(0);
    expect(await rowOf('bob@example.com')).toMatchObject({ status: 'sent' });
  });
});

describe('the Mailgun route: configuration, bodies and limits', () => {
  it('without a signing key it is off (404)', async () => {
    const off = await t.startApp({ MAILGUN_WEBHOOK_SIGNING_KEY: '' });
    const answer = await post(off, signedEvent('ada@example.com', { event: 'delivered' }));
    expect(answer.statusCode).toBe(404);
    expect(answer.json().message).toMatch(/not configured/);
  });

  it('a body past 256 KiB is 413, 10,000 nested arrays and a non-object are 400 with the reason', async () => {
    const padded = mailgunWebhook(
      SIGNING_KEY,
      { ...mailgunEventData({ event: 'delivered', recipient: 'ada@example.com' }), padding: 'x'.repeat(256 * 1024) },
      signMailgunWebhook(SIGNING_KEY),
    );
    expect((await post(app, padded)).statusCode).toBe(413);
    const nested = await post(app, '['.repeat(10_000) + ']'.repeat(10_000));
    expect(nested.statusCode).toBe(400);
    expect(nested.json().message).toMatch(/nested deeper than 64 levels/);
    const deepEvent = await post(
      app,
      `{"signature":${JSON.stringify(signMailgunWebhook(SIGNING_KEY))},"event-data":${'['.repeat(10_000)}${']'.repeat(10_000)}}`,
    );
    expect(deepEvent.statusCode).toBe(400);
    const notObject = await post(app, '[]');
    expect(notObject.statusCode).toBe(400);
    expect(notObject.json().message).toBe('Mailgun body is not a JSON object');
    // Verified, but the event malformed: 400 with the reason.
    const badEvent = await post(
      app,
      mailgunWebhook(
        SIGNING_KEY,
        { ...mailgunEventData({ event: 'delivered', recipient: 'ada@example.com' }), recipient: ['ada@example.com'] },
        signMailgunWebhook(SIGNING_KEY),
      ),
    );
    expect(badEvent.statusCode).toBe(400);
    expect(badEvent.json().message).toMatch(/event-data.recipient/);
  });

  it('garbage uses up only its client address; a replayed signature only its own bucket; a signed delivery goes through', async () => {
    const limited = await t.startApp({ MAILGUN_WEBHOOK_SIGNING_KEY: SIGNING_KEY, RATE_LIMIT_MAX: '5' });
    const statuses: number[] = [];
    for (let i = 0; i < 20; i++) statuses.push((await post(limited, `{"garbage":${i}}`)).statusCode);
    expect(statuses.slice(0, 5)).toEqual([403, 403, 403, 403, 403]);
    expect(statuses.slice(5).every((s) => s === 429)).toBe(true);
    // One captured signature replayed: 403 (its token taken) until its own bucket is full, then 503.
    const body = signedEvent('bob@example.com', { event: 'delivered', messageId: reportedId('bob@example.com') });
    const replays: number[] = [];
    for (let i = 0; i < 8; i++) replays.push((await post(limited, body)).statusCode);
    expect(replays).toEqual([200, 403, 403, 403, 403, 503, 503, 503]);
    // Another signed delivery is taken whatever came before.
    const fresh = await post(
      limited,
      signedEvent('bob@example.com', { event: 'accepted', messageId: reportedId('bob@example.com') }),
    );
    expect(fresh.statusCode, fresh.body).toBe(200);
    expect(fresh.json()).toMatchObject({ received: 1, new: 1 });
  });
});
