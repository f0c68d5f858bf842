/**
 * Sends in doubt settled by the provider's own delivery evidence (issue #32, ADR 009), through the
 * whole sender: Kafka in, PostgreSQL state, the real SmtpProvider against the SMTP test server, and
 * the evidence posted to the sender's own routes as the providers post it (the SendGrid Signed Event
 * Webhook; a DSN from the bounce mailbox through the `dsn`-scoped hook). Copies are counted at the
 * server. Only evidence naming a send by an identifier whose MAC verifies, about that send's
 * recipient, settles it; evidence that comes while the attempt is still in the provider call is kept
 * and applied when the send becomes ambiguous; an operator's retry loses to evidence, before and
 * after it was asked for.
 */
import { randomUUID } from 'node:crypto';
import { uuidV5 } from '@outreach/contracts';
import { waitFor, type SmtpHostility } from '@outreach/testkit';
import type { FastifyInstance } from 'fastify';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { EvidenceLookup } from '../src/adapters/providers/evidence-lookup.js';
import { FeedbackRepository } from '../src/adapters/feedback-repository.js';
import { SendCommands } from '../src/workflow/send-commands.js';
import { startEvidenceEnv, identifierOf, type EvidenceEnv } from './evidence-env.js';
import { deliveryStatusNotification, sesNotification, signSendGridWebhook } from './fixtures/feedback-fixtures.js';
import { API_TOKEN, messageIdOf, testIdentifiers, type SenderTestEnv } from './harness.js';

const infra = { kafkaBrokers: inject('kafkaBrokers'), databaseUrl: inject('databaseUrl') };
const operate = { authorization: `Bearer ${API_TOKEN}` };

let e: EvidenceEnv;
let t: SenderTestEnv;
let app: FastifyInstance;

const rowOf = (sendId: string) => e.rowOf(sendId);
const until = (sendId: string, status: string, timeoutMs?: number) => e.until(sendId, status, timeoutMs);
const copiesTo = (email: string) => e.copiesTo(email);
const metric = (name: string, labels: Record<string, string>) => e.metric(name, labels);
const recordedFor = (sendId: string, count: number) => e.recordedFor(sendId, count);
/** The ENVID the attempt's envelope carried: the Message-ID's local part (ADR 012). */
const envelopeIdOf = identifierOf;

/** One request to `email`, the SMTP server doing `hostility` with it; returns its sendId. */
const request = (email: string, hostility?: SmtpHostility, campaignId = `ev-${randomUUID().slice(0, 8)}`) =>
  e.request(email, campaignId, hostility);

/** A signed SendGrid webhook delivery of `events` (each gets a fresh sg_event_id unless it has one). */
function postSendGrid(events: ReadonlyArray<Record<string, unknown>>) {
  const timestamp = Math.floor(Date.now() / 1000);
  return e.postSignedSendGrid(JSON.stringify(events.map((x) => ({ timestamp, sg_event_id: randomUUID(), ...x }))));
}

const delivered = (email: string, messageId: string, event = 'delivered') => ({
  email,
  event,
  'smtp-id': messageId,
  sg_message_id: `sg-${randomUUID().slice(0, 8)}.filter0001`,
});

/** A success DSN from the bounce mailbox, naming the message by ENVID and/or Message-ID. */
const postSuccessDsn = (email: string, ids: { envelopeId?: string; messageId?: string }, action = 'delivered') =>
  e.postRawDsn(
    deliveryStatusNotification({
      recipients: [{ address: email, action, status: '2.0.0' }],
      ...(ids.envelopeId === undefined ? {} : { originalEnvelopeId: ids.envelopeId }),
      ...(ids.messageId === undefined ? {} : { originalMessageId: ids.messageId }),
      returned: ids.messageId === undefined ? 'none' : 'headers',
      reportMessageId: `<dsn-${randomUUID()}@mx.receiver.test>`,
    }),
  );

/** An SES `Delivery` for `recipient` naming `messageId`, as SNS delivers it, signed, stamped now. */
const sesDelivery = (recipient: string, messageId: string) =>
  e.postSes(sesNotification({ type: 'Delivery', recipients: [recipient], messageId }));

beforeAll(async () => {
  e = await startEvidenceEnv(infra);
  ({ t, app } = e);
});

afterAll(async () => {
  await e?.cleanup();
});

describe('delivery evidence settles a send in doubt', { timeout: 60_000 }, () => {
  it('SendGrid `delivered` naming the signed Message-ID settles an ambiguous send sent, once, with its SendRecorded', async () => {
    const email = 'ada@example.com';
    const { sendId } = await request(email, { at: 'dot', act: 'drop' });
    await until(sendId, 'ambiguous');
    expect(copiesTo(email)).toBe(1);
    // The envelope asked the server (it offers DSN) for success notifications, under the ENVID.
    const envelope = t.sink.messages.find((m) => m.to.includes(email));
    expect(envelope?.envelopeId).toBe(envelopeIdOf(sendId));

    const settledBefore = await metric('outreach_sender_settled_by_evidence_total', { source: 'sendgrid' });
    const answer = await postSendGrid([delivered(email, messageIdOf(sendId))]);
    expect(answer.statusCode).toBe(200);
    const row = await rowOf(sendId);
    expect(row).toMatchObject({ status: 'sent', attempts: 1, reason: 'settled by delivery evidence (sendgrid)' });
    expect(row?.providerMessageId).toMatch(/^sg-[0-9a-f]{8}$/);
    expect(await metric('outreach_sender_settled_by_evidence_total', { source: 'sendgrid', from: 'ambiguous' })).toBe(
      settledBefore + 1,
    );
    const recorded = await recordedFor(sendId, 2);
    expect(recorded.map((e) => [e.outcome, e.reason])).toEqual([
      ['ambiguous', expect.any(String)],
      ['sent', 'settled by delivery evidence (sendgrid)'],
    ]);
    expect(recorded[1]?.eventId).toBe(uuidV5('send-recorded', sendId, 'sent', '1'));
    // Sweeps change nothing more; the one copy stays one.
    await app.reconciler.sweep();
    expect(copiesTo(email)).toBe(1);
  });

  it('an SES `Delivery` through SNS naming the signed Message-ID settles an ambiguous send', async () => {
    const email = 'ses@example.com';
    const { sendId } = await request(email, { at: 'dot', act: 'drop' });
    await until(sendId, 'ambiguous');
    const answer = await sesDelivery(email, messageIdOf(sendId));
    expect(answer.statusCode).toBe(200);
    expect(await rowOf(sendId)).toMatchObject({ status: 'sent', reason: 'settled by delivery evidence (ses)' });
    expect(copiesTo(email)).toBe(1);
  });

  it('a success DSN naming the send only by its ENVID settles it; `relayed` counts as taken too', async () => {
    for (const [email, action] of [
      ['bob@example.com', 'delivered'],
      ['cy@example.com', 'relayed'],
    ] as const) {
      const { sendId } = await request(email, { at: 'dot', act: 'drop' });
      await until(sendId, 'ambiguous');
      const answer = await postSuccessDsn(email, { envelopeId: envelopeIdOf(sendId) }, action);
      expect(answer.statusCode).toBe(200);
      expect(await rowOf(sendId)).toMatchObject({ status: 'sent', reason: 'settled by delivery evidence (dsn)' });
      expect(copiesTo(email)).toBe(1);
    }
  });

  it('evidence that cannot be verified, or is about someone else, settles nothing and is counted', async () => {
    const email = 'dee@example.com';
    const { sendId } = await request(email, { at: 'dot', act: 'drop' });
    await until(sendId, 'ambiguous');
    const bare = `<${sendId}@outreach.local>`;
    const forgedMac = `<${sendId}.${testIdentifiers.currentKeyId}.${'0'.repeat(32)}@outreach.local>`;
    const unverifiedBefore = await metric('outreach_sender_feedback_unverified_ids_total', {});
    // The computable bare id of mail before signed identifiers, and a made-up MAC: over both hooks.
    expect((await postSuccessDsn(email, { messageId: bare })).statusCode).toBe(200);
    expect((await postSuccessDsn(email, { envelopeId: forgedMac.slice(1).split('@')[0] as string })).statusCode).toBe(
      200,
    );
    expect((await postSendGrid([delivered(email, forgedMac)])).statusCode).toBe(200);
    // Our local part (MAC and all) at another domain: another tenant's Message-ID that resembles ours.
    const elsewhere = messageIdOf(sendId).replace('@outreach.local>', '@tenant-b.example>');
    expect((await postSendGrid([delivered(email, elsewhere)])).statusCode).toBe(200);
    expect((await postSuccessDsn(email, { messageId: elsewhere })).statusCode).toBe(200);
    // A verified identifier of a send that does not exist here: counted, nothing else.
    const unknownBefore = await metric('outreach_sender_delivery_evidence_total', { outcome: 'unmatched' });
    const stranger = randomUUID();
    expect((await postSendGrid([delivered('x@example.com', messageIdOf(stranger))])).statusCode).toBe(200);
    expect(await metric('outreach_sender_delivery_evidence_total', { outcome: 'unmatched' })).toBe(unknownBefore + 1);
    expect(await rowOf(stranger)).toBeUndefined();
    // The right identifier, about another recipient: proves nothing about this send.
    expect((await postSendGrid([delivered('mallory@example.com', messageIdOf(sendId))])).statusCode).toBe(200);
    expect((await postSuccessDsn('mallory@example.com', { messageId: messageIdOf(sendId) })).statusCode).toBe(200);
    // A signature over another body: refused at the door.
    const body = JSON.stringify([delivered(email, messageIdOf(sendId))]);
    const timestamp = String(Math.floor(Date.now() / 1000));
    const forged = await app.inject({
      method: 'POST',
      url: '/v1/feedback/sendgrid',
      headers: {
        'content-type': 'application/json',
        'x-twilio-email-event-webhook-timestamp': timestamp,
        'x-twilio-email-event-webhook-signature': signSendGridWebhook(`${body} `, timestamp, e.sendGridPrivateKey),
      },
      payload: body,
    });
    expect(forged.statusCode).toBe(403);
    // A DSN posted without the hook's token.
    const anonymous = await app.inject({
      method: 'POST',
      url: '/v1/feedback/dsn',
      headers: { 'content-type': 'message/rfc822' },
      payload: deliveryStatusNotification({
        recipients: [{ address: email, action: 'delivered', status: '2.0.0' }],
        originalEnvelopeId: envelopeIdOf(sendId),
      }),
    });
    expect(anonymous.statusCode).toBe(401);

    await app.reconciler.sweep();
    expect(await rowOf(sendId)).toMatchObject({ status: 'ambiguous', attempts: 1 });
    expect(await metric('outreach_sender_feedback_unverified_ids_total', {})).toBeGreaterThanOrEqual(
      unverifiedBefore + 3,
    );
  });

  it('evidence that comes while the attempt is still in the provider call is kept, and settles the send as it becomes ambiguous', async () => {
    const email = 'eli@example.com';
    // The server holds its reply to the final dot past our 2 s timeout: the worker is in the call.
    const settledBefore = await metric('outreach_sender_settled_by_evidence_total', { source: 'sendgrid' });
    const keptBefore = await metric('outreach_sender_delivery_evidence_total', { source: 'sendgrid', outcome: 'kept' });
    const { sendId } = await request(email, { at: 'dot', act: 'stall', ms: 6_000 });
    await waitFor(() => copiesTo(email) === 1, { timeoutMs: 10_000, description: 'the message at the server' });
    expect(await rowOf(sendId)).toMatchObject({ status: 'sending' });
    expect((await postSendGrid([delivered(email, messageIdOf(sendId), 'processed')])).statusCode).toBe(200);
    expect(await metric('outreach_sender_delivery_evidence_total', { source: 'sendgrid', outcome: 'kept' })).toBe(
      keptBefore + 1,
    );
    expect((await rowOf(sendId))?.status).toBe('sending');
    // Our timeout makes it ambiguous (a late reply is still awaited): the kept evidence settles it then.
    const row = await until(sendId, 'sent', 10_000);
    expect(row.reason).toBe('settled by delivery evidence (sendgrid)');
    expect(await metric('outreach_sender_settled_by_evidence_total', { source: 'sendgrid', from: 'ambiguous' })).toBe(
      settledBefore + 1,
    );
    expect(copiesTo(email)).toBe(1);
  });

  it("an operator's retry loses to evidence: refused after it, and cancelled before its fence when it comes after", async () => {
    // Evidence first: the send is sent, a retry is refused.
    const first = 'fay@example.com';
    const a = await request(first, { at: 'dot', act: 'drop' });
    await until(a.sendId, 'ambiguous');
    await postSendGrid([delivered(first, messageIdOf(a.sendId))]);
    const refused = await app.inject({
      method: 'POST',
      url: `/v1/sends/${a.sendId}/resolve`,
      headers: operate,
      payload: { resolution: 'retry' },
    });
    expect(refused.statusCode).toBe(409);

    // Retry first, held by its campaign's pause before its fence; then the evidence: it never goes out.
    const second = 'gus@example.com';
    const b = await request(second, { at: 'dot', act: 'drop' });
    await until(b.sendId, 'ambiguous');
    const pause = await app.inject({
      method: 'POST',
      url: `/v1/campaigns/${b.campaignId}/pause`,
      headers: operate,
      payload: {},
    });
    expect(pause.statusCode).toBe(200);
    const retry = await app.inject({
      method: 'POST',
      url: `/v1/sends/${b.sendId}/resolve`,
      headers: operate,
      payload: { resolution: 'retry' },
    });
    expect(retry.statusCode).toBe(200);
    await until(b.sendId, 'held');
    await postSuccessDsn(second, { messageId: messageIdOf(b.sendId) });
    expect(await rowOf(b.sendId)).toMatchObject({ status: 'sent', reason: 'settled by delivery evidence (dsn)' });
    const resume = await app.inject({
      method: 'POST',
      url: `/v1/campaigns/${b.campaignId}/resume`,
      headers: operate,
      payload: {},
    });
    expect(resume.json()).toMatchObject({ released: 0 });
    await app.reconciler.sweep();
    expect(copiesTo(first)).toBe(1);
    expect(copiesTo(second)).toBe(1);
    expect(await metric('outreach_sender_settled_by_evidence_total', { source: 'dsn', from: 'held' })).toBe(1);
  });

  it("an operator's retry waits for the evidence window after the last attempt (DELIVERY_EVIDENCE_WINDOW_MS)", async () => {
    const email = 'ida@example.com';
    const { sendId } = await request(email, { at: 'dot', act: 'drop' });
    await until(sendId, 'ambiguous');
    // The sender's own commands, as a sender with a 1 h window runs them, on the same database.
    const withWindow = new SendCommands(app.sends, 3_600_000);
    expect(await withWindow.resolveAmbiguous(sendId, 'retry')).toBe('evidence_pending');
    expect(await rowOf(sendId)).toMatchObject({ status: 'ambiguous', attempts: 1 });
    // A window that has passed since the attempt: the retry is taken.
    const passed = new SendCommands(app.sends, 1);
    expect(await passed.resolveAmbiguous(sendId, 'retry')).toBe('resolved');
    app.reconciler.wake();
    await until(sendId, 'sent');
    expect(copiesTo(email)).toBe(2);
  });

  it('the evidence store as a lookup: found, not found, and no trust in absence before a whole window of listening', async () => {
    const email = 'jo@example.com';
    const { sendId } = await request(email, { at: 'dot', act: 'drop' });
    await until(sendId, 'ambiguous');
    let now = Date.now();
    const lookup = new EvidenceLookup(app.pg, 60_000, () => now);
    const messageId = messageIdOf(sendId);
    // Just started: no evidence yet proves nothing (the provider may be holding its reports for us).
    expect(await lookup.find({ messageId })).toEqual({
      kind: 'unavailable',
      reason: 'evidence: listening for less than the window since this replica started',
    });
    now += 60_000;
    expect(await lookup.find({ messageId })).toEqual({ kind: 'not_found' });
    await postSendGrid([delivered(email, messageId)]);
    expect(await lookup.find({ messageId })).toMatchObject({
      kind: 'found',
      providerId: expect.stringMatching(/^sg-/),
    });
    // Not one of our Message-IDs: it cannot tell.
    expect((await lookup.find({ messageId: '<not-ours@outreach.local>' })).kind).toBe('unavailable');
  });

  it('10,000 events for one send: accepted in signed batches, settle it once, one SendRecorded sent', async () => {
    const email = 'hal@example.com';
    const { sendId } = await request(email, { at: 'dot', act: 'drop' });
    await until(sendId, 'ambiguous');
    const messageId = messageIdOf(sendId);
    for (let batch = 0; batch < 10; batch++) {
      const answer = await postSendGrid(
        Array.from({ length: 1_000 }, (_, i) => delivered(email, messageId, i % 2 === 0 ? 'delivered' : 'processed')),
      );
      expect(answer.statusCode).toBe(200);
    }
    // The same batch again (a provider's retry): nothing new.
    const replay = JSON.stringify([{ ...delivered(email, messageId), timestamp: 1, sg_event_id: 'replayed-1' }]);
    const timestamp = String(Math.floor(Date.now() / 1000));
    for (let i = 0; i < 2; i++) expect((await e.postSignedSendGrid(replay, timestamp)).statusCode).toBe(200);
    expect(await rowOf(sendId)).toMatchObject({ status: 'sent', reason: 'settled by delivery evidence (sendgrid)' });
    const recorded = await recordedFor(sendId, 2);
    expect(recorded.map((e) => e.outcome)).toEqual(['ambiguous', 'sent']);
    const [stored] = await t.query<{ n: number }>(
      `SELECT count(*)::int AS n FROM feedback_events WHERE send_id = $1 AND decision = 'evidence'`,
      [sendId],
    );
    expect(stored?.n).toBe(10_001);
    expect(copiesTo(email)).toBe(1);
  });

  it('feedback reports past FEEDBACK_RETENTION_DAYS are purged in batches; younger ones, and what they settled, stay', async () => {
    const email = 'kim@example.com';
    const { sendId } = await request(email, { at: 'dot', act: 'drop' });
    await until(sendId, 'ambiguous');
    await postSendGrid(Array.from({ length: 25 }, () => delivered(email, messageIdOf(sendId))));
    expect((await rowOf(sendId))?.status).toBe('sent');
    // 20 of them received 100 days ago; a soft bounce counted as long ago, and one counted today.
    await t.query(
      `UPDATE feedback_events SET received_at = now() - interval '100 days'
       WHERE ctid = ANY(ARRAY(SELECT ctid FROM feedback_events WHERE send_id = $1 LIMIT 20))`,
      [sendId],
    );
    const oldBounce = randomUUID();
    const newBounce = randomUUID();
    await t.query(
      `INSERT INTO soft_bounced_sends (send_id, campaign_id, counted_at)
       VALUES ($1, 'c', now() - interval '100 days'), ($2, 'c', now())`,
      [oldBounce, newBounce],
    );
    const repository = new FeedbackRepository(app.pg, app.suppressions, app.emailHashKey, app.sends);
    const purged: Array<{ reports: number; softBounces: number }> = [];
    for (;;) {
      const round = await repository.purgeOlderThan(90, 8);
      purged.push(round);
      if (round.reports < 8 && round.softBounces < 8) break;
    }
    // At most a batch a statement: 20 old reports in rounds of 8, 8 and 4 (plus any older rows of earlier tests: none).
    expect(purged.map((r) => r.reports)).toEqual([8, 8, 4]);
    expect(purged.reduce((n, r) => n + r.softBounces, 0)).toBe(1);
    const [left] = await t.query<{ n: number }>(`SELECT count(*)::int AS n FROM feedback_events WHERE send_id = $1`, [
      sendId,
    ]);
    expect(left?.n).toBe(5);
    const bounces = await t.query<{ sendId: string }>(
      `SELECT send_id AS "sendId" FROM soft_bounced_sends WHERE send_id = ANY($1::uuid[])`,
      [[oldBounce, newBounce]],
    );
    expect(bounces.map((b) => b.sendId)).toEqual([newBounce]);
    expect((await rowOf(sendId))?.status).toBe('sent');
    // Nothing younger than the retention goes, however often it runs.
    expect(await repository.purgeOlderThan(90, 8)).toEqual({ reports: 0, softBounces: 0 });
  });
});
