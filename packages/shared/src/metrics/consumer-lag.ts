/**
 * Consumer lag, as the services see it: per group, topic and partition, the high watermark minus
 * the group's committed offset, read with the Kafka admin API (the same numbers
 * `kafka-consumer-groups.sh --describe` prints). Sampled when Prometheus scrapes, at most once per
 * `cacheMs` whatever the number of scrapers, and a slow broker never holds a scrape for more than
 * `timeoutMs`: the scrape gets the last sample (dropped once older than `staleMs`), and the
 * refresh finishes in the background.
 */
import type { Admin } from 'kafkajs';
import { counter, gauge, type Registry } from '../metrics.js';

export interface LagSample {
  readonly group: string;
  readonly topic: string;
  readonly partition: number;
  readonly lag: number;
}

/** The two admin calls a sample makes (a kafkajs Admin, or a fake in unit tests). */
export type LagAdmin = Pick<Admin, 'fetchOffsets' | 'fetchTopicOffsets'>;

export interface ConsumerLagOptions {
  /** The admin client, connected on first use; a rejection fails that sample only. */
  readonly admin: () => Promise<LagAdmin>;
  readonly cacheMs?: number;
  readonly timeoutMs?: number;
  readonly staleMs?: number;
  readonly now?: () => number;
  /** A sample failed (the broker away, an ACL missing): counted, never thrown at the scrape. */
  readonly onError?: (error: unknown) => void;
}

/**
 * The lag of one partition. Nothing committed yet (-1): every retained message is unread, since the
 * consumers start from the beginning; a committed offset that retention has deleted counts from the
 * log start, where the consumer will resume.
 */
export function lagOf(committed: string, high: string, low: string): number {
  const start = BigInt(low);
  let position = BigInt(committed);
  if (position < start) position = start;
  const lag = BigInt(high) - position;
  return lag > 0n ? Number(lag) : 0;
}

export class ConsumerLag {
  private readonly groups = new Map<string, Set<string>>();
  private last: { readonly at: number; readonly samples: readonly LagSample[] } | undefined;
  private refreshing: Promise<void> | undefined;
  private readonly cacheMs: number;
  private readonly timeoutMs: number;
  private readonly staleMs: number;
  private readonly now: () => number;

  constructor(private readonly options: ConsumerLagOptions) {
    this.cacheMs = options.cacheMs ?? 10_000;
    this.timeoutMs = options.timeoutMs ?? 2_000;
    this.staleMs = options.staleMs ?? 60_000;
    this.now = options.now ?? Date.now;
  }

  /** Adds a group and the topics it consumes. */
  track(group: string, topics: readonly string[]): void {
    const known = this.groups.get(group) ?? new Set<string>();
    for (const topic of topics) known.add(topic);
    this.groups.set(group, known);
  }

  /** The latest sample: cached, refreshed when older than `cacheMs`, waited for at most `timeoutMs`. */
  async read(): Promise<readonly LagSample[]> {
    if (this.last && this.now() - this.last.at < this.cacheMs) return this.last.samples;
    this.refreshing ??= this.refresh().finally(() => {
      this.refreshing = undefined;
    });
    let timer: NodeJS.Timeout | undefined;
    await Promise.race([
      this.refreshing,
      new Promise<void>((resolve) => {
        timer = setTimeout(resolve, this.timeoutMs);
      }),
    ]).finally(() => clearTimeout(timer));
    if (this.last && this.now() - this.last.at < this.staleMs) return this.last.samples;
    return [];
  }

  private async refresh(): Promise<void> {
    try {
      const admin = await this.options.admin();
      const topics = [...new Set([...this.groups.values()].flatMap((t) => [...t]))];
      const watermarks = new Map<string, Map<number, { high: string; low: string }>>();
      // A topic that cannot be read (deleted, not yet created, no Describe) is left out and counted as
      // a failure; the others are still reported.
      const failed = (
        await Promise.allSettled(
          topics.map(async (topic) => {
            const offsets = await admin.fetchTopicOffsets(topic);
            watermarks.set(topic, new Map(offsets.map((p) => [p.partition, { high: p.high, low: p.low }])));
          }),
        )
      ).find((result) => result.status === 'rejected');
      const samples: LagSample[] = [];
      for (const [group, groupTopics] of this.groups) {
        const committed = await admin.fetchOffsets({ groupId: group, topics: [...groupTopics] });
        for (const { topic, partitions } of committed) {
          for (const { partition, offset } of partitions) {
            const watermark = watermarks.get(topic)?.get(partition);
            if (watermark) samples.push({ group, topic, partition, lag: lagOf(offset, watermark.high, watermark.low) });
          }
        }
      }
      this.last = { at: this.now(), samples };
      if (failed) this.options.onError?.(failed.reason);
    } catch (error) {
      this.options.onError?.(error);
    }
  }
}

/** `outreach_consumer_lag_messages` from `lag`, and the failures of its samples. */
export function registerConsumerLagMetrics(registry: Registry, options: ConsumerLagOptions): ConsumerLag {
  const failures = counter(registry, 'outreach_consumer_lag_sample_failures_total');
  const lag = new ConsumerLag({
    ...options,
    onError: (error) => {
      failures.inc();
      options.onError?.(error);
    },
  });
  gauge(registry, 'outreach_consumer_lag_messages', async (g) => {
    const samples = await lag.read();
    g.reset();
    for (const { group, topic, partition, lag: value } of samples) {
      g.set({ group, topic, partition: String(partition) }, value);
    }
  });
  return lag;
}
