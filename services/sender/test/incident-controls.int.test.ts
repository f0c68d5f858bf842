/**
 * The controls shared through PostgreSQL (issue #18): the kill switch's row, the token buckets that
 * several limiters (standing in for replicas, each with its own pool) draw from, and the auto-pause
 * window that outlives the process that counted it. Real PostgreSQL, one schema per run.
 */
import { randomUUID } from 'node:crypto';
import { createPool, migrate } from '@outreach/shared';
import { testEmailHashKey } from '@outreach/testkit';
import type { Pool } from 'pg';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { KillSwitch, SharedErrorWindow, SharedRateLimiter } from '../src/adapters/incident-controls.js';
import { SendsRepository } from '../src/adapters/sends-repository.js';
import { migrationsDir } from '../src/app.js';

const databaseUrl = inject('databaseUrl');
const schema = `controls_${randomUUID().slice(0, 8)}`;
const pools: Pool[] = [];

function pool(): Pool {
  const p = createPool({ connectionString: databaseUrl, applicationName: 'controls-test', schema, max: 4 });
  pools.push(p);
  return p;
}

beforeAll(async () => {
  await migrate({
    databaseUrl,
    schema,
    dir: migrationsDir,
    outbox: true,
    logger: { info: () => undefined, debug: () => undefined },
  });
});

afterAll(async () => {
  const [first] = pools;
  await first?.query(`DROP SCHEMA "${schema}" CASCADE`);
  await Promise.all(pools.map((p) => p.end()));
});

describe('incident controls in PostgreSQL', { timeout: 60_000 }, () => {
  it('the kill switch is one row every replica reads; a repeated pause keeps its first time', async () => {
    const killSwitch = (p: Pool) => new KillSwitch(p, new SendsRepository(p, 'unused', 60_000, testEmailHashKey()));
    const a = killSwitch(pool());
    const b = killSwitch(pool());
    expect((await b.get()).paused).toBe(false);
    const first = await a.set(true, 'provider incident', 'ops-token');
    expect(first).toMatchObject({ paused: true, released: 0, inFlight: 0 });
    expect(await b.get()).toMatchObject({ paused: true, reason: 'provider incident', changedBy: 'ops-token' });
    const again = await a.set(true, 'still the incident', 'ops-token');
    expect(again.changedAt).toEqual(first.changedAt);
    expect((await b.set(false, null, 'ops-token')).paused).toBe(false);
    expect((await a.get()).paused).toBe(false);
  });

  it('three replicas drawing from one bucket send at the shared rate, not three times it', async () => {
    const rate = 20;
    const burst = 5;
    const limiters = [0, 1, 2].map(
      () =>
        new SharedRateLimiter(pool(), {
          globalPerSecond: rate,
          globalBurst: burst,
          domainPerSecond: 1000,
          domainBurst: 1000,
        }),
    );
    const granted: number[] = [];
    const started = performance.now();
    // 3 × 20 = 60 takes: one replica alone would grant them in ~(60-5)/20 s; with a per-pod limit
    // the three would finish in a third of that. The shared bucket must keep them at 20/s overall.
    await Promise.all(
      limiters.flatMap((limiter, r) =>
        Array.from({ length: 20 }, (_, i) =>
          limiter.take(`d${(r + i) % 4}.example`).then(() => granted.push(performance.now() - started)),
        ),
      ),
    );
    granted.sort((x, y) => x - y);
    // Over any prefix, grants never exceed burst + rate × elapsed (+1 for the boundary).
    for (const [i, at] of granted.entries()) {
      expect(i + 1).toBeLessThanOrEqual(burst + (rate * at) / 1000 + 1);
    }
    expect(granted).toHaveLength(60);
    for (const limiter of limiters) limiter.close();
  });

  it('a recipient domain gets its own rate while other domains go at the global one', async () => {
    const limiter = new SharedRateLimiter(pool(), {
      globalPerSecond: 1000,
      globalBurst: 1000,
      domainPerSecond: 5,
      domainBurst: 2,
    });
    const slowDomain = `slow-${randomUUID().slice(0, 6)}.example`;
    const times: Record<string, number[]> = { slow: [], fast: [] };
    const started = performance.now();
    await Promise.all([
      ...Array.from({ length: 7 }, () =>
        limiter.take(slowDomain).then(() => times.slow?.push(performance.now() - started)),
      ),
      ...Array.from({ length: 7 }, (_, i) =>
        limiter.take(`fast${i}.example`).then(() => times.fast?.push(performance.now() - started)),
      ),
    ]);
    const slow = (times.slow ?? []).sort((x, y) => x - y);
    const fast = (times.fast ?? []).sort((x, y) => x - y);
    // 7 to one domain at 5/s with a burst of 2 take at least (7-2)/5 = 1 s; 7 different domains do not wait.
    expect(slow.at(-1)).toBeGreaterThanOrEqual(900);
    expect(fast.at(-1)).toBeLessThan(slow.at(-1) ?? 0);
    for (const [i, at] of slow.entries()) expect(i + 1).toBeLessThanOrEqual(2 + (5 * at) / 1000 + 1);
    // Domains are case-insensitive: the same domain in capitals shares the bucket.
    const t0 = performance.now();
    await limiter.take(slowDomain.toUpperCase());
    expect(performance.now() - t0).toBeGreaterThan(50);
    limiter.close();
  });

  it('a closed limiter refuses its waiters instead of leaving them hanging', async () => {
    const limiter = new SharedRateLimiter(pool(), {
      globalPerSecond: 0.01,
      globalBurst: 1,
      domainPerSecond: 1000,
      domainBurst: 1000,
    });
    // At 0.01/s after the earlier tests drew on this schema's global bucket, at most one of three
    // waiters can be granted before close(); the others must be refused, not left pending.
    const waits = [limiter.take('a.example'), limiter.take('a.example'), limiter.take('a.example')].map((p) =>
      p.then(
        () => 'granted',
        (e: unknown) => (e as Error).message,
      ),
    );
    await new Promise((resolve) => setImmediate(resolve));
    limiter.close();
    const outcomes = await Promise.all(waits);
    expect(outcomes).toContain('rate limiter closed');
  });

  it('the auto-pause window is shared by replicas and outlives the one that counted', async () => {
    const campaign = `c-${randomUUID().slice(0, 8)}`;
    const first = new SharedErrorWindow(pool(), 60_000);
    await first.record(Array.from({ length: 6 }, (_, i) => ({ campaignId: campaign, failed: i < 4 })));
    // A second replica (or the first after a restart: a new pool, no memory) sees those six.
    const second = new SharedErrorWindow(pool(), 60_000);
    const counts = await second.record([{ campaignId: campaign, failed: true }]);
    expect(counts.get(campaign)).toEqual({ attempts: 7, failures: 5 });
    await second.reset(campaign);
    expect((await first.record([{ campaignId: campaign, failed: false }])).get(campaign)).toEqual({
      attempts: 1,
      failures: 0,
    });
  });
});
