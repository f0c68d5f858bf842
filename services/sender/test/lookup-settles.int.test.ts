/**
 * Sends in doubt settled by the delivery lookup (ADR 009, issue #18), through the whole sender: Kafka
 * in, PostgreSQL state, the real SmtpProvider against the SMTP test server, whose Mailpit search API
 * the sender asks by the deterministic Message-ID. Copies are counted at the server, never in the
 * code under test. Found is `sent`; not found once the hand-over bound and the settle time have
 * passed is sent again, once; a lookup that fails proves nothing and the send stays `ambiguous`;
 * without a lookup nothing changes.
 */
import { randomUUID } from 'node:crypto';
import { freePort, waitFor, type HttpHostility, type SmtpHostility } from '@outreach/testkit';
import type { FastifyInstance } from 'fastify';
import { afterEach, describe, expect, inject, it } from 'vitest';
import type {} from '../src/plugins/sender.js';
import { deliveriesByRecipient, messageIdOf, senderTestEnv, sendRequested, type SenderTestEnv } from './harness.js';

const infra = { kafkaBrokers: inject('kafkaBrokers'), databaseUrl: inject('databaseUrl') };
let t: SenderTestEnv | undefined;
afterEach(async (context) => {
  if (context.task.result?.state === 'fail')
    for (const proc of t?.processes ?? [])
      console.error(`--- sender ${proc.child.pid}:\n${proc.stdoutLines.slice(-15).join('\n')}`);
  await t?.cleanup();
  t = undefined;
});

/**
 * The hand-over bound is max(PROVIDER_TIMEOUT_MS, SMTP_FINAL_REPLY_TIMEOUT_MS); a not-found decides
 * after it plus the settle. The final-reply wait stays longer than the call's timeout, as in
 * production (10 min against 20 s).
 */
const TIMING = {
  PROVIDER_TIMEOUT_MS: '1500',
  SMTP_FINAL_REPLY_TIMEOUT_MS: '2000',
  LEASE_MS: '6000',
  RETRY_BACKOFF_MS: '50',
  LOOKUP_SETTLE_MS: '500',
  LOOKUP_RECHECK_MS: '300',
};
const DECIDABLE_AFTER_MS = 2000 + 500;

interface Row {
  readonly status: string;
  readonly attempts: number;
  readonly reason: string | null;
  readonly providerMessageId: string | null;
}

async function rowOf(env: SenderTestEnv, sendId: string): Promise<Row | undefined> {
  const rows = await env.query<Row>(
    `SELECT status, attempts, reason, provider_message_id AS "providerMessageId" FROM sends WHERE send_id = $1`,
    [sendId],
  );
  return rows[0];
}

async function until(env: SenderTestEnv, sendId: string, status: string, timeoutMs = 30_000): Promise<Row> {
  let last: Row | undefined;
  await waitFor(
    async () => {
      last = await rowOf(env, sendId);
      return last?.status === status;
    },
    { timeoutMs, description: `send ${sendId} to become ${status}` },
  ).catch((error: unknown) => {
    throw new Error(`${String(error)}; last ${JSON.stringify(last)}`);
  });
  return last as Row;
}

async function attemptStartedAt(env: SenderTestEnv, sendId: string): Promise<Date> {
  const rows = await env.query<{ at: Date }>('SELECT attempt_started_at AS at FROM sends WHERE send_id = $1', [sendId]);
  return rows[0]?.at as Date;
}

/** The reconciler's lookup decisions so far, by the status asked about and what the lookup established. */
async function decisions(app: FastifyInstance, status: string, decision: string): Promise<number> {
  const metric = await app.metrics.getSingleMetric('outreach_sender_lookup_decisions_total')?.get();
  return metric?.values.find((v) => v.labels.status === status && v.labels.decision === decision)?.value ?? 0;
}

function expectOneCopyEach(env: SenderTestEnv): void {
  expect([...deliveriesByRecipient(env.sink)].filter(([, n]) => n > 1)).toEqual([]);
  const ids = env.sink.messages.map((m) => m.messageId);
  expect(new Set(ids).size).toBe(ids.length);
}

interface Setup {
  readonly hostile: (n: number) => SmtpHostility | undefined;
  /** `mailpit`: the sink's own search API; `down`: an address nothing listens on; `none`: no lookup configured. */
  readonly lookup: 'mailpit' | 'down' | 'none';
  readonly api?: (n: number) => HttpHostility | undefined;
  readonly env?: Record<string, string>;
}

/** The Mailpit API URL of the last `start`. */
let lastApi = '';

/** A sender (in process) against a hostile sink that also serves Mailpit's API, and one request. */
async function start(setup: Setup) {
  const env = await senderTestEnv(infra, { sink: { hostile: setup.hostile }, env: { ...TIMING, ...setup.env } });
  t = env;
  const api = await env.sink.startMailpitApi(setup.api ? { hostile: setup.api } : {});
  const lookupEnv: Record<string, string> =
    setup.lookup === 'none'
      ? {}
      : {
          PROVIDER_LOOKUP: 'mailpit',
          MAILPIT_API_URL: setup.lookup === 'down' ? `http://127.0.0.1:${await freePort()}` : api,
        };
  const app = await env.startApp(lookupEnv);
  lastApi = api;
  const request = sendRequested({
    campaignId: `lookup-${randomUUID().slice(0, 8)}`,
    candidateId: 'cand-1',
    email: 'cand-1@example.com',
    // Large enough that a reset at the first body bytes lands before the final dot.
    body: 'We would like to talk.\n'.repeat(4_000),
  });
  await env.publishRequests([request]);
  return { env, app, sendId: request.sendId };
}

const first =
  (hostility: SmtpHostility, at?: { time: number }) =>
  (n: number): SmtpHostility | undefined => {
    if (n !== 1) return undefined;
    if (at) at.time = Date.now();
    return hostility;
  };

describe('ambiguous sends settled by the delivery lookup', { timeout: 90_000 }, () => {
  it('cut after the final dot, the message at the server: found, recorded sent, no second copy', async () => {
    const { env, app, sendId } = await start({ hostile: first({ at: 'dot', act: 'drop' }), lookup: 'mailpit' });
    const row = await until(env, sendId, 'sent');
    expect(row).toMatchObject({ attempts: 1, providerMessageId: messageIdOf(sendId) });
    expect(env.sink.misbehaved).toHaveLength(1);
    // It was ambiguous first (the SMTP verdict), then the lookup found it.
    expect(await decisions(app, 'ambiguous', 'sent')).toBe(1);
    await app.reconciler.sweep();
    await app.reconciler.sweep();
    expect(env.sink.deliveredTo('cand-1@example.com')).toHaveLength(1);
    expectOneCopyEach(env);
  });

  it('cut before the body reached the server: not found, retried only after the settle time, one copy', async () => {
    const cut = { time: 0 };
    const { env, app, sendId } = await start({ hostile: first({ at: 'body', act: 'reset' }, cut), lookup: 'mailpit' });
    const row = await until(env, sendId, 'sent');
    expect(row.attempts).toBe(2);
    expect(env.sink.deliveredTo('cand-1@example.com')).toHaveLength(1);
    // A not-found earlier than the hand-over bound plus the settle time licenses nothing.
    const delivered = env.sink.messages[0]?.receivedAt ?? 0;
    expect(delivered - cut.time).toBeGreaterThanOrEqual(DECIDABLE_AFTER_MS - 100);
    expect(await decisions(app, 'ambiguous', 'not_sent')).toBe(1);
    await app.reconciler.sweep();
    expectOneCopyEach(env);
  });

  const failing: ReadonlyArray<readonly [string, Pick<Setup, 'lookup' | 'api'>]> = [
    ['down (nothing listens)', { lookup: 'down' }],
    ['answering 500', { lookup: 'mailpit', api: () => ({ act: 'status', status: 500 }) }],
    ['answering garbage', { lookup: 'mailpit', api: () => ({ act: 'garbage' }) }],
    ['answering a truncated body', { lookup: 'mailpit', api: () => ({ act: 'partial' }) }],
  ];
  it.each(failing)('the lookup API %s: the send stays ambiguous, never sent again', async (_name, setup) => {
    // Cut mid-body: nothing at the server, so a failure read as "not found" would mail it.
    const { env, app, sendId } = await start({ hostile: first({ at: 'body', act: 'reset' }), ...setup });
    await until(env, sendId, 'ambiguous');
    const started = await attemptStartedAt(env, sendId);
    // Asked again and again, past the time a real not-found would have licensed a retry.
    await waitFor(
      async () =>
        Date.now() > started.getTime() + DECIDABLE_AFTER_MS + 1_000 &&
        (await decisions(app, 'ambiguous', 'pending')) >= 3,
      { timeoutMs: 30_000, description: 'the lookup to be asked past the settle time' },
    );
    const row = await rowOf(env, sendId);
    expect(row).toMatchObject({ status: 'ambiguous', attempts: 1 });
    expect(env.sink.messages).toHaveLength(0);
    expect(await decisions(app, 'ambiguous', 'not_sent')).toBe(0);
  });

  it('a lookup failing past LOOKUP_GIVE_UP_MS gives up: the send is left to an operator, and no longer asked about', async () => {
    const { env, app, sendId } = await start({
      hostile: first({ at: 'body', act: 'reset' }),
      lookup: 'mailpit',
      api: () => ({ act: 'status', status: 503 }),
      env: { LOOKUP_GIVE_UP_MS: String(DECIDABLE_AFTER_MS + 500) },
    });
    await until(env, sendId, 'ambiguous');
    const started = await attemptStartedAt(env, sendId);
    await waitFor(() => Date.now() > started.getTime() + DECIDABLE_AFTER_MS + 1_500, {
      timeoutMs: 20_000,
      description: 'the give-up bound to pass',
    });
    await app.reconciler.sweep();
    const asked = env.sink.mailpitRequests;
    await app.reconciler.sweep();
    await app.reconciler.sweep();
    expect(env.sink.mailpitRequests).toBe(asked);
    expect(await rowOf(env, sendId)).toMatchObject({ status: 'ambiguous', attempts: 1 });
    expect(env.sink.messages).toHaveLength(0);
  });

  it('without a lookup configured: ambiguous, as before, and the provider is never asked', async () => {
    const { env, app, sendId } = await start({ hostile: first({ at: 'dot', act: 'drop' }), lookup: 'none' });
    await until(env, sendId, 'ambiguous');
    await app.reconciler.sweep();
    await app.reconciler.sweep();
    expect(await rowOf(env, sendId)).toMatchObject({ status: 'ambiguous', attempts: 1 });
    expect(env.sink.mailpitRequests).toBe(0);
    expect(env.sink.deliveredTo('cand-1@example.com')).toHaveLength(1);
  });
});

describe('after an identifier key rotation (ADR 012)', { timeout: 90_000 }, () => {
  const OLD = { IDENTIFIER_KEY: 'test-only-identifier-key-not-a-secret-0123456789abcdef', IDENTIFIER_KEY_ID: 'test-1' };
  const rotated = (until: Date) => ({
    IDENTIFIER_KEY: 'test-only-rotated-identifier-key-not-a-secret-0123456789',
    IDENTIFIER_KEY_ID: 'test-2',
    IDENTIFIER_PREVIOUS_KEY: OLD.IDENTIFIER_KEY,
    IDENTIFIER_PREVIOUS_KEY_ID: OLD.IDENTIFIER_KEY_ID,
    IDENTIFIER_PREVIOUS_KEY_UNTIL: until.toISOString(),
  });
  const keyOf = async (env: SenderTestEnv, sendId: string) =>
    (await env.query<{ key: string | null }>('SELECT message_key_id AS key FROM sends WHERE send_id = $1', [sendId]))[0]
      ?.key;

  it('the lookup searches the Message-ID that went out, under the key its attempt recorded: found, sent, one copy', async () => {
    // Sent under test-1, the answer to the final dot lost, and no lookup: ambiguous.
    const { env, sendId } = await start({ hostile: first({ at: 'dot', act: 'drop' }), lookup: 'none' });
    await until(env, sendId, 'ambiguous');
    expect(await keyOf(env, sendId)).toBe('test-1');
    expect(env.sink.messages.map((m) => m.messageId)).toEqual([messageIdOf(sendId)]);
    // A sender under test-2 (test-1 its previous key) with a lookup finds the message by that id.
    const next = await env.startApp({
      ...rotated(new Date(Date.now() + 86_400_000)),
      PROVIDER_LOOKUP: 'mailpit',
      MAILPIT_API_URL: lastApi,
    });
    const row = await until(env, sendId, 'sent');
    expect(row).toMatchObject({ attempts: 1, providerMessageId: messageIdOf(sendId) });
    await next.reconciler.sweep();
    expect(env.sink.deliveredTo('cand-1@example.com')).toHaveLength(1);
  });

  it('a send attempted under a key retired since stays ambiguous: its Message-ID cannot be made, so nothing licenses a resend', async () => {
    const { env, sendId } = await start({ hostile: first({ at: 'body', act: 'reset' }), lookup: 'none' });
    await until(env, sendId, 'ambiguous');
    // test-1 gone: a lookup of another id would say "not found" and mail the candidate again.
    const next = await env.startApp({
      IDENTIFIER_KEY: 'test-only-rotated-identifier-key-not-a-secret-0123456789',
      IDENTIFIER_KEY_ID: 'test-2',
      PROVIDER_LOOKUP: 'mailpit',
      MAILPIT_API_URL: lastApi,
    });
    const started = await attemptStartedAt(env, sendId);
    await waitFor(() => Date.now() > started.getTime() + DECIDABLE_AFTER_MS + 1_000, {
      timeoutMs: 20_000,
      description: 'past the time a not-found would have licensed a resend',
    });
    await next.reconciler.sweep();
    await next.reconciler.sweep();
    expect(await rowOf(env, sendId)).toMatchObject({ status: 'ambiguous', attempts: 1 });
    expect(env.sink.messages).toHaveLength(0);
    expect(env.sink.mailpitRequests).toBe(0);
  });
});

describe('a sender killed during the provider call, settled by the next one', { timeout: 120_000 }, () => {
  /** The sender as a process; `kill` SIGKILLs it once `ready` holds, and a second process takes over. */
  async function killedMidSend(
    hostile: (n: number) => SmtpHostility | undefined,
    ready: (sendId: string) => Promise<boolean>,
  ) {
    const env = await senderTestEnv(infra, {
      sink: { hostile },
      // The call outlives the kill: its timeout must not decide first.
      env: { ...TIMING, PROVIDER_TIMEOUT_MS: '3000', SMTP_FINAL_REPLY_TIMEOUT_MS: '3500' },
    });
    t = env;
    const api = await env.sink.startMailpitApi();
    const lookup = { PROVIDER_LOOKUP: 'mailpit', MAILPIT_API_URL: api };
    const request = sendRequested({
      campaignId: `kill-${randomUUID().slice(0, 8)}`,
      candidateId: 'c',
      email: 'c@example.com',
    });
    const victim = env.startProcess(lookup);
    await env.publishRequests([request]);
    await waitFor(() => ready(request.sendId), {
      timeoutMs: 60_000,
      intervalMs: 20,
      description: 'the send in flight',
    });
    await victim.stop('SIGKILL');
    expect((await rowOf(env, request.sendId))?.status).toBe('sending');
    env.startProcess(lookup);
    return { env, sendId: request.sendId };
  }

  it('the message reached the server before the kill: found, sent, one copy', async () => {
    const { env, sendId } = await killedMidSend(
      // The server holds the message and keeps the reply to the final dot back.
      first({ at: 'dot', act: 'stall', ms: 15_000 }),
      async () => (t?.sink.messages.length ?? 0) === 1,
    );
    const row = await until(env, sendId, 'sent', 60_000);
    expect(row.attempts).toBe(1);
    expect(env.sink.messages).toHaveLength(1);
    expectOneCopyEach(env);
  });

  it('the message never reached the server: not found after the settle time, sent once by the next sender', async () => {
    const result = await killedMidSend(
      // The first connection never gets its greeting: nothing of the message leaves the sender.
      first({ at: 'greeting', act: 'stall' }),
      // Once the server holds the connection without a greeting: the call is under way.
      async (sendId) =>
        t?.sink.misbehaved.length === 1 && (await rowOf(t as SenderTestEnv, sendId))?.status === 'sending',
    );
    const row = await until(result.env, result.sendId, 'sent', 60_000);
    expect(row.attempts).toBe(2);
    expect(result.env.sink.messages).toHaveLength(1);
    expectOneCopyEach(result.env);
  });
});
