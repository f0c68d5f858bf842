import pino from 'pino';
import { describe, expect, it } from 'vitest';
import { createMetricsRegistry } from '../metrics.js';
import { createKafka } from './client.js';
import { ConsumerRunner } from './consumer.js';

describe('a consumer runner’s metrics', () => {
  it('exist at 0 for each topic before the first message, so the first dead letter is an increase Prometheus sees', async () => {
    const registry = createMetricsRegistry('consumer-test', false);
    // Built, never started: nothing connects.
    new ConsumerRunner({
      kafka: createKafka({ brokers: ['127.0.0.1:1'], clientId: 'consumer-metrics-test' }),
      groupId: 'g',
      topics: ['a.v1', 'b.v1'],
      handler: async () => {},
      logger: pino({ level: 'silent' }),
      metrics: registry,
    });
    const text = await registry.metrics();
    for (const topic of ['a.v1', 'b.v1']) {
      for (const result of ['handled', 'dead_lettered']) {
        expect(text).toContain(
          `outreach_consumer_messages_total{group="g",topic="${topic}",result="${result}",service="consumer-test"} 0`,
        );
      }
      for (const name of ['outreach_consumer_transient_exhausted_total', 'outreach_consumer_dlq_value_omitted_total']) {
        expect(text).toContain(`${name}{group="g",topic="${topic}",service="consumer-test"} 0`);
      }
    }
    expect(text).toContain('outreach_consumer_crashes_total{group="g",service="consumer-test"} 0');
  });
});
