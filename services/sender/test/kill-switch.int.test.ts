/**
 * The global kill switch (issue #18) with two replicas: two sender apps in one consumer group and one
 * schema, mailing a slow SMTP sink. One PUT on one replica stops both; what may still arrive at the
 * sink after the call returns is measured against the sends that were past the fence at that moment.
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

async function statuses(campaignId: string): Promise<Record<string, number>> {
  const rows = await t.query<{ status: string; n: number }>(
    'SELECT status, count(*)::int AS n FROM sends WHERE campaign_id = $1 GROUP BY status',
    [campaignId],
  );
  return Object.fromEntries(rows.map((r) => [r.status, r.n]));
}

async function metric(app: FastifyInstance, name: string): Promise<string | undefined> {
  const body = (await app.inject({ url: '/metrics' })).body;
  return new RegExp(`^${name}(?:\\{[^}]*\\})? (\\S+)$`, 'm').exec(body)?.[1];
}

describe('the kill switch', () => {
  it('stops every send on every replica once the call returns, keeps what it held, and resuming sends each once', async () => {
    const concurrency = 2;
    t = await senderTestEnv(infra, {
      sink: { behaviour: () => ({ delayMs: 80 }) },
      env: { SEND_CONCURRENCY: String(concurrency) },
    });
    const a = await t.startApp();
    const b = await t.startApp();
    // A campaign paused on its own: the switch's resume must leave it held.
    await a.inject({ method: 'POST', url: '/v1/campaigns/camp-own/pause', headers: auth, payload: {} });
    const flood = Array.from({ length: 160 }, (_, i) =>
      sendRequested({ campaignId: 'camp-flood', candidateId: `f${i}`, email: `f${i}@example.com` }),
    );
    const own = Array.from({ length: 10 }, (_, i) =>
      sendRequested({ campaignId: 'camp-own', candidateId: `o${i}`, email: `o${i}@example.com` }),
    );
    await t.publishRequests([...flood, ...own]);
    await waitFor(() => t.sink.messages.length >= 20, { timeoutMs: 30_000, description: 'the flood under way' });

    const [clock] = await t.query<{ before: Date }>('SELECT now() AS before');
    const put = await b.inject({
      method: 'PUT',
      url: '/v1/sending',
      headers: auth,
      payload: { paused: true, reason: 'incident 7' },
    });
    const deliveredAtReturn = t.sink.messages.length;
    expect(put.statusCode, put.body).toBe(200);
    const { inFlight } = put.json<{ inFlight: number }>();
    // Past the fence when the call returned: `sending` then, or recorded since the call began.
    const passed = new Set(
      (
        await t.query<{ email: string }>(
          `SELECT email_norm AS email FROM sends WHERE status = 'sending' OR sent_at >= $1`,
          [clock?.before],
        )
      ).map((r) => r.email),
    );

    // Settled: every request has a row, none is claimed or in flight, so nothing more can go out.
    await waitFor(
      async () => {
        const s = await statuses('camp-flood');
        return (s.sent ?? 0) + (s.held ?? 0) === flood.length && (await statuses('camp-own')).held === own.length;
      },
      { timeoutMs: 30_000, description: 'every send sent or held' },
    );
    const late = t.sink.messages.slice(deliveredAtReturn).flatMap((m) => m.to);
    // Each replica has at most SEND_CONCURRENCY provider calls in flight.
    expect(inFlight).toBeLessThanOrEqual(2 * concurrency);
    expect(late.filter((to) => !passed.has(to))).toEqual([]);
    expect(late.length).toBeLessThanOrEqual(passed.size);
    const sentBefore = (await statuses('camp-flood')).sent ?? 0;
    const held = flood.length - sentBefore;
    expect(held).toBeGreaterThan(0);
    console.info(
      `kill switch: ${inFlight} sends in flight when the pause returned, ${late.length} delivered after it; ${held} held`,
    );
    const reasons = await t.query<{ campaignId: string; reason: string }>(
      `SELECT DISTINCT campaign_id AS "campaignId", reason FROM sends WHERE status = 'held' ORDER BY 1`,
    );
    expect(reasons).toEqual([
      { campaignId: 'camp-flood', reason: 'sending is paused' },
      { campaignId: 'camp-own', reason: 'campaign is paused' },
    ]);
    for (const app of [a, b]) {
      expect(await metric(app, 'outreach_sender_sending_paused')).toBe('1');
      expect((await app.inject({ url: '/v1/sending', headers: auth })).json()).toMatchObject({
        paused: true,
        reason: 'incident 7',
      });
    }
    // A campaign's resume does not release what the switch holds.
    const campaignResume = await a.inject({ method: 'POST', url: '/v1/campaigns/camp-flood/resume', headers: auth });
    expect(campaignResume.json()).toMatchObject({ released: 0 });
    expect((await statuses('camp-flood')).held).toBe(held);

    const resumed = await a.inject({ method: 'PUT', url: '/v1/sending', headers: auth, payload: { paused: false } });
    expect(resumed.json()).toMatchObject({ paused: false, released: held, inFlight: 0 });
    await waitFor(async () => (await statuses('camp-flood')).sent === flood.length, {
      timeoutMs: 60_000,
      description: 'every flood send delivered after the resume',
    });
    // The campaign paused on its own stays held until its own resume.
    expect(await statuses('camp-own')).toEqual({ held: own.length });
    expect(await metric(b, 'outreach_sender_sending_paused')).toBe('0');
    const ownResume = await b.inject({ method: 'POST', url: '/v1/campaigns/camp-own/resume', headers: auth });
    expect(ownResume.json()).toMatchObject({ released: own.length });
    await waitFor(async () => (await statuses('camp-own')).sent === own.length, {
      timeoutMs: 30_000,
      description: 'the own-paused campaign delivered after its resume',
    });
    const deliveries = deliveriesByRecipient(t.sink);
    expect(deliveries.size).toBe(flood.length + own.length);
    expect([...deliveries.entries()].filter(([, n]) => n !== 1)).toEqual([]);
  });
});
