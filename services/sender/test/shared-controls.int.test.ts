/**
 * Controls shared by replicas through PostgreSQL (issue #18), with the sender apps against a real
 * broker, database and SMTP sink: one send rate (global and per recipient domain) for two replicas,
 * an auto-pause window that outlives the replica that counted, lease renewal of a batch that runs
 * longer than its lease, the suppression list read again at the fence, and hard bounces.
 */
import { waitFor } from '@outreach/testkit';
import type { FastifyInstance } from 'fastify';
import { afterEach, describe, expect, inject, it } from 'vitest';
import { API_TOKEN, deliveriesByRecipient, senderTestEnv, sendRequested, type SenderTestEnv } from './harness.js';

const infra = { kafkaBrokers: inject('kafkaBrokers'), databaseUrl: inject('databaseUrl') };
const auth = { authorization: `Bearer ${API_TOKEN}` };
let t: SenderTestEnv;

afterEach(async () => {
  await t?.cleanup();
});

async function statusOf(email: string): Promise<string | undefined> {
  return (await t.query<{ status: string }>('SELECT status FROM sends WHERE email_norm = $1', [email]))[0]?.status;
}

/** A series' value on /metrics (0 when absent): `labels` must all be among its labels. */
async function metric(app: FastifyInstance, name: string, labels: Record<string, string> = {}): Promise<number> {
  const body = (await app.inject({ url: '/metrics' })).body;
  const wanted = Object.entries(labels).map(([k, v]) => `${k}="${v}"`);
  for (const line of body.split('\n')) {
    const match = /^([a-z_]+)(?:\{([^}]*)\})? (\S+)$/.exec(line);
    if (match?.[1] === name && wanted.every((label) => (match[2] ?? '').split(',').includes(label)))
      return Number(match[3]);
  }
  return 0;
}

/** The largest excess, over any stretch of deliveries, of their count over burst + rate × its duration. */
function worstExcess(times: readonly number[], rate: number, burst: number): number {
  const sorted = [...times].sort((x, y) => x - y);
  let worst = Number.NEGATIVE_INFINITY;
  for (let i = 0; i < sorted.length; i++)
    for (let j = i; j < sorted.length; j++) {
      const elapsed = ((sorted[j] as number) - (sorted[i] as number)) / 1000;
      worst = Math.max(worst, j - i + 1 - (burst + rate * elapsed));
    }
  return worst;
}

describe('controls shared by replicas', () => {
  it('two replicas share one send rate, globally and per recipient domain', async () => {
    // Slow enough that the time between a token's grant and the message's arrival at the sink (a
    // fence, an SMTP conversation, a stall of this process, which runs both replicas and the sink on
    // a shared machine) stays below one token's interval: the bound is checked where mail arrives.
    const rate = 2;
    const burst = 2;
    const domainRate = 1;
    const domainBurst = 1;
    t = await senderTestEnv(infra, {
      env: {
        SEND_CONCURRENCY: '1',
        SEND_RATE_PER_SECOND: String(rate),
        SEND_RATE_BURST: String(burst),
        SEND_RATE_PER_DOMAIN_PER_SECOND: String(domainRate),
        SEND_RATE_PER_DOMAIN_BURST: String(domainBurst),
      },
    });
    const a = await t.startApp();
    const b = await t.startApp();
    // 14 recipients at their own domains (only the global rate binds them) and 6 at one domain.
    const spread = Array.from({ length: 14 }, (_, i) =>
      sendRequested({ campaignId: 'rate', candidateId: `s${i}`, email: `s${i}@d${i}.example` }),
    );
    const crowded = Array.from({ length: 6 }, (_, i) =>
      sendRequested({ campaignId: 'rate', candidateId: `c${i}`, email: `c${i}@crowded.example` }),
    );
    await t.publishRequests([...spread, ...crowded]);
    await waitFor(() => t.sink.messages.length === 20, { timeoutMs: 60_000, description: '20 delivered' });

    // +1: a token's grant and the message's arrival at the sink are not the same instant.
    const all = t.sink.messages.map((m) => m.receivedAt);
    const timeline = () => all.map((at) => at - Math.min(...all)).join(' ');
    expect(worstExcess(all, rate, burst), timeline()).toBeLessThanOrEqual(1);
    const toCrowded = t.sink.messages.filter((m) => m.to[0]?.endsWith('@crowded.example')).map((m) => m.receivedAt);
    expect(toCrowded).toHaveLength(6);
    expect(worstExcess(toCrowded, domainRate, domainBurst), timeline()).toBeLessThanOrEqual(1);
    console.info(
      `shared rate: 20 deliveries in ${((Math.max(...all) - Math.min(...all)) / 1000).toFixed(2)} s; worst excess over burst + rate × t: ` +
        `${worstExcess(all, rate, burst).toFixed(2)} global, ${worstExcess(toCrowded, domainRate, domainBurst).toFixed(2)} one domain`,
    );
    // Both replicas sent: with a bucket each, the pair would have gone at twice the rate.
    expect(await metric(a, 'outreach_sender_sends_total', { outcome: 'sent' })).toBeGreaterThan(0);
    expect(await metric(b, 'outreach_sender_sends_total', { outcome: 'sent' })).toBeGreaterThan(0);
    expect([...deliveriesByRecipient(t.sink).values()].every((n) => n === 1)).toBe(true);
  });

  it('an address suppressed while its claim waits for a rate token is not mailed: the fence reads the list again', async () => {
    t = await senderTestEnv(infra, {
      partitions: 1,
      env: { SEND_CONCURRENCY: '2', SEND_RATE_PER_SECOND: '0.5', SEND_RATE_BURST: '1' },
    });
    const app = await t.startApp();
    const addresses = ['first@example.com', 'second@example.com'];
    await t.publishRequests(
      addresses.map((email, i) => sendRequested({ campaignId: 'slow', candidateId: `w${i}`, email })),
    );
    // One took the only token; the other passed its checks and waits for the next, 2 s away.
    await waitFor(
      async () => t.sink.messages.length === 1 && (await metric(app, 'outreach_sender_rate_waiting_sends')) === 1,
      {
        timeoutMs: 20_000,
        description: 'one delivered, one waiting for a token',
      },
    );
    const waiting = addresses.find((a) => a !== t.sink.messages[0]?.to[0]) as string;
    expect(await statusOf(waiting)).toBe('claimed');
    const put = await app.inject({
      method: 'PUT',
      url: `/v1/suppressions/${waiting}`,
      headers: auth,
      payload: { reason: 'unsubscribe' },
    });
    expect(put.statusCode, put.body).toBe(200);
    await waitFor(async () => (await statusOf(waiting)) === 'suppressed', {
      timeoutMs: 20_000,
      description: 'the waiting send suppressed at its fence',
    });
    expect(t.sink.deliveredTo(waiting)).toHaveLength(0);
    expect(t.sink.messages).toHaveLength(1);
  });

  it('a permanent 5xx to RCPT TO fails the send and suppresses the address with it; a policy refusal does not', async () => {
    t = await senderTestEnv(infra, {
      sink: {
        behaviour: (to) =>
          to.toLowerCase().startsWith('gone')
            ? { reject: '5.1.1 no such user' }
            : to.startsWith('relay')
              ? { reject: '5.7.1 relaying denied' }
              : undefined,
      },
    });
    const app = await t.startApp();
    await t.publishRequests([
      sendRequested({ campaignId: 'first', candidateId: 'gone', email: 'Gone@Example.com' }),
      sendRequested({ campaignId: 'first', candidateId: 'relay', email: 'relay@example.com' }),
    ]);
    // Read together: the suppression is written in the transaction that records the failure.
    const row = async (email: string) =>
      (
        await t.query<{ status: string; suppression: string | null; note: string | null }>(
          `SELECT s.status, sup.reason AS suppression, sup.note FROM sends s
           LEFT JOIN suppressions sup ON sup.email_norm = s.email_norm WHERE s.email_norm = $1`,
          [email],
        )
      )[0];
    await waitFor(async () => (await row('gone@example.com'))?.status === 'failed', {
      timeoutMs: 20_000,
      description: 'the hard bounce recorded',
    });
    expect(await row('gone@example.com')).toEqual({
      status: 'failed',
      suppression: 'bounce',
      note: 'provider rejected: smtp 550 5.1.1 permanent at RCPT TO',
    });
    await waitFor(async () => (await row('relay@example.com'))?.status === 'failed', {
      timeoutMs: 20_000,
      description: 'the policy refusal recorded',
    });
    expect((await row('relay@example.com'))?.suppression).toBeNull();
    const listed = await app.inject({ url: '/v1/suppressions/gone@example.com', headers: auth });
    expect(listed.json()).toMatchObject({ suppressed: true, reason: 'bounce' });

    // Another campaign, the same address: never handed to the provider again.
    await t.publishRequests([
      sendRequested({ campaignId: 'second', candidateId: 'gone-2', email: 'gone@example.com' }),
    ]);
    await waitFor(
      async () =>
        (await t.query<{ status: string }>(`SELECT status FROM sends WHERE campaign_id = 'second'`))[0]?.status ===
        'suppressed',
      { timeoutMs: 20_000, description: 'the later send suppressed' },
    );
    expect(t.sink.messages).toHaveLength(0);
  });

  it('the auto-pause window is shared by replicas and outlives a restart: B pauses on the failures A counted', async () => {
    t = await senderTestEnv(infra, {
      sink: { behaviour: (to) => (to.startsWith('refused') ? { reject: '5.7.1 blocked' } : undefined) },
      env: { AUTO_PAUSE_MIN_SENDS: '6', AUTO_PAUSE_THRESHOLD: '0.5', SEND_CONCURRENCY: '1' },
    });
    const refused = (i: number) =>
      sendRequested({ campaignId: 'flaky', candidateId: `r${i}`, email: `refused${i}@example.com` });
    const counted = async () =>
      (
        await t.query<{ attempts: number | null; failures: number | null }>(
          `SELECT sum(attempts)::int AS attempts, sum(failures)::int AS failures FROM provider_outcomes
           WHERE campaign_id = 'flaky'`,
        )
      )[0];
    const campaign = async (app: FastifyInstance) =>
      (await app.inject({ url: '/v1/campaigns/flaky', headers: auth })).json<{
        paused: boolean;
        pausedReason: string | null;
      }>();

    const a = await t.startApp();
    await t.publishRequests([0, 1, 2, 3].map(refused));
    await waitFor(async () => (await counted())?.attempts === 4, {
      timeoutMs: 20_000,
      description: "replica A's four failures counted",
    });
    expect(await campaign(a)).toMatchObject({ paused: false });
    await a.close();

    // A fresh replica, nothing in its memory: two more failures make six of six.
    const b = await t.startApp();
    await t.publishRequests([4, 5].map(refused));
    await waitFor(async () => (await campaign(b)).paused, { timeoutMs: 20_000, description: 'the campaign paused' });
    expect((await campaign(b)).pausedReason).toMatch(/auto-paused: provider errors on 6 of the last 6 sends/);
    expect(await metric(b, 'outreach_sender_auto_pauses_total')).toBe(1);
    // Its window starts empty again: a resume is not paused anew by the errors that paused it.
    await waitFor(async () => (await counted())?.attempts === null, {
      timeoutMs: 20_000,
      description: "the campaign's window reset",
    });
    await t.publishRequests([sendRequested({ campaignId: 'flaky', candidateId: 'later', email: 'later@example.com' })]);
    await waitFor(async () => (await statusOf('later@example.com')) === 'held', {
      timeoutMs: 20_000,
      description: 'the next send held',
    });
    expect(t.sink.messages).toHaveLength(0);
  });

  it('renews the leases of a batch that runs longer than the lease: no take-over by the other replica, one email each', async () => {
    const leaseMs = 2_000;
    const delayMs = 350;
    const n = 14; // 14 × 350 ms = 4.9 s, more than two leases
    t = await senderTestEnv(infra, {
      partitions: 1,
      sink: { behaviour: () => ({ delayMs }) },
      env: {
        LEASE_MS: String(leaseMs),
        PROVIDER_TIMEOUT_MS: '1000',
        SEND_CONCURRENCY: '1',
        RECONCILE_INTERVAL_MS: '200',
      },
    });
    expect(n * delayMs).toBeGreaterThan(2 * leaseMs);
    // One partition: one replica runs the batch while the other's reconciler sweeps every 200 ms.
    const apps = [await t.startApp(), await t.startApp()];
    await t.publishRequests(
      Array.from({ length: n }, (_, i) =>
        sendRequested({ campaignId: 'long', candidateId: `l${i}`, email: `l${i}@example.com` }),
      ),
    );
    // A claim older than its first lease, still waiting, whose lease runs: renewed.
    await waitFor(
      async () =>
        (
          await t.query(
            `SELECT 1 FROM sends WHERE status = 'claimed' AND now() > claimed_at + make_interval(secs => $1::float8 / 1000)
               AND lease_expires_at > now()`,
            [leaseMs * 1.25],
          )
        ).length > 0,
      { timeoutMs: 20_000, intervalMs: 100, description: 'a waiting claim past its first lease, renewed' },
    );
    await waitFor(
      async () =>
        (await t.query<{ n: number }>(`SELECT count(*)::int AS n FROM sends WHERE status = 'sent'`))[0]?.n === n,
      { timeoutMs: 30_000, description: `${n} sent` },
    );
    const deliveries = deliveriesByRecipient(t.sink);
    expect(deliveries.size).toBe(n);
    expect([...deliveries.values()].every((count) => count === 1)).toBe(true);
    expect(await t.query(`SELECT 1 FROM sends WHERE attempts <> 1`)).toEqual([]);
    for (const app of apps) {
      expect(await metric(app, 'outreach_sender_lease_takeovers_total')).toBe(0);
      expect(await metric(app, 'outreach_sender_fence_lost_total')).toBe(0);
    }
  });
});
