import { describe, expect, it } from 'vitest';
import { createMetricsRegistry } from '../metrics.js';
import { ConsumerLag, lagOf, registerConsumerLagMetrics, type LagAdmin } from './consumer-lag.js';

/** An admin answering from `topics` (read at each call), counting its calls; `gate()` can hold an answer. */
function fakeAdmin(
  topics: Record<string, Array<{ high: number; low?: number; committed: number }>>,
  gate: () => Promise<void> | undefined = () => undefined,
) {
  const calls = { topicOffsets: 0, groupOffsets: 0 };
  const admin = {
    async fetchTopicOffsets(topic: string) {
      calls.topicOffsets++;
      await gate();
      const partitions = topics[topic];
      if (!partitions) throw new Error(`This server does not host this topic-partition (${topic})`);
      return partitions.map((p, partition) => ({
        partition,
        offset: String(p.high),
        high: String(p.high),
        low: String(p.low ?? 0),
      }));
    },
    async fetchOffsets({ topics: wanted }: { groupId: string; topics?: string[] }) {
      calls.groupOffsets++;
      await gate();
      return (wanted ?? []).map((topic) => ({
        topic,
        partitions: (topics[topic] ?? []).map((p, partition) => ({
          partition,
          offset: String(p.committed),
          metadata: null,
        })),
      }));
    },
  } as unknown as LagAdmin;
  return { admin, calls };
}

describe('lagOf', () => {
  it('is the high watermark minus the committed offset', () => {
    expect(lagOf('40', '100', '0')).toBe(60);
    expect(lagOf('100', '100', '0')).toBe(0);
  });
  it('counts from the log start when nothing is committed (-1) or the committed offset was deleted', () => {
    expect(lagOf('-1', '100', '0')).toBe(100);
    expect(lagOf('-1', '100', '70')).toBe(30);
    expect(lagOf('10', '100', '70')).toBe(30);
  });
  it('is never negative, and exact beyond 2^53 offsets', () => {
    expect(lagOf('120', '100', '0')).toBe(0);
    expect(lagOf('9007199254740993', '9007199254740999', '0')).toBe(6);
  });
});

describe('ConsumerLag', () => {
  it('reports every partition of every tracked group and topic', async () => {
    const { admin } = fakeAdmin({
      a: [
        { high: 10, committed: 4 },
        { high: 5, committed: -1 },
      ],
      b: [{ high: 7, committed: 7 }],
    });
    const lag = new ConsumerLag({ admin: async () => admin });
    lag.track('g1', ['a']);
    lag.track('g2', ['a', 'b']);
    expect(await lag.read()).toEqual([
      { group: 'g1', topic: 'a', partition: 0, lag: 6 },
      { group: 'g1', topic: 'a', partition: 1, lag: 5 },
      { group: 'g2', topic: 'a', partition: 0, lag: 6 },
      { group: 'g2', topic: 'a', partition: 1, lag: 5 },
      { group: 'g2', topic: 'b', partition: 0, lag: 0 },
    ]);
  });

  it('asks the broker at most once per cacheMs, however many scrapes come', async () => {
    let now = 0;
    const { admin, calls } = fakeAdmin({ a: [{ high: 3, committed: 1 }] });
    const lag = new ConsumerLag({ admin: async () => admin, cacheMs: 10_000, now: () => now });
    lag.track('g', ['a']);
    await Promise.all([lag.read(), lag.read(), lag.read()]);
    now = 9_999;
    await lag.read();
    expect(calls).toEqual({ topicOffsets: 1, groupOffsets: 1 });
    now = 10_000;
    await lag.read();
    expect(calls).toEqual({ topicOffsets: 2, groupOffsets: 2 });
  });

  it('never holds a scrape longer than timeoutMs: a slow broker gets the last sample, then the fresh one', async () => {
    let now = 0;
    let hold: Promise<void> | undefined;
    let release: () => void = () => undefined;
    const values = { a: [{ high: 3, committed: 1 }] };
    const { admin } = fakeAdmin(values, () => hold);
    const lag = new ConsumerLag({ admin: async () => admin, cacheMs: 1_000, timeoutMs: 50, now: () => now });
    lag.track('g', ['a']);
    expect(await lag.read()).toEqual([{ group: 'g', topic: 'a', partition: 0, lag: 2 }]);

    hold = new Promise<void>((resolve) => (release = resolve));
    values.a[0] = { high: 9, committed: 1 };
    now = 5_000;
    const started = performance.now();
    expect(await lag.read()).toEqual([{ group: 'g', topic: 'a', partition: 0, lag: 2 }]);
    expect(performance.now() - started).toBeLessThan(1_000);
    hold = undefined;
    release();
    // The refresh that outlived the scrape lands; the next scrape sees it.
    await expect.poll(() => lag.read(), { timeout: 2_000 }).toEqual([{ group: 'g', topic: 'a', partition: 0, lag: 8 }]);
  });

  it('counts failed samples, keeps the last one for staleMs, then reports nothing rather than an old lag', async () => {
    let now = 0;
    let down = false;
    const { admin } = fakeAdmin({ a: [{ high: 3, committed: 0 }] });
    const registry = createMetricsRegistry('lag-test', false);
    const lag = registerConsumerLagMetrics(registry, {
      admin: async () => {
        if (down) throw new Error('connection refused');
        return admin;
      },
      cacheMs: 1_000,
      staleMs: 60_000,
      now: () => now,
    });
    lag.track('g', ['a']);
    const text = () => registry.metrics();
    // A scrape's counters are read while its gauges collect: a failure shows in the next scrape.
    const failures = () => registry.getSingleMetricAsString('outreach_consumer_lag_sample_failures_total');
    expect(await text()).toMatch(
      /^outreach_consumer_lag_messages\{group="g",topic="a",partition="0",service="lag-test"\} 3$/m,
    );
    down = true;
    now = 30_000;
    expect(await text()).toMatch(/^outreach_consumer_lag_messages\{[^}]*partition="0"[^}]*\} 3$/m);
    expect(await failures()).toMatch(/^outreach_consumer_lag_sample_failures_total\{service="lag-test"\} 1$/m);
    now = 61_000;
    expect(await text()).not.toMatch(/^outreach_consumer_lag_messages\{/m);
  });

  it('a topic that cannot be read is left out and counted; the other topics are still reported', async () => {
    const { admin } = fakeAdmin({ a: [{ high: 3, committed: 0 }] });
    const registry = createMetricsRegistry('lag-test', false);
    const lag = registerConsumerLagMetrics(registry, { admin: async () => admin });
    lag.track('g', ['a', 'missing']);
    const text = await registry.metrics();
    expect(await registry.getSingleMetricAsString('outreach_consumer_lag_sample_failures_total')).toMatch(
      /^outreach_consumer_lag_sample_failures_total\{service="lag-test"\} 1$/m,
    );
    expect(text).toMatch(/^outreach_consumer_lag_messages\{group="g",topic="a",partition="0",service="lag-test"\} 3$/m);
    expect(text).not.toMatch(/topic="missing"/);
  });
});
