/**
 * Mailgun sends in doubt settled by Mailgun's own Events API (ADR 009, issue #32), through the whole
 * sender: Kafka in, PostgreSQL state, MAIL_PROVIDER=mailgun and PROVIDER_LOOKUP=mailgun against
 * FakeMailgun, the server that speaks Mailgun's documented send and events API. The reconciler asks
 * about the `ambiguous` send by its signed Message-ID; copies are counted at the fake, never in the
 * code under test. Found is `sent` (one copy); not found once the hand-over bound (timeout plus
 * MAILGUN_LATE_REPLY_MS) and the settle time have passed is sent again, once; a lookup that fails
 * proves nothing, and the send stays `ambiguous` with no copy made.
 */
import { randomUUID } from 'node:crypto';
import { waitFor, type HttpHostility } from '@outreach/testkit';
import type { FastifyInstance } from 'fastify';
import { afterEach, describe, expect, inject, it } from 'vitest';
import type {} from '../src/plugins/sender.js';
import { FakeMailgun, type MailgunEndpoint } from './fixtures/fake-mailgun.js';
import { messageIdOf, senderTestEnv, sendRequested, type SenderTestEnv } from './harness.js';

const infra = { kafkaBrokers: inject('kafkaBrokers'), databaseUrl: inject('databaseUrl') };
const DOMAIN = 'mg.outreach.test';
const API_KEY = 'key-test-0123456789';
const RECIPIENT = 'cand-1@example.com';

let t: SenderTestEnv | undefined;
let fake: FakeMailgun | undefined;
afterEach(async (context) => {
  if (context.task.result?.state === 'fail')
    for (const proc of t?.processes ?? [])
      console.error(`--- sender ${proc.child.pid}:\n${proc.stdoutLines.slice(-15).join('\n')}`);
  await t?.cleanup();
  await fake?.stop();
  t = undefined;
  fake = undefined;
});

/** The hand-over bound is PROVIDER_TIMEOUT_MS + MAILGUN_LATE_REPLY_MS; a not-found decides after it plus the settle. */
const TIMING = {
  PROVIDER_TIMEOUT_MS: '1500',
  MAILGUN_LATE_REPLY_MS: '500',
  LEASE_MS: '6000',
  RETRY_BACKOFF_MS: '50',
  LOOKUP_SETTLE_MS: '500',
  LOOKUP_RECHECK_MS: '300',
  LOOKUP_TIMEOUT_MS: '1000',
};
const DECIDABLE_AFTER_MS = 1500 + 500 + 500;

interface Row {
  readonly status: string;
  readonly attempts: number;
  readonly reason: string | null;
}

async function rowOf(env: SenderTestEnv, sendId: string): Promise<Row | undefined> {
  return (await env.query<Row>('SELECT status, attempts, reason FROM sends WHERE send_id = $1', [sendId]))[0];
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

async function decisions(app: FastifyInstance, status: string, decision: string): Promise<number> {
  const metric = await app.metrics.getSingleMetric('outreach_sender_lookup_decisions_total')?.get();
  return metric?.values.find((v) => v.labels.status === status && v.labels.decision === decision)?.value ?? 0;
}

/** Hostility per endpoint, by that endpoint's own request count (1-based). */
type Script = Partial<Record<MailgunEndpoint, (n: number) => HttpHostility | undefined>>;

/** A sender (in process) sending through FakeMailgun, and looking sends up there; one request published. */
async function start(script: Script, options: { eventsVisibleAfterMs?: number } = {}) {
  const counts: Record<MailgunEndpoint, number> = { messages: 0, events: 0 };
  const server = await new FakeMailgun({
    apiKey: API_KEY,
    domain: DOMAIN,
    ...(options.eventsVisibleAfterMs ? { eventsVisibleAfterMs: options.eventsVisibleAfterMs } : {}),
    hostile: (_n, endpoint) => script[endpoint]?.(++counts[endpoint]),
  }).start();
  fake = server;
  const env = await senderTestEnv(infra, {
    env: {
      ...TIMING,
      MAIL_PROVIDER: 'mailgun',
      MAILGUN_API_URL: server.url,
      MAILGUN_DOMAIN: DOMAIN,
      MAILGUN_API_KEY: API_KEY,
      PROVIDER_LOOKUP: 'mailgun',
    },
  });
  t = env;
  const app = await env.startApp();
  const request = sendRequested({
    campaignId: `mailgun-lookup-${randomUUID().slice(0, 8)}`,
    candidateId: 'cand-1',
    email: RECIPIENT,
  });
  await env.publishRequests([request]);
  return { env, app, server, sendId: request.sendId };
}

const firstOnly =
  (hostility: HttpHostility, at?: { time: number }) =>
  (n: number): HttpHostility | undefined => {
    if (n !== 1) return undefined;
    if (at) at.time = Date.now();
    return hostility;
  };

describe('Mailgun sends in doubt settled by the Events API lookup', { timeout: 90_000 }, () => {
  it('dropped after Mailgun stored the body: ambiguous, then found (once its event is visible), sent, one copy', async () => {
    const { env, app, server, sendId } = await start(
      { messages: firstOnly({ act: 'drop' }) },
      // Mailgun's event storage lags: the first lookups may find nothing, which before the settle time means wait.
      { eventsVisibleAfterMs: 300 },
    );
    const row = await until(env, sendId, 'sent');
    expect(row.attempts).toBe(1);
    expect(server.misbehaved).toEqual([{ endpoint: 'messages', hostility: { act: 'drop' } }]);
    expect(server.requests.messages).toBe(1);
    expect(server.requests.events).toBeGreaterThanOrEqual(1);
    expect(await decisions(app, 'ambiguous', 'sent')).toBe(1);
    await app.reconciler.sweep();
    await app.reconciler.sweep();
    const copies = server.deliveredTo(RECIPIENT);
    expect(copies).toHaveLength(1);
    // Mailgun keeps our Message-ID as the message id, without brackets.
    expect(`<${copies[0]?.id}>`).toBe(messageIdOf(sendId));
    expect(copies[0]?.variables.get('send-id')).toBe(sendId);
  });

  it('never stored (a 502 from the gateway, so unknown): not found after the settle time, retried once, one copy', async () => {
    const cut = { time: 0 };
    const { env, app, server, sendId } = await start({ messages: firstOnly({ act: 'status', status: 502 }, cut) });
    const row = await until(env, sendId, 'sent');
    expect(row.attempts).toBe(2);
    expect(server.requests.messages).toBe(2);
    const copies = server.deliveredTo(RECIPIENT);
    expect(copies).toHaveLength(1);
    // A not-found earlier than the hand-over bound plus the settle time licenses nothing.
    expect((copies[0]?.storedAt ?? 0) - cut.time).toBeGreaterThanOrEqual(DECIDABLE_AFTER_MS - 100);
    expect(await decisions(app, 'ambiguous', 'not_sent')).toBe(1);
    await app.reconciler.sweep();
    expect(server.deliveredTo(RECIPIENT)).toHaveLength(1);
  });

  it('the Events API answering 5xx: the send stays ambiguous past the settle time, never sent again', async () => {
    const { env, app, server, sendId } = await start({
      messages: firstOnly({ act: 'status', status: 502 }),
      events: () => ({ act: 'status', status: 503 }),
    });
    await until(env, sendId, 'ambiguous');
    const started = (
      await env.query<{ at: Date }>('SELECT attempt_started_at AS at FROM sends WHERE send_id = $1', [sendId])
    )[0]?.at as Date;
    await waitFor(
      async () =>
        Date.now() > started.getTime() + DECIDABLE_AFTER_MS + 1_000 &&
        (await decisions(app, 'ambiguous', 'pending')) >= 3,
      { timeoutMs: 30_000, description: 'the lookup to be asked past the settle time' },
    );
    expect(server.requests.events).toBeGreaterThanOrEqual(3);
    expect(await rowOf(env, sendId)).toMatchObject({ status: 'ambiguous', attempts: 1 });
    expect(server.requests.messages).toBe(1);
    expect(server.messages).toHaveLength(0);
    expect(await decisions(app, 'ambiguous', 'not_sent')).toBe(0);
  });
});
