/**
 * Attacks on delivery evidence (issue #32, ADR 009 "Delivery evidence", docs/guarantees.md "Delivery
 * evidence settles sends in doubt"), from outside, against the real sender: Kafka in, PostgreSQL
 * state, the real SmtpProvider against the SMTP test server, and the evidence posted to the sender's
 * own routes as SendGrid, SNS and the bounce mailbox's hook post it. The DSN's content is the
 * attacker's (anyone can mail one into the bounce mailbox); the SendGrid and SNS signatures are not.
 *
 * What the user would see is counted: copies at the SMTP server, the send's status and reason in
 * PostgreSQL, SendRecorded on Kafka, the HTTP status. A send made ambiguous by a reset mid-body has
 * no copy anywhere, so "sent" for it is an email lost for good; one made ambiguous by a drop after
 * the final dot has one copy, so a retry of it is a second email.
 *
 * Each test asserts the safe behaviour. Tests named "fixed attack:" broke the promise when this file was
 * written (the outside attacker's round of issue #32) and hold since the fixes; they
 * are the findings of this attack, kept as the regression tests of their fixes.
 */
import { randomUUID } from 'node:crypto';
import type { Logger } from '@outreach/shared';
import { waitFor, type SmtpHostility } from '@outreach/testkit';
import type { FastifyInstance } from 'fastify';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { EvidenceLookup } from '../src/adapters/providers/evidence-lookup.js';
import type { DeliveryLookup } from '../src/adapters/providers/lookup.js';
import { Reconciler } from '../src/workflow/reconciler.js';
import type { SendPipeline } from '../src/workflow/send-pipeline.js';
import { identifierOf, startEvidenceEnv, type EvidenceEnv } from './evidence-env.js';
import {
  deliveryStatusNotification,
  sesNotification,
  signSendGridWebhook,
  type DsnOptions,
} from './fixtures/feedback-fixtures.js';
import { API_TOKEN, messageIdOf, type SenderTestEnv } from './harness.js';

const infra = { kafkaBrokers: inject('kafkaBrokers'), databaseUrl: inject('databaseUrl') };
const operate = { authorization: `Bearer ${API_TOKEN}` };
const DOMAIN = 'outreach.local';
/** FEEDBACK_MAX_BODY_BYTES as this sender runs (small, so the limit is cheap to reach). */
const MAX_BODY_BYTES = 256 * 1024;

let e: EvidenceEnv;
let t: SenderTestEnv;
let app: FastifyInstance;
/** What the SMTP server does in transaction n (counted at MAIL FROM); it behaves in every other. */
let plans: Map<number, SmtpHostility>;

const rowOf = (sendId: string) => e.rowOf(sendId);
const until = (sendId: string, statuses: string | readonly string[], timeoutMs?: number) =>
  e.until(sendId, statuses, timeoutMs);
const copiesTo = (email: string) => e.copiesTo(email);
const metric = (name: string, labels: Record<string, string>) => e.metric(name, labels);
const recordedFor = (sendId: string, count: number) => e.recordedFor(sendId, count);
const postSignedSendGrid = (body: string, timestamp?: string) => e.postSignedSendGrid(body, timestamp);
const postSes = (message: string) => e.postSes(message);
const postRawDsn = (payload: string | Buffer) => e.postRawDsn(payload);

/** One request to `email`, the SMTP server doing `hostility` in its transaction; returns its sendId. */
const request = (email: string, hostility?: SmtpHostility, campaignId = `atk-${randomUUID().slice(0, 8)}`) =>
  e.request(email, campaignId, hostility);

/** A send in doubt with one copy at the server (the connection dropped after the final dot). */
async function ambiguousDelivered(email: string, campaignId?: string) {
  const sent = await request(email, { at: 'dot', act: 'drop' }, campaignId);
  await until(sent.sendId, 'ambiguous');
  expect(copiesTo(email)).toBe(1);
  return sent;
}

/** A send in doubt with no copy anywhere (the connection reset mid-body): "sent" for it loses the email. */
async function ambiguousUndelivered(email: string) {
  const sent = await request(email, { at: 'body', act: 'reset' });
  await until(sent.sendId, 'ambiguous');
  expect(copiesTo(email)).toBe(0);
  return sent;
}

/** A signed SendGrid delivery of `events` (each gets a fresh sg_event_id unless it has one). */
function postSendGrid(events: ReadonlyArray<Record<string, unknown>>, timestamp = Math.floor(Date.now() / 1000)) {
  const body = JSON.stringify(events.map((x) => ({ timestamp, sg_event_id: randomUUID(), ...x })));
  return postSignedSendGrid(body, String(timestamp));
}

const sgEvent = (email: string, messageId: string, event = 'delivered') => ({
  email,
  event,
  'smtp-id': messageId,
  sg_message_id: `sg-${randomUUID().slice(0, 8)}.filter0001`,
});

/** One message from the bounce mailbox, as the hook posts it; `withoutOwnMessageId` drops the report's own Message-ID. */
function postDsn(options: DsnOptions, { withoutOwnMessageId = false } = {}) {
  let payload = deliveryStatusNotification({
    reportMessageId: `<dsn-${randomUUID()}@mx.relay.test>`,
    returned: options.originalMessageId === undefined ? 'none' : 'headers',
    ...options,
  });
  // The report's own header comes before any returned message's, so the first one is its own.
  if (withoutOwnMessageId) payload = payload.replace(/^Message-ID: [^\r\n]*\r\n/m, '');
  return postRawDsn(payload);
}

const delivered = (address: string, extra: Partial<DsnOptions['recipients'][number]> = {}) => ({
  address,
  action: 'delivered',
  status: '2.0.0',
  ...extra,
});

async function suppressed(email: string): Promise<boolean> {
  const rows = await t.query<{ n: number }>(`SELECT count(*)::int AS n FROM suppressions WHERE email_norm = $1`, [
    email,
  ]);
  return (rows[0]?.n ?? 0) > 0;
}

/** Rows a plan (EXPLAIN ANALYZE, FORMAT JSON) read from `table`: returned plus removed by its filters. */
function rowsReadFrom(table: string, plan: unknown): number {
  let total = 0;
  const visit = (node: Record<string, unknown>) => {
    if (node['Relation Name'] === table) {
      const loops = Number(node['Actual Loops'] ?? 1);
      total += (Number(node['Actual Rows'] ?? 0) + Number(node['Rows Removed by Filter'] ?? 0)) * loops;
    }
    for (const child of (node.Plans as Array<Record<string, unknown>> | undefined) ?? []) visit(child);
  };
  for (const root of (plan as Array<{ Plan: Record<string, unknown> }> | undefined) ?? []) visit(root.Plan);
  return total;
}

const resolveRetry = (sendId: string) =>
  app.inject({
    method: 'POST',
    url: `/v1/sends/${sendId}/resolve`,
    headers: operate,
    payload: { resolution: 'retry' },
  });

beforeAll(async () => {
  e = await startEvidenceEnv(infra, { FEEDBACK_MAX_BODY_BYTES: String(MAX_BODY_BYTES) });
  ({ t, app, plans } = e);
});

afterAll(async () => {
  await e?.cleanup();
});

describe('attacks on delivery evidence', { timeout: 90_000 }, () => {
  it('a recipient holding only their own verified identifier cannot settle, nor suppress, another recipient’s send', async () => {
    const victim = 'vic@example.com';
    const v = await ambiguousUndelivered(victim);
    // The attacker is mailed too, and reads their own Message-ID and ENVID off the message.
    const attacker = 'mallory@evil.test';
    const m = await request(attacker);
    await until(m.sendId, 'sent');
    const own = t.sink.deliveredTo(attacker)[0];
    const ownMessageId = own?.messageId as string;
    const ownEnvid = own?.envelopeId as string;
    expect(ownMessageId).toBe(messageIdOf(m.sendId));
    expect(ownEnvid).toBe(identifierOf(m.sendId));
    const [, keyId, mac] = ownEnvid.split('.') as [string, string, string];
    // The victim's sendId is computable (a UUIDv5 of public facts); the attacker grafts their MAC onto it.
    const grafted = `${v.sendId}.${keyId}.${mac}`;

    const attempts: DsnOptions[] = [
      // Their valid Message-ID / ENVID, about the victim's address.
      { recipients: [delivered(victim)], originalMessageId: ownMessageId },
      { recipients: [delivered(victim)], originalEnvelopeId: ownEnvid },
      // Two groups: the victim, and the attacker (whom the identifier does name).
      { recipients: [delivered(victim), delivered(attacker)], originalMessageId: ownMessageId },
      { recipients: [delivered(attacker), delivered(victim)], originalEnvelopeId: ownEnvid },
      // Original-Recipient the victim, Final-Recipient the attacker, and the reverse.
      { recipients: [delivered(attacker, { originalRecipient: victim })], originalMessageId: ownMessageId },
      { recipients: [delivered(victim, { originalRecipient: attacker })], originalEnvelopeId: ownEnvid },
      // An x400 Original-Recipient, so the Final-Recipient (the victim) is read.
      { recipients: [delivered(victim, { addressType: 'x400' })], originalEnvelopeId: ownEnvid },
      // Their MAC grafted onto the victim's sendId, in every place and spelling, and as relayed/expanded.
      { recipients: [delivered(victim)], originalEnvelopeId: grafted },
      { recipients: [delivered(victim)], originalEnvelopeId: grafted.toUpperCase() },
      { recipients: [delivered(victim)], originalMessageId: `<${grafted}@${DOMAIN}>` },
      { recipients: [delivered(victim)], originalMessageId: `<${grafted.toUpperCase()}@${DOMAIN.toUpperCase()}>` },
      { recipients: [delivered(victim, { action: 'relayed' })], originalEnvelopeId: grafted },
      { recipients: [delivered(victim, { action: 'expanded' })], originalEnvelopeId: grafted },
      // The victim's bare, computable Message-ID next to the attacker's valid ENVID.
      { recipients: [delivered(victim)], originalEnvelopeId: ownEnvid, originalMessageId: `<${v.sendId}@${DOMAIN}>` },
      // The attacker's valid id first in a Message-ID field that also names the grafted one.
      { recipients: [delivered(victim)], originalMessageId: `<${ownEnvid}@${DOMAIN}> <${grafted}@${DOMAIN}>` },
      // A hard bounce for the victim under the attacker's identifier: must not suppress the victim.
      {
        recipients: [{ address: victim, action: 'failed', status: '5.1.1', diagnosticCode: 'smtp; 550 5.1.1 unknown' }],
        originalMessageId: ownMessageId,
      },
    ];
    for (const options of attempts) {
      const answer = await postDsn(options);
      expect(answer.statusCode, JSON.stringify(options)).toBe(200);
    }
    await app.reconciler.sweep();
    expect(await rowOf(v.sendId)).toMatchObject({ status: 'ambiguous', attempts: 1 });
    expect(await suppressed(victim)).toBe(false);
    expect(copiesTo(victim)).toBe(0);
    expect((await recordedFor(v.sendId, 1)).map((e) => e.outcome)).toEqual(['ambiguous']);
    // The attacker's own send is untouched: sent once, by its own 250.
    expect(await rowOf(m.sendId)).toMatchObject({ status: 'sent', reason: null });
    expect(copiesTo(attacker)).toBe(1);
  });

  it('spellings a relay could return settle the send; look-alikes of its identifier do not', async () => {
    // Look-alikes of the victim's own valid identifier: none of them is it.
    const email = 'look@example.com';
    const a = await ambiguousUndelivered(email);
    const id = identifierOf(a.sendId);
    const lookAlikes: DsnOptions[] = [
      { recipients: [delivered(email)], originalEnvelopeId: `${id}x` },
      { recipients: [delivered(email)], originalEnvelopeId: `${id}.1` },
      { recipients: [delivered(email)], originalEnvelopeId: `${id}+2B` },
      { recipients: [delivered(email)], originalEnvelopeId: `x${id}` },
      { recipients: [delivered(email)], originalEnvelopeId: id.slice(0, -1) },
      { recipients: [delivered(email)], originalMessageId: `<${id}@${DOMAIN}.>` },
      { recipients: [delivered(email)], originalMessageId: `<${id}@mx.${DOMAIN}>` },
      { recipients: [delivered(email)], originalMessageId: `<${id}@${DOMAIN}.evil.test>` },
      { recipients: [delivered(email)], originalMessageId: `<${id}x@${DOMAIN}>` },
      // The right identifier about a plus-addressed or look-alike recipient.
      { recipients: [delivered('look+x@example.com')], originalEnvelopeId: id },
      { recipients: [delivered('look@example.com.evil.test')], originalEnvelopeId: id },
      { recipients: [delivered('look@examp1e.com')], originalEnvelopeId: id },
      // Not a status that says it went out.
      { recipients: [{ address: email, action: 'delayed', status: '4.4.1' }], originalEnvelopeId: id },
      { recipients: [{ address: email, action: 'Delivered-ish', status: '2.0.0' }], originalEnvelopeId: id },
      { recipients: [{ address: email, action: 'failed', status: '4.4.7' }], originalEnvelopeId: id },
    ];
    for (const options of lookAlikes) expect((await postDsn(options)).statusCode, JSON.stringify(options)).toBe(200);
    expect((await postSendGrid([sgEvent('look+x@example.com', messageIdOf(a.sendId))])).statusCode).toBe(200);
    expect((await postSendGrid([sgEvent(email, messageIdOf(a.sendId), 'deferred')])).statusCode).toBe(200);
    expect((await postSendGrid([sgEvent(email, messageIdOf(a.sendId), 'open')])).statusCode).toBe(200);
    await app.reconciler.sweep();
    expect(await rowOf(a.sendId)).toMatchObject({ status: 'ambiguous' });
    expect(copiesTo(email)).toBe(0);

    // What relays do return: the ENVID upper-cased, the Message-ID's domain (and MAC) upper-cased,
    // whitespace around it, SendGrid's address in another case: each settles its send (one copy each).
    const spellings: Array<(sendId: string, email: string) => ReturnType<typeof postDsn>> = [
      (sendId, to) => postDsn({ recipients: [delivered(to)], originalEnvelopeId: identifierOf(sendId).toUpperCase() }),
      (sendId, to) =>
        postDsn({
          recipients: [delivered(to)],
          originalMessageId: `<${identifierOf(sendId).toUpperCase()}@${DOMAIN.toUpperCase()}>`,
        }),
      (sendId, to) =>
        postDsn({
          recipients: [delivered(to.toUpperCase())],
          originalMessageId: ` <${identifierOf(sendId)}@${DOMAIN}> `,
        }),
      (sendId, to) => postSendGrid([sgEvent(to.toUpperCase(), messageIdOf(sendId).toUpperCase())]),
    ];
    for (const [i, post] of spellings.entries()) {
      const to = `spelled-${i}@example.com`;
      const { sendId } = await ambiguousDelivered(to);
      expect((await post(sendId, to)).statusCode).toBe(200);
      expect(await rowOf(sendId), `spelling ${i}`).toMatchObject({ status: 'sent' });
      expect(copiesTo(to)).toBe(1);
    }
  });

  it('SES Delivery naming the send among other recipients settles only that send; event times in the future or the far past change nothing', async () => {
    const target = 'ses-target@example.com';
    const bystander = 'ses-bystander@example.com';
    const a = await ambiguousUndelivered(target);
    const b = await ambiguousUndelivered(bystander);
    // a's Message-ID, b not named by any identifier: b is a bystander in the list.
    const answer = await postSes(
      sesNotification({
        type: 'Delivery',
        recipients: [bystander, target, 'x@example.org'],
        messageId: messageIdOf(a.sendId),
      }),
    );
    expect(answer.statusCode).toBe(200);
    expect(await rowOf(a.sendId)).toMatchObject({ status: 'sent', reason: 'settled by delivery evidence (ses)' });
    expect(await rowOf(b.sendId)).toMatchObject({ status: 'ambiguous' });

    // SendGrid events stamped in 2100 and in 1970, inside a correctly signed batch.
    const future = await ambiguousDelivered('sg-future@example.com');
    const past = await ambiguousDelivered('sg-past@example.com');
    const body = JSON.stringify([
      {
        ...sgEvent('sg-future@example.com', messageIdOf(future.sendId)),
        timestamp: 4_102_444_800,
        sg_event_id: randomUUID(),
      },
      { ...sgEvent('sg-past@example.com', messageIdOf(past.sendId)), timestamp: 1, sg_event_id: randomUUID() },
    ]);
    expect((await postSignedSendGrid(body)).statusCode).toBe(200);
    expect(await rowOf(future.sendId)).toMatchObject({ status: 'sent' });
    expect(await rowOf(past.sendId)).toMatchObject({ status: 'sent' });
    const [latest] = await t.query<{ ok: boolean }>(
      `SELECT bool_and(occurred_at <= now()) AS ok FROM feedback_events WHERE send_id = $1`,
      [future.sendId],
    );
    expect(latest?.ok).toBe(true);
    // A signed timestamp outside the replay window is refused, whatever the events say.
    const stale = await ambiguousDelivered('sg-stale@example.com');
    const old = await postSendGrid(
      [sgEvent('sg-stale@example.com', messageIdOf(stale.sendId))],
      Math.floor(Date.now() / 1000) - 3600,
    );
    expect(old.statusCode).toBe(403);
    expect(await rowOf(stale.sendId)).toMatchObject({ status: 'ambiguous' });
  });

  it('fixed attack: evidence that came before a send was ever attempted does not settle its later attempt that reached nobody', async () => {
    // Held by its campaign's pause before its first fence: attempts 0, nothing of it has left us.
    const email = 'early@example.com';
    const campaignId = `atk-early-${randomUUID().slice(0, 8)}`;
    expect(
      (await app.inject({ method: 'POST', url: `/v1/campaigns/${campaignId}/pause`, headers: operate, payload: {} }))
        .statusCode,
    ).toBe(200);
    const { sendId } = await request(email, undefined, campaignId);
    expect(await until(sendId, 'held')).toMatchObject({ attempts: 0 });
    // A "delivered" naming it with a verifying identifier: refused now (never_attempted) ...
    expect(
      (await postDsn({ recipients: [delivered(email)], originalEnvelopeId: identifierOf(sendId) })).statusCode,
    ).toBe(200);
    expect(await rowOf(sendId)).toMatchObject({ status: 'held', attempts: 0 });
    // ... then the first attempt is cut mid-body: no copy anywhere, the send is in doubt.
    plans.set(t.sink.transactions + 1, { at: 'body', act: 'reset' });
    const resume = await app.inject({
      method: 'POST',
      url: `/v1/campaigns/${campaignId}/resume`,
      headers: operate,
      payload: {},
    });
    expect(resume.json()).toMatchObject({ released: 1 });
    await waitFor(async () => (await rowOf(sendId))?.attempts === 1 && (await rowOf(sendId))?.status !== 'sending', {
      timeoutMs: 20_000,
      description: 'the first attempt recorded',
    });
    await app.reconciler.sweep();
    // The report came before any message of this send existed: it is no evidence about this attempt.
    const row = await rowOf(sendId);
    expect({ status: row?.status, reason: row?.reason, copies: copiesTo(email) }).toMatchObject({
      status: 'ambiguous',
      copies: 0,
    });
  });

  it('fixed attack: evidence that came before a send was ever attempted does not cancel the retry of a first attempt the server refused', async () => {
    const email = 'early-retry@example.com';
    const campaignId = `atk-early-${randomUUID().slice(0, 8)}`;
    await app.inject({ method: 'POST', url: `/v1/campaigns/${campaignId}/pause`, headers: operate, payload: {} });
    const { sendId } = await request(email, undefined, campaignId);
    await until(sendId, 'held');
    expect(
      (await postDsn({ recipients: [delivered(email)], originalEnvelopeId: identifierOf(sendId) })).statusCode,
    ).toBe(200);
    // The first attempt: the server drops the connection after RCPT, before DATA. Certainly not sent: a retry.
    plans.set(t.sink.transactions + 1, { at: 'rcpt', act: 'drop' });
    await app.inject({ method: 'POST', url: `/v1/campaigns/${campaignId}/resume`, headers: operate, payload: {} });
    const row = await until(sendId, ['sent', 'failed'], 30_000);
    // The retry goes out and is recorded by its own 250: the candidate gets the email, once.
    expect({ ...row, copies: copiesTo(email) }).toMatchObject({ status: 'sent', reason: null, copies: 1 });
  });

  it('fixed attack: a "delivered" naming a send whose every attempt the server refused before DATA does not record it sent', async () => {
    // Each attempt: the server takes MAIL FROM (with the ENVID) and RCPT, then drops the connection
    // before DATA. Certainly not sent, each time; retried until MAX_ATTEMPTS (5), then failed. The
    // identifier left us in MAIL FROM: the relay, or anyone reading a cleartext session to it, has it.
    const email = 'refused@example.com';
    // The plans below are by transaction number: no earlier test's retry may take one of them.
    await waitFor(
      async () =>
        ((
          await t.query<{ n: number }>(`SELECT count(*)::int AS n FROM sends WHERE status IN ('claimed', 'sending')`)
        )[0]?.n ?? 0) === 0,
      { timeoutMs: 30_000, description: 'no other send in flight' },
    );
    const first = t.sink.transactions + 1;
    // Ten: a reused connection that fails before the body is retried on a fresh one within the same
    // attempt (the provider's stale-connection rule), so five attempts can take up to ten transactions.
    for (let n = first; n < first + 10; n++) plans.set(n, { at: 'rcpt', act: 'drop' });
    try {
      const { sendId } = await request(email);
      await waitFor(async () => ((await rowOf(sendId))?.attempts ?? 0) >= 1, {
        timeoutMs: 20_000,
        description: 'the first refused attempt',
      });
      expect(
        (await postDsn({ recipients: [delivered(email)], originalEnvelopeId: identifierOf(sendId) })).statusCode,
      ).toBe(200);
      const row = await until(sendId, ['sent', 'failed'], 30_000);
      // No message of it ever left us: "sent" would lose the email for good; failed says what happened.
      expect({ status: row.status, reason: row.reason, copies: copiesTo(email) }).toMatchObject({
        status: 'failed',
        copies: 0,
      });
    } finally {
      for (let n = first; n < first + 10; n++) if (n > t.sink.transactions) plans.delete(n);
    }
  });

  it('fixed attack: a DSN the attacker mailed first under the report Message-ID the relay will use does not shadow the relay’s real one', async () => {
    const email = 'shadow@example.com';
    const { sendId } = await ambiguousDelivered(email);
    const relayReportId = `<20260115100001.B6E1B1A0@relay.${DOMAIN}>`;
    // The attacker's: the victim's address, no identifier that verifies, the same report Message-ID.
    const forged = await postDsn({
      recipients: [delivered(email)],
      originalEnvelopeId: `${sendId}.test-1.${'0'.repeat(32)}`,
      reportMessageId: relayReportId,
    });
    expect(forged.statusCode).toBe(200);
    expect(forged.json()).toMatchObject({ new: 1, unverified: 1 });
    // The relay's success DSN for the send, by its ENVID: evidence that verifies.
    const real = await postDsn({
      recipients: [delivered(email)],
      originalEnvelopeId: identifierOf(sendId),
      reportMessageId: relayReportId,
    });
    expect(real.statusCode).toBe(200);
    expect(await rowOf(sendId)).toMatchObject({ status: 'sent', reason: 'settled by delivery evidence (dsn)' });
  });

  it('fixed attack: two success DSNs without a Message-ID of their own, for two sends to one address, each settle their send (and the evidence lookup finds both)', async () => {
    // One address, two campaigns: two sends, each in doubt, each with one copy at the server.
    const email = 'twice@example.com';
    const first = await ambiguousDelivered(email);
    const second = await request(email, { at: 'dot', act: 'drop' });
    await until(second.sendId, 'ambiguous');
    expect(copiesTo(email)).toBe(2);
    // A relay that writes no Message-ID on its reports, both delivered in the same second, named by ENVID.
    const at = new Date(Date.now() - 5_000).toUTCString();
    for (const { sendId } of [first, second]) {
      const answer = await postDsn(
        { recipients: [delivered(email, { lastAttemptDate: at })], originalEnvelopeId: identifierOf(sendId) },
        { withoutOwnMessageId: true },
      );
      expect(answer.statusCode).toBe(200);
    }
    expect(await rowOf(first.sendId)).toMatchObject({ status: 'sent' });
    // With PROVIDER_LOOKUP=evidence, a send without stored evidence is "never taken": retried, a third email.
    const lookup = new EvidenceLookup(app.pg, 1);
    const found = await lookup.find({
      messageId: messageIdOf(second.sendId),
      recipient: email,
      sentAfter: new Date(0),
    });
    expect({ found: found.kind, row: await rowOf(second.sendId) }).toMatchObject({
      found: 'found',
      row: { status: 'sent' },
    });
  });

  it('evidence that comes between the lookup’s "not found" and its retry wins: no second email', async () => {
    const email = 'between@example.com';
    const { sendId } = await ambiguousDelivered(email);
    // PROVIDER_LOOKUP=evidence's lookup, asked by a reconciler; the relay's DSN lands right after it answered.
    const evidence = new EvidenceLookup(app.pg, 1);
    let answered: string | undefined;
    const racing: DeliveryLookup = {
      name: 'evidence',
      settleMs: 0,
      async find(query) {
        // Sends of other tests left in doubt: not this test's to decide (a failed lookup only waits).
        if (query.messageId !== messageIdOf(sendId)) return { kind: 'unavailable', reason: 'another test' };
        const result = await evidence.find(query);
        answered = result.kind;
        expect(
          (await postDsn({ recipients: [delivered(email)], originalEnvelopeId: identifierOf(sendId) })).statusCode,
        ).toBe(200);
        return result;
      },
    };
    const pipeline = { process: (claims: Parameters<SendPipeline['process']>[0]) => app.sends.release(claims) };
    const reconciler = new Reconciler(
      app.sends,
      pipeline as unknown as SendPipeline,
      app.log as unknown as Logger,
      app.metrics,
      {
        intervalMs: 60_000,
        policy: { maxAttempts: 5, retryBackoffMs: 100, leaseMs: 6_000 },
        lookup: {
          lookup: racing,
          messageIdDomain: DOMAIN,
          identifiers: app.identifiers,
          handoverWithinMs: 0,
          recheckMs: 1_000,
          giveUpAfterMs: 3_600_000,
          concurrency: 1,
        },
      },
    );
    await reconciler.sweep();
    expect(answered).toBe('not_found');
    expect(await rowOf(sendId)).toMatchObject({ status: 'sent', reason: 'settled by delivery evidence (dsn)' });
    await app.reconciler.sweep();
    await app.reconciler.sweep();
    expect(copiesTo(email)).toBe(1);
  });

  it("an operator's retry fired together with the provider's evidence, many times: each candidate gets one email", async () => {
    const sends: Array<{ sendId: string; email: string }> = [];
    for (let i = 0; i < 8; i++) {
      const email = `race-${i}@example.com`;
      sends.push({ email, ...(await ambiguousDelivered(email)) });
    }
    const answers = await Promise.all(
      sends.map(async ({ sendId, email }, i) => {
        const evidence = () => postSendGrid([sgEvent(email, messageIdOf(sendId), 'processed')]);
        // Half the races start with the retry, half with the evidence.
        let retry: ReturnType<typeof resolveRetry>;
        let posted: ReturnType<typeof evidence>;
        if (i % 2 === 0) {
          retry = resolveRetry(sendId);
          posted = evidence();
        } else {
          posted = evidence();
          retry = resolveRetry(sendId);
        }
        const [r, e] = await Promise.all([retry, posted]);
        return { retry: r.statusCode, evidence: e.statusCode };
      }),
    );
    for (const answer of answers) {
      expect(answer.evidence).toBe(200);
      expect([200, 409]).toContain(answer.retry);
    }
    for (const { sendId } of sends) await until(sendId, 'sent');
    for (let i = 0; i < 3; i++) await app.reconciler.sweep();
    const copies = Object.fromEntries(sends.map(({ email }) => [email, copiesTo(email)]));
    expect(copies).toEqual(Object.fromEntries(sends.map(({ email }) => [email, 1])));
    for (const { sendId } of sends)
      expect((await recordedFor(sendId, 2)).filter((e) => e.outcome === 'sent')).toHaveLength(1);
  });

  it('replays and floods, concurrent: one settlement, one SendRecorded sent, no server error', async () => {
    const email = 'flood@example.com';
    const { sendId } = await ambiguousDelivered(email);
    const id = identifierOf(sendId);
    const same = deliveryStatusNotification({
      recipients: [delivered(email)],
      originalEnvelopeId: id,
      reportMessageId: `<replayed@mx.relay.test>`,
      returned: 'none',
    });
    const sameBatch = JSON.stringify([
      { ...sgEvent(email, messageIdOf(sendId)), timestamp: 1, sg_event_id: 'flood-1' },
    ]);
    const answers = await Promise.all([
      ...Array.from({ length: 30 }, () => postRawDsn(same)),
      ...Array.from({ length: 30 }, () => postDsn({ recipients: [delivered(email)], originalEnvelopeId: id })),
      ...Array.from({ length: 10 }, () => postSignedSendGrid(sameBatch)),
      ...Array.from({ length: 10 }, () => postSendGrid([sgEvent(email, messageIdOf(sendId))])),
      ...Array.from({ length: 10 }, () =>
        postSes(sesNotification({ type: 'Delivery', recipients: [email], messageId: messageIdOf(sendId) })),
      ),
    ]);
    expect(answers.filter((a) => a.statusCode >= 500).map((a) => a.body)).toEqual([]);
    expect(answers.every((a) => a.statusCode === 200)).toBe(true);
    expect(await rowOf(sendId)).toMatchObject({ status: 'sent' });
    await app.reconciler.sweep();
    const recorded = await recordedFor(sendId, 2);
    expect(recorded.map((e) => e.outcome)).toEqual(['ambiguous', 'sent']);
    expect(copiesTo(email)).toBe(1);
  });

  it('fixed attack: concurrent signed batches about the same addresses in opposite orders are each answered 200, not 503 from a deadlock', async () => {
    // SendGrid posts batches in parallel; two of them can name the same recipients (a bounce in one,
    // a drop for that bounced address in the next), in either order, next to other sends' evidence.
    // Each batch is one transaction; its evidence waits for whatever it is rolled back with.
    const sends: Array<{ sendId: string; email: string }> = [];
    for (let i = 0; i < 8; i++) {
      const email = `order-${i}@example.com`;
      sends.push({ email, ...(await ambiguousDelivered(email)) });
    }
    const bounced = Array.from({ length: 200 }, (_, i) => `bounced-${i}@example.org`);
    const batch = (n: number) => {
      const { sendId, email } = sends[n] as { sendId: string; email: string };
      const events = [
        sgEvent(email, messageIdOf(sendId)),
        ...bounced.map((address) =>
          n % 2 === 0
            ? { email: address, event: 'bounce', type: 'bounce', status: '5.1.1' }
            : { email: address, event: 'dropped', reason: 'Bounced Address' },
        ),
      ].map((e) => ({ timestamp: Math.floor(Date.now() / 1000), sg_event_id: `b${n}-${randomUUID()}`, ...e }));
      return JSON.stringify(n % 2 === 0 ? events : events.reverse());
    };
    const deadlocks = async () =>
      (
        await t.query<{ n: number }>(
          `SELECT deadlocks::int AS n FROM pg_stat_database WHERE datname = current_database()`,
        )
      )[0]?.n ?? 0;
    const before = await deadlocks();
    const bodies = sends.map((_, n) => batch(n));
    const answers = await Promise.all(bodies.map((body) => postSignedSendGrid(body)));
    const during = (await deadlocks()) - before;
    const refused = answers.flatMap((a, n) =>
      a.statusCode === 200 ? [] : [{ n, status: a.statusCode, body: a.body }],
    );
    // SendGrid delivers a refused batch again later; one at a time, each is taken: nothing is lost.
    for (const { n, status } of refused) {
      expect(status).toBe(503);
      expect((await postSignedSendGrid(bodies[n] as string)).statusCode).toBe(200);
    }
    for (const { sendId } of sends) expect(await rowOf(sendId)).toMatchObject({ status: 'sent' });
    for (const email of bounced) expect(await suppressed(email)).toBe(true);
    // But a signed delivery of good data was refused by our own lock order, its evidence held back.
    expect(
      refused.map((r) => r.body),
      `${refused.length} of ${answers.length} refused; deadlocks in the database meanwhile: ${during}`,
    ).toEqual([]);
  });

  it("a flood of forged deliveries from one client does not lock the signed routes for the provider's real ones", async () => {
    const email = 'locked@example.com';
    const { sendId } = await ambiguousDelivered(email);
    const body = JSON.stringify([sgEvent(email, messageIdOf(sendId))]);
    const timestamp = String(Math.floor(Date.now() / 1000));
    const forged = await Promise.all(
      Array.from({ length: 150 }, () =>
        app.inject({
          method: 'POST',
          url: '/v1/feedback/sendgrid',
          headers: {
            'content-type': 'application/json',
            'x-twilio-email-event-webhook-timestamp': timestamp,
            'x-twilio-email-event-webhook-signature': signSendGridWebhook(`${body} `, timestamp, e.sendGridPrivateKey),
          },
          payload: body,
        }),
      ),
    );
    expect(forged.filter((a) => a.statusCode !== 403 && a.statusCode !== 429)).toEqual([]);
    for (let i = 0; i < 150; i++)
      await app.inject({
        method: 'POST',
        url: '/v1/feedback/ses',
        headers: { 'content-type': 'text/plain' },
        payload: '{}',
      });
    // The real ones, from the same client address.
    expect((await postSignedSendGrid(body, timestamp)).statusCode).toBe(200);
    expect(await rowOf(sendId)).toMatchObject({ status: 'sent', reason: 'settled by delivery evidence (sendgrid)' });
    const other = await ambiguousDelivered('locked-ses@example.com');
    const ses = await postSes(
      sesNotification({
        type: 'Delivery',
        recipients: ['locked-ses@example.com'],
        messageId: messageIdOf(other.sendId),
      }),
    );
    expect(ses.statusCode).toBe(200);
    expect(await rowOf(other.sendId)).toMatchObject({ status: 'sent' });
  });

  it('a DSN just under the body limit still settles; one byte over is refused (413) and settles nothing', async () => {
    const under = 'big-under@example.com';
    const over = 'big-over@example.com';
    const a = await ambiguousDelivered(under);
    const b = await ambiguousDelivered(over);
    const padded = (sendId: string, email: string, size: number): Buffer => {
      const dsn = deliveryStatusNotification({
        recipients: [delivered(email)],
        originalEnvelopeId: identifierOf(sendId),
        reportMessageId: `<big-${randomUUID()}@mx.relay.test>`,
        returned: 'none',
      });
      // Padding in the preamble, before the report: lines of 76 characters.
      const at = dsn.indexOf('This is a MIME-encapsulated message.');
      const room = size - Buffer.byteLength(dsn);
      const line = `${'x'.repeat(76)}\r\n`;
      const pad = line.repeat(Math.floor(room / line.length)) + 'y'.repeat(room % line.length);
      const bytes = Buffer.from(dsn.slice(0, at) + pad + dsn.slice(at), 'latin1');
      expect(bytes.byteLength).toBe(size);
      return bytes;
    };
    const ok = await postRawDsn(padded(a.sendId, under, MAX_BODY_BYTES));
    expect(ok.statusCode).toBe(200);
    expect(await rowOf(a.sendId)).toMatchObject({ status: 'sent' });
    const tooBig = await postRawDsn(padded(b.sendId, over, MAX_BODY_BYTES + 1));
    expect(tooBig.statusCode).toBe(413);
    expect(await rowOf(b.sendId)).toMatchObject({ status: 'ambiguous' });
  });
  it('a full signed batch, each event naming a different send by a verifying identifier: answered, only the stored send settles', async () => {
    const email = 'many@example.com';
    const { sendId } = await ambiguousDelivered(email);
    // As many as FEEDBACK_MAX_BODY_BYTES holds: identifiers that verify, of sends this sender never stored.
    const events = [
      ...Array.from({ length: 900 }, (_, i) => ({
        email: `n${i}@example.com`,
        event: 'delivered',
        'smtp-id': messageIdOf(randomUUID()),
      })),
      sgEvent(email, messageIdOf(sendId)),
    ];
    const unknownBefore = await metric('outreach_sender_delivery_evidence_total', { outcome: 'unmatched' });
    const answer = await postSendGrid(events);
    expect(answer.statusCode, answer.body).toBe(200);
    expect(await rowOf(sendId)).toMatchObject({ status: 'sent' });
    expect(await metric('outreach_sender_delivery_evidence_total', { outcome: 'unmatched' })).toBe(unknownBefore + 900);
    expect(copiesTo(email)).toBe(1);
  });

  it('fixed attack: the reconciler’s evidence sweep reads the sends in doubt, not every send ever made', async () => {
    // 200,000 sends recorded sent over time, and 2,000 left in doubt by an SMTP incident this hour,
    // none with evidence: the sweep runs first in every reconciler pass (RECONCILE_INTERVAL_MS).
    const seed = `INSERT INTO sends (send_id, request_id, request_event_id, correlation_id, campaign_id, candidate_id,
         candidate_key, email, email_norm, email_hash, step, subject, body, claim_token, status, attempts,
         attempt_started_at, sent_at)
       SELECT gen_random_uuid(), 'bulk-' || g, gen_random_uuid(), 'bulk', 'atk-bulk', 'bulk-' || g, 'bulk-' || g,
              'bulk-' || g || '@example.com', 'bulk-' || g || '@example.com', md5(g::text), 'intro', 's', 'b',
              gen_random_uuid(), $1, 1, now() - interval '5 minutes', now()
       FROM generate_series($2::int, $3::int) g`;
    await t.query(seed, ['sent', 1, 200_000]);
    await t.query(seed, ['ambiguous', 200_001, 202_000]);
    await t.query('ANALYZE sends');
    try {
      // The sweep's own statement, run through a connection that also asks PostgreSQL how it ran it.
      const client = await app.pg.connect();
      let examined = -1;
      try {
        await client.query('BEGIN');
        const explaining = {
          query: async (text: string, params?: unknown[]) => {
            if (examined < 0 && /FROM sends s CROSS JOIN LATERAL/.test(text)) {
              const { rows } = await client.query<{ 'QUERY PLAN': unknown }>(
                `EXPLAIN (ANALYZE, FORMAT JSON) ${text}`,
                params,
              );
              examined = rowsReadFrom('sends', rows[0]?.['QUERY PLAN']);
            }
            return client.query(text, params);
          },
        };
        await app.sends.settleByEvidence(explaining as never, { limit: 100 });
      } finally {
        await client.query('ROLLBACK');
        client.release();
      }
      expect(examined, 'rows of sends the sweep read').toBeGreaterThanOrEqual(0);
      expect(examined, 'rows of sends the sweep read').toBeLessThanOrEqual(2_000 * 2);
    } finally {
      await t.query(`DELETE FROM sends WHERE campaign_id = 'atk-bulk'`);
    }
  });
});
