/**
 * Consumer lag against the real broker, through a service's /metrics: records produced to each
 * partition, a group that committed fewer, and the gauge equal to the difference per partition.
 */
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import type { Admin, Kafka } from 'kafkajs';
import { createKafka } from '../kafka/client.js';
import { createTopicsSettled } from '../kafka/topics.js';
import { createLogger } from '../logger.js';
import { trackConsumerLag } from '../service/consumer-lag.js';
import { buildHttpApp } from '../service/http.js';
import { uniqueName } from '@outreach/testkit';
import { waitFor } from '../wait.js';

const brokers = inject('kafkaBrokers').split(',');
const logger = createLogger({ name: 'consumer-lag-test', level: 'silent' });
let kafka: Kafka;
let admin: Admin;

beforeAll(async () => {
  kafka = createKafka({ brokers, clientId: 'consumer-lag-test' });
  admin = kafka.admin();
  await admin.connect();
});
afterAll(async () => {
  await admin.disconnect();
});

async function produce(topic: string, perPartition: readonly number[]): Promise<void> {
  // Idempotent: a produce retried after one partition failed must not write the others twice.
  const producer = kafka.producer({ idempotent: true, maxInFlightRequests: 1 });
  await producer.connect();
  try {
    await producer.send({
      topic,
      messages: perPartition.flatMap((n, partition) =>
        Array.from({ length: n }, (_, i) => ({ partition, key: `k${i}`, value: `v${i}` })),
      ),
    });
  } finally {
    await producer.disconnect();
  }
}

/** The lag series of one group and topic from a /metrics text, by partition. */
function lags(text: string, group: string, topic: string): Record<string, number> {
  const found: Record<string, number> = {};
  for (const match of text.matchAll(/^outreach_consumer_lag_messages\{([^}]*)\} (\S+)$/gm)) {
    const labels = Object.fromEntries([...(match[1] ?? '').matchAll(/(\w+)="([^"]*)"/g)].map((m) => [m[1], m[2]]));
    if (labels.group === group && labels.topic === topic && labels.service === 'lag-service') {
      found[labels.partition as string] = Number(match[2]);
    }
  }
  return found;
}

describe('consumer lag', () => {
  it('is the high watermark minus the committed offset per partition, and follows new records', async () => {
    const topic = uniqueName('lag_topic');
    const group = uniqueName('lag_group');
    const idle = uniqueName('lag_idle');
    await createTopicsSettled(admin, [{ topic, numPartitions: 3 }]);
    await produce(topic, [10, 5, 3]);
    // The group read 4 of partition 0 and all of partition 1; it never committed on partition 2.
    await admin.setOffsets({
      groupId: group,
      topic,
      partitions: [
        { partition: 0, offset: '4' },
        { partition: 1, offset: '5' },
      ],
    });

    const app = await buildHttpApp({ name: 'lag-service', logger, kafka: { brokers, clientId: 'lag-service' } });
    trackConsumerLag(app, group, [topic]);
    trackConsumerLag(app, idle, [topic]);
    try {
      await app.ready();
      const text = (await app.inject({ url: '/metrics' })).body;
      expect(lags(text, group, topic)).toEqual({ '0': 6, '1': 0, '2': 3 });
      // A group that never committed anything is behind by everything retained.
      expect(lags(text, idle, topic)).toEqual({ '0': 10, '1': 5, '2': 3 });

      await produce(topic, [4, 0, 0]);
      await waitFor(async () => lags((await app.inject({ url: '/metrics' })).body, group, topic)['0'] === 10, {
        timeoutMs: 30_000,
        description: 'the next sample to count the four new records of partition 0',
      });
      const after = (await app.inject({ url: '/metrics' })).body;
      expect(lags(after, group, topic)).toEqual({ '0': 10, '1': 0, '2': 3 });
      expect(after).toMatch(/^outreach_consumer_lag_sample_failures_total\{service="lag-service"\} 0$/m);
    } finally {
      await app.close();
    }
  });
});
