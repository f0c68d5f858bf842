import { Counter, Gauge, Histogram, Registry, collectDefaultMetrics, type Metric } from 'prom-client';
import { buildInfo, type BuildInfo } from './metrics/build-info.js';
import { withTimeout } from './wait.js';
import {
  METRICS,
  isDeclaredMetric,
  isDefaultMetric,
  type LabelOf,
  type MetricName,
  type MetricNameOf,
} from './metrics/catalog.js';

export { Counter, Gauge, Histogram, Registry } from 'prom-client';
export { METRICS, type MetricName, type MetricSpec } from './metrics/catalog.js';

/** A gauge read at scrape time (a query) gives up after this long, so a slow database never stalls a scrape. */
export const COLLECT_TIMEOUT_MS = 3_000;

/**
 * A registry that holds only declared metrics (metrics/catalog.ts) and prom-client's Node.js and
 * process defaults: a metric created anywhere else fails where it is created, in the first test
 * that builds the app, rather than going undocumented and unalerted.
 */
class DeclaredMetricsRegistry extends Registry {
  override registerMetric<T extends string>(metric: Metric<T>): void {
    const { name } = metric as unknown as { name: string };
    if (!isDeclaredMetric(name) && !isDefaultMetric(name)) {
      throw new Error(
        `metric ${name} is not declared in packages/shared/src/metrics/catalog.ts (declare it there and in docs/operations.md section 10)`,
      );
    }
    super.registerMetric(metric);
  }
}

export interface MetricsRegistryOptions {
  /** Node.js' and the process' default metrics and `outreach_build_info` (default true; tests turn them off). */
  readonly defaults?: boolean;
  readonly build?: BuildInfo;
}

/**
 * One registry per service process (and per test app). Every series carries `service` as a default
 * label: rules group by it, since annotation-based scraping gives every pod the same `job`.
 */
export function createMetricsRegistry(service: string, options: boolean | MetricsRegistryOptions = true): Registry {
  const { defaults = true, build } = typeof options === 'boolean' ? { defaults: options } : options;
  const registry = new DeclaredMetricsRegistry();
  registry.setDefaultLabels({ service });
  if (defaults) {
    collectDefaultMetrics({ register: registry });
    gauge(registry, 'outreach_build_info').set(build ?? buildInfo(), 1);
  }
  return registry;
}

function existing<T>(registry: Registry, name: MetricName): T | undefined {
  return registry.getSingleMetric(name) as T | undefined;
}

function labelNames<N extends MetricName>(name: N): Array<LabelOf<N>> {
  return [...METRICS[name].labels] as Array<LabelOf<N>>;
}

/** The declared counter `name` of this registry (created on first use: helpers may be built twice). */
export function counter<N extends MetricNameOf<'counter'>>(registry: Registry, name: N): Counter<LabelOf<N>> {
  return (
    existing<Counter<LabelOf<N>>>(registry, name) ??
    new Counter({ name, help: METRICS[name].help, labelNames: labelNames(name), registers: [registry] })
  );
}

export function histogram<N extends MetricNameOf<'histogram'>>(registry: Registry, name: N): Histogram<LabelOf<N>> {
  const spec = METRICS[name];
  return (
    existing<Histogram<LabelOf<N>>>(registry, name) ??
    new Histogram({
      name,
      help: spec.help,
      labelNames: labelNames(name),
      buckets: [...spec.buckets],
      registers: [registry],
    })
  );
}

/**
 * The declared gauge `name`; with `collect`, its value is read at scrape time. A read that fails or
 * takes longer than COLLECT_TIMEOUT_MS leaves the previous value and counts in
 * `outreach_metric_collect_failures_total`: one unreachable database must not turn the whole
 * `/metrics` answer into an error.
 */
export function gauge<N extends MetricNameOf<'gauge'>>(
  registry: Registry,
  name: N,
  collect?: (gauge: Gauge<LabelOf<N>>) => void | Promise<void>,
): Gauge<LabelOf<N>> {
  const found = existing<Gauge<LabelOf<N>>>(registry, name);
  if (found) return found;
  const failures = collect ? counter(registry, 'outreach_metric_collect_failures_total') : undefined;
  return new Gauge({
    name,
    help: METRICS[name].help,
    labelNames: labelNames(name),
    registers: [registry],
    ...(collect
      ? {
          async collect(this: Gauge<LabelOf<N>>) {
            try {
              await withTimeout(
                Promise.resolve(collect(this)),
                COLLECT_TIMEOUT_MS,
                () => new Error(`timed out after ${COLLECT_TIMEOUT_MS} ms`),
              );
            } catch {
              failures?.inc({ metric: name });
            }
          },
        }
      : {}),
  });
}

/**
 * Shares one read between the gauges a scrape collects at once (they run concurrently), and
 * caches it for `ttlMs` (0: only while in flight).
 */
export function sharedRead<T>(read: () => Promise<T>, ttlMs = 0, now: () => number = Date.now): () => Promise<T> {
  let pending: { promise: Promise<T>; at: number } | undefined;
  return () => {
    if (pending && (pending.at === -1 || now() - pending.at < ttlMs)) return pending.promise;
    const entry: { promise: Promise<T>; at: number } = { promise: read(), at: -1 };
    pending = entry;
    entry.promise.then(
      () => {
        entry.at = now();
        if (ttlMs <= 0 && pending === entry) pending = undefined;
      },
      () => {
        if (pending === entry) pending = undefined;
      },
    );
    return entry.promise;
  };
}

export function consumerMetrics(registry: Registry) {
  return {
    messages: counter(registry, 'outreach_consumer_messages_total'),
    retries: counter(registry, 'outreach_consumer_handler_retries_total'),
    exhausted: counter(registry, 'outreach_consumer_transient_exhausted_total'),
    dlqValueOmitted: counter(registry, 'outreach_consumer_dlq_value_omitted_total'),
    crashes: counter(registry, 'outreach_consumer_crashes_total'),
  };
}
