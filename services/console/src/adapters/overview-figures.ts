import { total, type Sample } from './prometheus-text.js';
import type { ServiceName } from './services.js';
import type { RatePoint } from '../domain/outcome-series.js';

/** A service's backlog from its /metrics: consumer lag by group and topic, and its outbox. */
export interface Backlog {
  readonly service: ServiceName;
  /** Sum of `outreach_consumer_lag_messages`; undefined when the service exports none. */
  readonly lag: number | undefined;
  readonly lagByTopic: ReadonlyArray<{ group: string; topic: string; lag: number }>;
  readonly outboxAgeSeconds: number | undefined;
  readonly parkedRows: number | undefined;
}

export function backlogOf(service: ServiceName, samples: readonly Sample[]): Backlog {
  const byTopic = new Map<string, { group: string; topic: string; lag: number }>();
  for (const s of samples) {
    if (s.name !== 'outreach_consumer_lag_messages') continue;
    const group = s.labels.group ?? '';
    const topic = s.labels.topic ?? '';
    const key = `${group}\u0000${topic}`;
    const row = byTopic.get(key) ?? { group, topic, lag: 0 };
    row.lag += s.value;
    byTopic.set(key, row);
  }
  return {
    service,
    lag: total(samples, 'outreach_consumer_lag_messages'),
    lagByTopic: [...byTopic.values()].sort((a, b) => b.lag - a.lag || a.topic.localeCompare(b.topic)),
    outboxAgeSeconds: total(samples, 'outreach_outbox_oldest_unpublished_age_seconds'),
    parkedRows: total(samples, 'outreach_outbox_parked_rows'),
  };
}

/** What the sampler's points say: sends per second now (the last interval) and over the window. */
export function sendRates(points: readonly RatePoint[]): { now: number | undefined; mean: number | undefined } {
  const last = points.at(-1);
  const seconds = points.reduce((n, p) => n + p.seconds, 0);
  const sent = points.reduce((n, p) => n + (p.perSecond.sent ?? 0) * p.seconds, 0);
  return { now: last ? (last.perSecond.sent ?? 0) : undefined, mean: seconds > 0 ? sent / seconds : undefined };
}
