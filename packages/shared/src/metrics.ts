import { Counter, type Gauge, type Histogram, Registry, collectDefaultMetrics } from 'prom-client';

export { Counter, Gauge, Histogram, Registry } from 'prom-client';

/** One registry per service process (and per test app), with Node's default metrics. */
export function createMetricsRegistry(service: string, withDefaults = true): Registry {
  const registry = new Registry();
  registry.setDefaultLabels({ service });
  if (withDefaults) collectDefaultMetrics({ register: registry });
  return registry;
}

/** Gets a metric registered under `name`, or registers it: helpers can be built twice per registry. */
export function metric<T extends Counter | Gauge | Histogram>(registry: Registry, name: string, create: () => T): T {
  return (registry.getSingleMetric(name) as T | undefined) ?? create();
}

export function consumerMetrics(registry: Registry) {
  return {
    messages: metric(
      registry,
      'consumer_messages_total',
      () =>
        new Counter({
          name: 'consumer_messages_total',
          help: 'Messages consumed, by topic and result (handled, dead_lettered)',
          labelNames: ['group', 'topic', 'result'] as const,
          registers: [registry],
        }),
    ),
    retries: metric(
      registry,
      'consumer_handler_retries_total',
      () =>
        new Counter({
          name: 'consumer_handler_retries_total',
          help: 'Handler attempts retried after a transient error',
          labelNames: ['group', 'topic'] as const,
          registers: [registry],
        }),
    ),
    exhausted: metric(
      registry,
      'consumer_transient_exhausted_total',
      () =>
        new Counter({
          name: 'consumer_transient_exhausted_total',
          help: 'Events dead-lettered as TRANSIENT_EXHAUSTED: a transient failure outlasted the retry cap',
          labelNames: ['group', 'topic'] as const,
          registers: [registry],
        }),
    ),
    dlqValueOmitted: metric(
      registry,
      'consumer_dlq_value_omitted_total',
      () =>
        new Counter({
          name: 'consumer_dlq_value_omitted_total',
          help: 'Dead-lettered messages too large for the DLQ topic, written without their value',
          labelNames: ['group', 'topic'] as const,
          registers: [registry],
        }),
    ),
    crashes: metric(
      registry,
      'consumer_crashes_total',
      () =>
        new Counter({
          name: 'consumer_crashes_total',
          help: 'kafkajs consumer crashes (each is followed by a restart when retriable)',
          labelNames: ['group'] as const,
          registers: [registry],
        }),
    ),
  };
}
