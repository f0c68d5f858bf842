/**
 * GET /v1/campaigns: every campaign with a send or a pause, in id order and a page at a time, with its
 * sends by status, held sends, pause reason (an auto-pause's) and provider error rate; walked by a
 * loose index scan of sends (campaign_id, status), with no index of its own.
 */
import { waitFor } from '@outreach/testkit';
import { afterEach, describe, expect, inject, it } from 'vitest';
import { API_TOKEN, senderTestEnv, sendRequested, type SenderTestEnv } from './harness.js';

const infra = { kafkaBrokers: inject('kafkaBrokers'), databaseUrl: inject('databaseUrl') };
const auth = { authorization: `Bearer ${API_TOKEN}` };
let t: SenderTestEnv;

afterEach(async () => {
  await t?.cleanup();
});

interface Summary {
  campaignId: string;
  paused: boolean;
  pausedReason: string | null;
  pausedAt: string | null;
  counts: Record<string, number>;
  held: number;
  errors: { attempts: number; failures: number; rate: number | null };
}

describe('the campaign list', () => {
  it('pages through campaigns with their counts, held sends, reasons and error rates', async () => {
    t = await senderTestEnv(infra);
    const app = await t.startApp();
    await app.inject({
      method: 'POST',
      url: '/v1/campaigns/camp-b/pause',
      headers: auth,
      payload: { reason: 'why b' },
    });
    // Paused before it has any send: listed from `campaigns` alone.
    await app.inject({
      method: 'POST',
      url: '/v1/campaigns/camp-z/pause',
      headers: auth,
      payload: { reason: 'why z' },
    });
    const requests = [
      ...Array.from({ length: 5 }, (_, i) =>
        sendRequested({ campaignId: 'camp-a', candidateId: `a${i}`, email: `a${i}@example.com` }),
      ),
      ...Array.from({ length: 3 }, (_, i) =>
        sendRequested({ campaignId: 'camp-b', candidateId: `b${i}`, email: `b${i}@example.com` }),
      ),
      ...Array.from({ length: 2 }, (_, i) =>
        sendRequested({ campaignId: 'camp-c', candidateId: `c${i}`, email: `c${i}@example.com` }),
      ),
    ];
    await t.publishRequests(requests);
    await waitFor(
      async () => {
        const [row] = await t.query<{ n: number }>(
          `SELECT count(*)::int AS n FROM sends WHERE status IN ('sent', 'held')`,
        );
        return row?.n === requests.length;
      },
      { timeoutMs: 30_000, description: 'every send sent or held' },
    );
    // The auto-pause window, set by hand: camp-a had 4 attempts, 1 failed, this second; camp-c's are too old.
    // The sends' own attempts are counted after their status is recorded: wait for all 7, then replace them.
    await waitFor(
      async () =>
        (await t.query<{ n: number }>('SELECT coalesce(sum(attempts), 0)::int AS n FROM provider_outcomes'))[0]?.n ===
        7,
      { timeoutMs: 10_000, description: "camp-a's and camp-c's attempts counted" },
    );
    await t.query('DELETE FROM provider_outcomes');
    await t.query(
      `INSERT INTO provider_outcomes (campaign_id, second, attempts, failures) VALUES
         ('camp-a', date_trunc('second', now()), 4, 1), ('camp-c', now() - interval '1 day', 9, 9)`,
    );

    const list = async (url: string) => {
      const answer = await app.inject({ url, headers: auth });
      expect(answer.statusCode, answer.body).toBe(200);
      return answer.json<{ campaigns: Summary[]; next: string | null }>();
    };
    const first = await list('/v1/campaigns?limit=2');
    expect(first.campaigns.map((c) => c.campaignId)).toEqual(['camp-a', 'camp-b']);
    expect(first.next).toBe('camp-b');
    const [a, b] = first.campaigns;
    expect(a).toMatchObject({ paused: false, pausedReason: null, counts: { sent: 5 }, held: 0 });
    expect(a?.errors).toEqual({ attempts: 4, failures: 1, rate: 0.25 });
    expect(b).toMatchObject({ paused: true, pausedReason: 'why b', counts: { held: 3 }, held: 3 });
    expect(b?.pausedAt).toEqual(expect.any(String));
    expect(b?.errors).toEqual({ attempts: 0, failures: 0, rate: null });
    const second = await list('/v1/campaigns?limit=2&after=camp-b');
    expect(second.campaigns.map((c) => c.campaignId)).toEqual(['camp-c', 'camp-z']);
    expect(second.campaigns[0]?.errors.attempts).toBe(0);
    expect(second.campaigns[1]).toMatchObject({ paused: true, pausedReason: 'why z', counts: {}, held: 0 });
    const last = await list(`/v1/campaigns?limit=2&after=${second.next}`);
    expect(last).toEqual({ campaigns: [], next: null });

    const paused = await list('/v1/campaigns?paused=true');
    expect(paused.campaigns.map((c) => c.campaignId)).toEqual(['camp-b', 'camp-z']);
    expect(paused.next).toBeNull();

    // An auto-pause's reason is the campaign's reason.
    await app.campaigns.autoPause('camp-a', 'auto-pause: 60% provider errors over 300 s');
    expect((await list('/v1/campaigns?paused=true&limit=1')).campaigns[0]).toMatchObject({
      campaignId: 'camp-a',
      pausedReason: 'auto-pause: 60% provider errors over 300 s',
    });

    // Refused with a reason: a limit past 100, a cursor past 256 characters, no token.
    expect((await app.inject({ url: '/v1/campaigns?limit=101', headers: auth })).statusCode).toBe(400);
    expect((await app.inject({ url: `/v1/campaigns?after=${'x'.repeat(257)}`, headers: auth })).statusCode).toBe(400);
    expect((await app.inject({ url: '/v1/campaigns' })).statusCode).toBe(401);
  });

  it('walks campaigns through the (campaign_id, status) index, not by reading every send', async () => {
    t = await senderTestEnv(infra);
    await t.startApp();
    await t.query(
      `INSERT INTO sends (send_id, campaign_id, candidate_id, candidate_key, email, email_norm, email_hash, step,
                          subject, body, request_id, correlation_id, status)
       SELECT gen_random_uuid(), 'camp-' || (i % 20), 'c' || i, 'k' || i, 'e' || i || '@example.com',
              'e' || i || '@example.com', 'h' || i, 'intro', 's', 'b', 'r' || i, 'corr', 'sent'
       FROM generate_series(1, 20000) AS i`,
    );
    await t.query('ANALYZE sends');
    const { CAMPAIGN_PAGE } = await import('../src/adapters/campaigns-repository.js');
    const plan = (
      await t.query<{ 'QUERY PLAN': string }>(`EXPLAIN ${CAMPAIGN_PAGE.replaceAll('$1', "''").replaceAll('$2', '50')}`)
    )
      .map((r) => r['QUERY PLAN'])
      .join('\n');
    expect(plan).toMatch(/Index Only Scan using sends_/);
    expect(plan).not.toMatch(/Seq Scan on sends/);
  });
});
