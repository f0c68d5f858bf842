/**
 * The real sender against a real SMTP server scripted to fail at the worst moments of the
 * protocol. Each test counts what the server received, and requires the recorded outcome to be
 * honest (`ambiguous` when the server may hold the message) and 0 duplicate deliveries.
 */
import { randomUUID } from 'node:crypto';
import { uuidV5 } from '@outreach/contracts';
import type { SmtpHostility } from '@outreach/testkit';
import { waitFor } from '@outreach/testkit';
import type { FastifyInstance } from 'fastify';
import type {} from '../src/plugins/sender.js';
import { afterEach, describe, expect, inject, it } from 'vitest';
import { deliveriesByRecipient, senderTestEnv, sendRequested, type SenderTestEnv } from './harness.js';
import { readTopic } from '@outreach/testkit';
import { eventCodec, type SendRecorded } from '@outreach/contracts';

const infra = { kafkaBrokers: inject('kafkaBrokers'), databaseUrl: inject('databaseUrl') };
let t: SenderTestEnv | undefined;
afterEach(async () => {
  await t?.cleanup();
  t = undefined;
});

interface SendState {
  readonly status: string;
  readonly attempts: number;
  readonly reason: string | null;
}

/** Starts a sender against a sink that misbehaves as `hostile` says, and publishes `count` requests. */
async function run(
  hostile: (n: number) => SmtpHostility | undefined,
  options: { count?: number; env?: Record<string, string> } = {},
): Promise<{ env: SenderTestEnv; app: FastifyInstance; sendIds: string[]; emails: string[] }> {
  const env = await senderTestEnv(infra, {
    sink: { hostile },
    env: { PROVIDER_TIMEOUT_MS: '1500', LEASE_MS: '6000', RETRY_BACKOFF_MS: '50', ...options.env },
  });
  t = env;
  const app = await env.startApp();
  const campaignId = `hostile-${randomUUID().slice(0, 8)}`;
  const requests = Array.from({ length: options.count ?? 1 }, (_, i) =>
    sendRequested({
      campaignId,
      candidateId: `cand-${i}`,
      email: `cand-${i}@example.com`,
      // Large enough that a reset at the first body bytes lands before the final dot.
      body: 'We would like to talk.\n'.repeat(4_000),
    }),
  );
  await env.publishRequests(requests);
  return { env, app, sendIds: requests.map((r) => r.sendId), emails: requests.map((r) => r.email) };
}

async function stateOf(env: SenderTestEnv, sendId: string): Promise<SendState | undefined> {
  const rows = await env.query<SendState>('SELECT status, attempts, reason FROM sends WHERE send_id = $1', [sendId]);
  return rows[0];
}

async function settled(env: SenderTestEnv, sendId: string, statuses: readonly string[]): Promise<SendState> {
  let last: SendState | undefined;
  await waitFor(
    async () => {
      last = await stateOf(env, sendId);
      return last !== undefined && statuses.includes(last.status);
    },
    { timeoutMs: 30_000, description: `send ${sendId} to become ${statuses.join(' or ')}` },
  );
  return last as SendState;
}

/** Runs the reconciler to the end, twice: nothing it does may produce another copy. */
async function sweepTwice(app: FastifyInstance): Promise<void> {
  await app.reconciler.sweep();
  await app.reconciler.sweep();
}

function expectNoDuplicates(env: SenderTestEnv): void {
  const duplicated = [...deliveriesByRecipient(env.sink)].filter(([, n]) => n > 1);
  expect(duplicated).toEqual([]);
  const ids = env.sink.messages.map((m) => m.messageId);
  expect(new Set(ids).size).toBe(ids.length);
}

function expectCodedReason(reason: string | null, emails: readonly string[]): void {
  expect(reason).toMatch(/^(provider rejected: |gave up after \d+ attempts: )?smtp /);
  for (const email of emails) expect(reason ?? '').not.toContain(email);
}

const once =
  (hostility: SmtpHostility) =>
  (n: number): SmtpHostility | undefined =>
    n === 1 ? hostility : undefined;

describe('the sender against a hostile SMTP server', { timeout: 90_000 }, () => {
  it('drop after the final dot: ambiguous, one delivery, never a second copy', async () => {
    const { env, app, sendIds, emails } = await run(once({ at: 'dot', act: 'drop' }));
    const state = await settled(env, sendIds[0] as string, ['ambiguous', 'sent', 'failed']);
    expect(state.status).toBe('ambiguous');
    expectCodedReason(state.reason, emails);
    await sweepTwice(app);
    expect(env.sink.misbehaved).toHaveLength(1);
    expect(env.sink.messages).toHaveLength(1);
    expect((await stateOf(env, sendIds[0] as string))?.status).toBe('ambiguous');
    expectNoDuplicates(env);
  });

  it('twenty sends to a server that drops every one after the final dot: 20 ambiguous, 20 deliveries', async () => {
    const { env, app, sendIds } = await run(() => ({ at: 'dot', act: 'drop' }), { count: 20 });
    await waitFor(
      async () =>
        (
          await env.query<{ n: number }>(
            `SELECT count(*)::int AS n FROM sends WHERE status IN ('ambiguous', 'sent', 'failed')`,
          )
        )[0]?.n === 20,
      { timeoutMs: 60_000, description: '20 sends recorded' },
    );
    await sweepTwice(app);
    const statuses = await env.query<{ status: string; n: number }>(
      'SELECT status, count(*)::int AS n FROM sends WHERE send_id = ANY($1::uuid[]) GROUP BY status',
      [sendIds],
    );
    expect(statuses).toEqual([{ status: 'ambiguous', n: 20 }]);
    expect(env.sink.messages).toHaveLength(20);
    expectNoDuplicates(env);
  });

  it('reset in the middle of the body: ambiguous, nothing delivered, not retried', async () => {
    const { env, app, sendIds, emails } = await run(once({ at: 'body', act: 'reset' }));
    const state = await settled(env, sendIds[0] as string, ['ambiguous', 'sent', 'failed']);
    expect(state.status).toBe('ambiguous');
    expectCodedReason(state.reason, emails);
    await sweepTwice(app);
    expect(env.sink.misbehaved).toEqual([{ at: 'body', act: 'reset' }]);
    expect(env.sink.messages).toHaveLength(0);
    expect(env.sink.transactions).toBe(1);
  });

  it('a 250 after our timeout is recorded: ambiguous first, then sent, one delivery, no retry', async () => {
    const { env, sendIds } = await run(once({ at: 'dot', act: 'stall', ms: 3_000 }));
    await settled(env, sendIds[0] as string, ['ambiguous']);
    const state = await settled(env, sendIds[0] as string, ['sent']);
    expect(state.attempts).toBe(1);
    expect(env.sink.messages).toHaveLength(1);
    expect(env.sink.transactions).toBe(1);
    // Both verdicts were published as SendRecorded, in that order.
    const messages = await readTopic(env.kafka, env.topic('sendRecorded'), (m) => m.length >= 2);
    const recorded = messages.map((m) => eventCodec.decode(m.value as Buffer) as SendRecorded);
    expect(recorded.map((r) => r.eventId)).toEqual([
      uuidV5('send-recorded', sendIds[0] as string, 'ambiguous', '1'),
      uuidV5('send-recorded', sendIds[0] as string, 'sent', '1'),
    ]);
  });

  for (const code of [421, 451]) {
    it(`${code} after the final dot: not sent, retried, delivered once`, async () => {
      const { env, sendIds } = await run(once({ at: 'dot', act: 'reply', code }));
      const state = await settled(env, sendIds[0] as string, ['sent', 'failed', 'ambiguous']);
      expect(state.status).toBe('sent');
      expect(state.attempts).toBe(2);
      expect(env.sink.misbehaved).toHaveLength(1);
      expect(env.sink.messages).toHaveLength(1);
      expectNoDuplicates(env);
    });
  }

  it('554 after the final dot: failed with a coded reason, never retried, nothing delivered', async () => {
    const { env, app, sendIds, emails } = await run(once({ at: 'dot', act: 'reply', code: 554 }));
    const state = await settled(env, sendIds[0] as string, ['sent', 'failed', 'ambiguous']);
    expect(state.status).toBe('failed');
    expect(state.attempts).toBe(1);
    expectCodedReason(state.reason, emails);
    expect(state.reason).toContain('554');
    await sweepTwice(app);
    expect(env.sink.messages).toHaveLength(0);
    expect(env.sink.transactions).toBe(1);
  });

  const beforeData: Array<[string, SmtpHostility]> = [
    ['drop at MAIL FROM', { at: 'mail', act: 'drop' }],
    ['drop after RCPT', { at: 'rcpt', act: 'drop' }],
    ['no greeting', { at: 'greeting', act: 'stall' }],
  ];
  for (const [name, hostility] of beforeData) {
    it(`${name}: not sent, retried, delivered once`, async () => {
      const { env, sendIds } = await run(once(hostility));
      const state = await settled(env, sendIds[0] as string, ['sent', 'failed', 'ambiguous']);
      expect(state.status).toBe('sent');
      expect(state.attempts).toBe(2);
      expect(env.sink.misbehaved).toEqual([hostility]);
      expect(env.sink.messages).toHaveLength(1);
      expectNoDuplicates(env);
    });
  }

  it('a server that closes pooled connections between messages: every send goes out once, first try', async () => {
    // Every other transaction's connection is dropped at MAIL FROM, as an idle timeout would.
    const { env, sendIds } = await run((n) => (n % 2 === 0 ? { at: 'mail', act: 'drop' } : undefined), {
      count: 6,
      env: { SEND_CONCURRENCY: '1' },
    });
    for (const sendId of sendIds) await settled(env, sendId, ['sent', 'failed', 'ambiguous']);
    const states = await env.query<{ status: string; attempts: number }>(
      'SELECT status, attempts FROM sends WHERE send_id = ANY($1::uuid[])',
      [sendIds],
    );
    expect(states.every((s) => s.status === 'sent' && s.attempts === 1)).toBe(true);
    expect(env.sink.messages).toHaveLength(6);
    expectNoDuplicates(env);
  });
});
