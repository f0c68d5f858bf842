/**
 * Issue #14 through the real consumer runner and broker: Avro bombs (messages of ~100 bytes that
 * claim 2^30 array items or string bytes) and an over-size message, among valid events. Each bomb
 * must reach the DLQ with its code and reason, every valid event must be handled, the consumer must
 * never crash or restart, and the heap must not grow with what the bombs claim. The same bombs
 * against the planner as a process, with its RSS: services/planner/test/decode-bombs.int.test.ts.
 */
import type { Admin, Kafka, Producer } from 'kafkajs';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { createKafka } from '../kafka/client.js';
import { ConsumerRunner, type ConsumedEvent } from '../kafka/consumer.js';
import { readTopic } from '@outreach/testkit';
import { createTopicsSettled, dlqTopicOf } from '../kafka/topics.js';
import { createLogger } from '../logger.js';
import { createMetricsRegistry } from '../metrics.js';
import { eventBombs, headerOf } from '@outreach/testkit';
import { stepCompleted } from '../../test/fixtures/events.js';
import { uniqueName } from '@outreach/testkit';
import { waitFor } from '../wait.js';
import { eventCodec } from '@outreach/contracts';

const MiB = 1024 * 1024;
let kafka: Kafka;
let admin: Admin;
let producer: Producer;
let runner: ConsumerRunner | undefined;
const logger = createLogger({ name: 'decode-bombs-test', level: 'silent' });

beforeAll(async () => {
  kafka = createKafka({ brokers: inject('kafkaBrokers').split(','), clientId: 'decode-bombs-test' });
  admin = kafka.admin();
  await admin.connect();
  producer = kafka.producer({ idempotent: true });
  await producer.connect();
});
afterAll(async () => {
  await runner?.stop();
  await producer.disconnect();
  await admin.disconnect();
});

describe('Avro bombs through the consumer runner', () => {
  it('dead-letters every bomb with its code and reason, handles every valid event, and keeps the heap and the consumer steady', async () => {
    const topic = uniqueName('bombs');
    // Room for one message over the decoder's 1 MiB, so the TOO_LARGE path is exercised end to end.
    const configEntries = [{ name: 'max.message.bytes', value: String(3 * MiB) }];
    await createTopicsSettled(admin, [
      { topic, numPartitions: 2, configEntries },
      { topic: dlqTopicOf(topic), numPartitions: 2, configEntries },
    ]);

    const rounds = 10;
    const bombs = eventBombs();
    const expected = new Map<string, string>();
    const valid: ConsumedEvent['event'][] = [];
    const messages: Array<{ key: string; value: Buffer }> = [];
    for (let round = 0; round < rounds; round++) {
      for (const [i, bomb] of bombs.entries()) {
        const key = `bomb-${round}-${i}`;
        expected.set(key, bomb.code);
        messages.push({ key, value: bomb.bytes });
        const event = stepCompleted(round * 100 + i);
        valid.push(event);
        messages.push({ key: event.candidateKey, value: eventCodec.encode(event) });
      }
    }
    // 1.5 MiB: a valid header and a body that is only padding; refused on its size alone.
    expected.set('too-large', 'TOO_LARGE');
    messages.push({
      key: 'too-large',
      value: Buffer.concat([headerOf('StepCompleted'), Buffer.alloc(1.5 * MiB, 0x02)]),
    });
    await producer.send({ topic, acks: -1, messages });

    let peakHeap = 0;
    const sampler = setInterval(() => {
      peakHeap = Math.max(peakHeap, process.memoryUsage().heapUsed);
    }, 10);
    const baselineHeap = process.memoryUsage().heapUsed;
    const handled: ConsumedEvent[] = [];
    runner = new ConsumerRunner({
      kafka,
      groupId: uniqueName('bombs_group'),
      topics: [topic],
      handler: async (events) => {
        handled.push(...events);
      },
      logger,
      metrics: createMetricsRegistry('test', false),
      chunkSize: 50,
      retry: { initialMs: 20, maxMs: 200 },
    });
    try {
      await runner.start();
      await waitFor(() => (runner?.stats.handled ?? 0) + (runner?.stats.deadLettered ?? 0) >= messages.length, {
        timeoutMs: 60_000,
        description: `all ${messages.length} messages handled or dead-lettered`,
      });
    } finally {
      clearInterval(sampler);
    }

    expect(new Set(handled.map((h) => h.event.eventId))).toEqual(new Set(valid.map((e) => e.eventId)));
    expect(runner.stats.deadLettered).toBe(expected.size);
    expect(runner.stats.crashes).toBe(0);
    expect(runner.joined).toBe(true);
    // Unguarded, the first bomb alone needs more than 2 GB. The bound leaves room for kafkajs
    // buffering the 1.5 MiB message and everything else this worker does.
    expect(peakHeap - baselineHeap).toBeLessThan(128 * MiB);

    const dead = await readTopic(kafka, dlqTopicOf(topic), (m) => m.length >= expected.size, 60_000);
    expect(dead).toHaveLength(expected.size);
    for (const message of dead) {
      const key = message.key ?? '';
      expect(message.headers['dlq-error-code'], key).toBe(expected.get(key));
      expect(message.headers['dlq-source-topic']).toBe(topic);
      expect(message.headers['dlq-reason'], key).toMatch(
        key === 'too-large' ? /larger than the decoder's maximum of 1048576/ : /^\w+ body: \S+: .+ \(at byte \d+\)$/,
      );
    }
  });
});
