/**
 * Attacks on promise 1 through the whole sender (Kafka in, Postgres state, the real SmtpProvider)
 * against a raw scripted SMTP peer: late verdicts that race the pipeline's backstop and an operator.
 * Copies are counted at the peer, outcomes in the sends table.
 */
import { randomUUID } from 'node:crypto';
import { waitFor } from '@outreach/testkit';
import { describe, expect, inject, it } from 'vitest';
import type {} from '../src/plugins/sender.js';
import { messageIdOf, senderTestEnv, sendRequested, type SenderTestEnv } from './harness.js';
import { RawSmtp, type Script } from './raw-smtp.js';
import { stoppedAfterEach } from './stopped-after-each.js';

const infra = { kafkaBrokers: inject('kafkaBrokers'), databaseUrl: inject('databaseUrl') };
const T = 1500;
const keep = stoppedAfterEach();

async function start(script: Script, env: Record<string, string> = {}) {
  const peer = keep(await new RawSmtp(script).start(), (p) => p.stop());
  const t = await senderTestEnv(infra, {
    env: {
      SMTP_PORT: String(peer.port),
      PROVIDER_TIMEOUT_MS: String(T),
      LEASE_MS: '6000',
      RETRY_BACKOFF_MS: '50',
      SEND_CONCURRENCY: '1',
      ...env,
    },
  });
  keep(t, (e) => e.cleanup());
  const app = await t.startApp();
  return { env: t, app, peer };
}

async function statusOf(env: SenderTestEnv, sendId: string): Promise<string | undefined> {
  const rows = await env.query<{ status: string }>('SELECT status FROM sends WHERE send_id = $1', [sendId]);
  return rows[0]?.status;
}

describe('late SMTP verdicts through the sender', { timeout: 60_000 }, () => {
  it('a stale pooled connection, then a late 250 on the fresh one: the send ends sent, not ambiguous forever', async () => {
    // Transaction 1 leaves a pooled connection. On it, transaction 2's MAIL is met with silence
    // and then a close just before our timeout (an idle-timeout race): the adapter retries on a new
    // connection, whose final dot is answered 250 after the pipeline's backstop has fired.
    const { env, peer } = await start({
      pipelining: false,
      mail: (c, n) => {
        if (n === 2) setTimeout(() => c.socket.destroy(), T - 300);
        else c.write('250 ok\r\n');
      },
      dot: (c, n) => {
        if (n === 3) setTimeout(() => c.write('250 ok late\r\n'), 2 * T);
        else c.write('250 ok\r\n');
      },
    });
    const campaignId = `late-${randomUUID().slice(0, 8)}`;
    const first = sendRequested({ campaignId, candidateId: 'c1', email: 'c1@example.com' });
    await env.publishRequests([first]);
    await waitFor(async () => (await statusOf(env, first.sendId)) === 'sent', {
      timeoutMs: 20_000,
      description: 'the first send to be sent (and its connection pooled)',
    });
    const second = sendRequested({ campaignId, candidateId: 'c2', email: 'c2@example.com' });
    await env.publishRequests([second]);
    await waitFor(async () => peer.received.length === 2, { timeoutMs: 20_000, description: 'the peer to hold 2' });
    // The peer answered 250 for it (2T after the dot). The promise: a late 250 is recorded as sent.
    let last: string | undefined;
    await waitFor(
      async () => {
        last = await statusOf(env, second.sendId);
        return last === 'sent';
      },
      { timeoutMs: 4 * T + 5_000, description: 'the late 250 to be recorded' },
    ).catch(() => undefined);
    const reason = (
      await env.query<{ reason: string | null }>('SELECT reason FROM sends WHERE send_id = $1', [second.sendId])
    )[0]?.reason;
    expect(last, `final status (reason: ${reason})`).toBe('sent');
    expect(peer.received).toHaveLength(2);
  });

  it('an operator cannot retry while the 250 is still on its way: never a second copy', async () => {
    let lateWritten = false;
    const { env, app, peer } = await start({
      dot: (c, n) => {
        if (n === 1)
          setTimeout(() => {
            c.write('250 ok late\r\n');
            lateWritten = true;
          }, 4 * T);
        else c.write('250 ok\r\n');
      },
    });
    const campaignId = `late-${randomUUID().slice(0, 8)}`;
    const request = sendRequested({ campaignId, candidateId: 'c1', email: 'c1@example.com' });
    await env.publishRequests([request]);
    await waitFor(async () => (await statusOf(env, request.sendId)) === 'ambiguous', {
      timeoutMs: 20_000,
      description: 'the send to be ambiguous',
    });
    // A retry now would mail a second copy if the 250 then came: refused while the reply is awaited.
    const response = await app.inject({
      method: 'POST',
      url: `/v1/sends/${request.sendId}/resolve`,
      headers: { authorization: 'Bearer test-token' },
      payload: { resolution: 'retry' },
    });
    expect(response.statusCode).toBe(409);
    expect(response.json().message).toMatch(/late reply is awaited/);
    await waitFor(async () => (await statusOf(env, request.sendId)) === 'sent', {
      timeoutMs: 20_000,
      description: 'the send to be sent',
    });
    // Wait until the first connection's late reply has come and gone.
    await waitFor(() => lateWritten, { timeoutMs: 10_000, description: 'the late 250 written' });
    const copies = peer.received.filter((m) => m.messageId === messageIdOf(request.sendId)).length;
    expect(copies, 'copies of one send at the SMTP server').toBe(1);
  });
});
