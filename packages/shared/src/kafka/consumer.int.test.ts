/**
 * The consumer runner against the real broker: poison input goes to the DLQ and the partition keeps
 * flowing; transient failures are retried without skipping; a failing event is narrowed down.
 */
import { randomBytes } from 'node:crypto';
import avro from 'avsc';
import type { Admin, Kafka, Producer } from 'kafkajs';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { eventCodec } from '../contracts/codec.js';
import { schemaDefinitions, type StepCompleted } from '../contracts/events.generated.js';
import { createLogger } from '../logger.js';
import { createMetricsRegistry } from '../metrics.js';
import { stepCompleted } from '../testing/fixtures/events.js';
import { uniqueName } from '../testing/names.js';
import { waitFor } from '../wait.js';
import { createKafka } from './client.js';
import { ConsumerRunner, TransientError, type ConsumedEvent, type EventBatchHandler } from './consumer.js';
import { readTopic } from './read-topic.js';
import { dlqTopicOf } from './topics.js';

let kafka: Kafka;
let admin: Admin;
let producer: Producer;
const runners: ConsumerRunner[] = [];
const logger = createLogger({ name: 'consumer-test', level: 'silent' });

beforeAll(async () => {
  kafka = createKafka({ brokers: inject('kafkaBrokers').split(','), clientId: 'consumer-test' });
  admin = kafka.admin();
  await admin.connect();
  producer = kafka.producer({ idempotent: true });
  await producer.connect();
});
afterAll(async () => {
  await Promise.all(runners.map((r) => r.stop()));
  await producer.disconnect();
  await admin.disconnect();
});

async function topicWithDlq(prefix: string, partitions = 3): Promise<string> {
  const topic = uniqueName(prefix);
  await admin.createTopics({
    waitForLeaders: true,
    topics: [
      { topic, numPartitions: partitions },
      { topic: dlqTopicOf(topic), numPartitions: partitions },
    ],
  });
  return topic;
}

function start(topic: string, handler: EventBatchHandler, chunkSize = 200): ConsumerRunner {
  const runner = new ConsumerRunner({
    kafka,
    groupId: uniqueName('group'),
    topics: [topic],
    handler,
    logger,
    metrics: createMetricsRegistry('test', false),
    chunkSize,
    retry: { initialMs: 20, maxMs: 200 },
  });
  runners.push(runner);
  return runner;
}

describe('ConsumerRunner', () => {
  it('dead-letters 10,000 random byte strings and 1,000 invalid Avro payloads while handling every valid event, without a restart', async () => {
    const topic = await topicWithDlq('flood');
    const valid = Array.from({ length: 2_000 }, (_, i) => stepCompleted(i));
    const header = eventCodec.encode(valid[0] as StepCompleted).subarray(0, 10);
    const stepSchema = avro.Type.forSchema(schemaDefinitions.StepCompleted.current as avro.Schema);
    const invalidAvro = (i: number): Buffer => {
      switch (i % 4) {
        case 0: // known fingerprint, body cut short
          return eventCodec.encode(stepCompleted(i)).subarray(0, 10 + (i % 20));
        case 1: // known fingerprint, trailing garbage
          return Buffer.concat([eventCodec.encode(stepCompleted(i)), randomBytes(3)]);
        case 2: // known fingerprint, random body
          return Buffer.concat([header, randomBytes(1 + (i % 40))]);
        default: // a well-formed Avro body behind a fingerprint nobody knows
          return Buffer.concat([
            Buffer.from([0xc3, 0x01]),
            randomBytes(8),
            stepSchema.toBuffer({ ...stepCompleted(i), type: undefined }),
          ]);
      }
    };
    const messages: Array<{ key: string; value: Buffer }> = [];
    let v = 0;
    for (let i = 0; i < 11_000; i++) {
      const value = i < 10_000 ? randomBytes(1 + (i % 64)) : invalidAvro(i);
      messages.push({ key: `k${i % 31}`, value });
      if (i % 5 === 0 && v < valid.length) {
        const event = valid[v++] as StepCompleted;
        messages.push({ key: event.candidateKey, value: eventCodec.encode(event) });
      }
    }
    for (let i = 0; i < messages.length; i += 2_000) {
      await producer.send({ topic, acks: -1, messages: messages.slice(i, i + 2_000) });
    }
    expect(v).toBe(valid.length);

    const handled: ConsumedEvent[] = [];
    const runner = start(topic, async (events) => {
      handled.push(...events);
    });
    await runner.start();
    await waitFor(() => runner.stats.handled + runner.stats.deadLettered >= messages.length, {
      timeoutMs: 90_000,
      description: `all ${messages.length} messages handled or dead-lettered`,
    });

    expect(new Set(handled.map((h) => h.event.eventId))).toEqual(new Set(valid.map((e) => e.eventId)));
    expect(runner.stats.deadLettered).toBe(11_000);
    expect(runner.stats.crashes).toBe(0);

    const dlq = await readTopic(kafka, dlqTopicOf(topic), (m) => m.length >= 11_000, 60_000);
    expect(dlq).toHaveLength(11_000);
    for (const message of dlq) {
      expect(message.headers['dlq-reason']).toBeTruthy();
      expect(message.headers['dlq-source-topic']).toBe(topic);
      expect(Number(message.headers['dlq-source-offset'])).toBeGreaterThanOrEqual(0);
      expect(message.headers['dlq-source-partition']).toBe(String(message.partition));
    }
    const codes = new Set(dlq.map((m) => m.headers['dlq-error-code']));
    expect(codes).toEqual(new Set(['NOT_SINGLE_OBJECT', 'UNKNOWN_FINGERPRINT', 'TRUNCATED', 'INVALID_BODY']));
  });

  it('retries a transient failure without skipping or committing, then handles every event once more', async () => {
    const topic = await topicWithDlq('transient', 1);
    const events = Array.from({ length: 50 }, (_, i) => stepCompleted(i, 'same-key'));
    await producer.send({
      topic,
      acks: -1,
      messages: events.map((e) => ({ key: e.candidateKey, value: eventCodec.encode(e) })),
    });

    let failuresLeft = 5;
    const committed: string[] = [];
    const runner = start(topic, async (batch) => {
      if (failuresLeft-- > 0) throw new TransientError('database unavailable');
      committed.push(...batch.map((b) => b.event.eventId));
    });
    await runner.start();
    await waitFor(() => committed.length >= 50, { timeoutMs: 30_000, description: 'all 50 events handled' });
    expect(committed).toEqual(events.map((e) => e.eventId));
    expect(runner.stats.retries).toBeGreaterThanOrEqual(5);
    expect(runner.stats.deadLettered).toBe(0);
  });

  it('narrows a failing batch to the poison event, dead-letters it with the reason, and keeps order for the rest', async () => {
    const topic = await topicWithDlq('poison', 1);
    const events = Array.from({ length: 30 }, (_, i) => stepCompleted(i, 'k'));
    await producer.send({
      topic,
      acks: -1,
      messages: events.map((e) => ({ key: e.candidateKey, value: eventCodec.encode(e) })),
    });
    const poison = events[17] as StepCompleted;

    const handled: string[] = [];
    const runner = start(topic, async (batch) => {
      if (batch.some((b) => b.event.eventId === poison.eventId)) throw new Error('cannot handle step 17');
      handled.push(...batch.map((b) => (b.event as StepCompleted).stepId));
    });
    await runner.start();
    await waitFor(() => runner.stats.handled + runner.stats.deadLettered >= 30, {
      timeoutMs: 30_000,
      description: '30 events',
    });

    expect(handled).toEqual(events.filter((e) => e !== poison).map((e) => e.stepId));
    const [dead] = await readTopic(kafka, dlqTopicOf(topic), (m) => m.length >= 1);
    expect(dead?.headers['dlq-error-code']).toBe('REJECTED');
    expect(dead?.headers['dlq-reason']).toMatch(/cannot handle step 17/);
    expect(eventCodec.decode(dead?.value as Buffer)).toEqual(poison);
    expect(runner.stats.crashes).toBe(0);
  });

  it('dead-letters events the handler rejects as invalid, and commits past them', async () => {
    const topic = await topicWithDlq('rejected', 1);
    const events = Array.from({ length: 10 }, (_, i) => stepCompleted(i, 'k'));
    await producer.send({
      topic,
      acks: -1,
      messages: events.map((e) => ({ key: e.candidateKey, value: eventCodec.encode(e) })),
    });
    const runner = start(topic, async (batch) => ({
      rejected: batch
        .filter((b) => Number((b.event as StepCompleted).stepId) % 3 === 0)
        .map((b) => ({ offset: b.offset, reason: 'step divisible by three' })),
    }));
    await runner.start();
    await waitFor(() => runner.stats.handled + runner.stats.deadLettered >= 10, {
      timeoutMs: 30_000,
      description: '10 events',
    });
    expect(runner.stats.deadLettered).toBe(4);
    const dead = await readTopic(kafka, dlqTopicOf(topic), (m) => m.length >= 4);
    expect(dead.map((d) => d.headers['dlq-reason'])).toEqual(Array(4).fill('step divisible by three'));
  });
});
