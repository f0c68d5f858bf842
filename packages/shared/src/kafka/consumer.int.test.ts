/**
 * The consumer runner against the real broker: poison input goes to the DLQ and the partition keeps
 * flowing; transient failures are retried without skipping, up to the cap; a failing event is
 * narrowed down; DLQ writes fit the DLQ topic's max.message.bytes.
 */
import { randomBytes, randomUUID } from 'node:crypto';
import avro from 'avsc';
import type { Admin, Kafka, Producer } from 'kafkajs';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { eventCodec } from '@outreach/contracts';
import { schemaDefinitions, type StepCompleted } from '@outreach/contracts';
import { createLogger } from '../logger.js';
import { createMetricsRegistry } from '../metrics.js';
import { stepCompleted } from '../../test/fixtures/events.js';
import { uniqueName } from '@outreach/testkit';
import { waitFor } from '../wait.js';
import { createKafka } from './client.js';
import {
  ConsumerRunner,
  TRANSIENT_EXHAUSTED,
  TransientError,
  type ConsumedEvent,
  type ConsumerRunnerOptions,
  type EventBatchHandler,
} from './consumer.js';
import { readTopic } from '@outreach/testkit';
import { createTopicsSettled, dlqTopicOf } from './topics.js';

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
  await createTopicsSettled(admin, [
    { topic, numPartitions: partitions },
    { topic: dlqTopicOf(topic), numPartitions: partitions },
  ]);
  return topic;
}

/** A one-partition topic (and its DLQ) holding `count` StepCompleted events of one candidate, steps 0 on. */
async function topicWithEvents(prefix: string, count: number, candidateKey: string) {
  const topic = await topicWithDlq(prefix, 1);
  const events = Array.from({ length: count }, (_, i) => stepCompleted(i, candidateKey));
  await producer.send({
    topic,
    acks: -1,
    messages: events.map((e) => ({ key: e.candidateKey, value: eventCodec.encode(e) })),
  });
  return { topic, events };
}

/** The group's committed offset of the topic's partition 0. */
async function committedOffset(groupId: string, topic: string): Promise<string | undefined> {
  const [offsets] = await admin.fetchOffsets({ groupId, topics: [topic] });
  return offsets?.partitions.find((p) => p.partition === 0)?.offset;
}

/** Waits (30 s at most) until the runner has handled or dead-lettered `count` events. */
const settled = (runner: ConsumerRunner, count: number, description: string) =>
  waitFor(() => runner.stats.handled + runner.stats.deadLettered >= count, { timeoutMs: 30_000, description });

function start(
  topic: string,
  handler: EventBatchHandler,
  chunkSize = 200,
  retry: ConsumerRunnerOptions['retry'] = {},
): ConsumerRunner {
  const runner = new ConsumerRunner({
    kafka,
    groupId: uniqueName('group'),
    topics: [topic],
    handler,
    logger,
    metrics: createMetricsRegistry('test', false),
    chunkSize,
    retry: { initialMs: 20, maxMs: 200, ...retry },
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
    // INVALID_LENGTH: a random body often starts with a negative or huge length (ADR 005).
    // UNKNOWN_SCHEMA_ID: a random string that starts with byte 0 reads as Confluent framing (ADR 011).
    expect(codes).toEqual(
      new Set([
        'NOT_SINGLE_OBJECT',
        'UNKNOWN_FINGERPRINT',
        'UNKNOWN_SCHEMA_ID',
        'TRUNCATED',
        'INVALID_LENGTH',
        'INVALID_BODY',
      ]),
    );
  });

  it('retries a transient failure without skipping or committing, then handles every event once more', async () => {
    const { topic, events } = await topicWithEvents('transient', 50, 'same-key');

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

  it('keeps its membership through a handler that waits twice the session timeout: one join, each event handled once', async () => {
    const { topic, events } = await topicWithEvents('slow_handler', 3, 'slow');
    const handled: string[] = [];
    const groupId = uniqueName('group');
    const runner = new ConsumerRunner({
      kafka,
      groupId,
      topics: [topic],
      logger,
      metrics: createMetricsRegistry('test', false),
      // The broker's smallest allowed session (group.min.session.timeout.ms).
      sessionTimeoutMs: 6_000,
      handler: async (batch) => {
        // A handler waiting on a slow peer (every send of a chunk in a provider call): the behaviour
        // under test, not a synchronization.
        if (handled.length === 0) await new Promise((resolve) => setTimeout(resolve, 12_000));
        handled.push(...batch.map((b) => b.event.eventId));
      },
    });
    runners.push(runner);
    await runner.start();
    await waitFor(() => handled.length >= 3, { timeoutMs: 40_000, description: 'the 3 events handled' });
    // Without heartbeats during the wait the group drops the member after 6 s; it then rejoins and
    // the uncommitted chunk is handled a second time.
    await waitFor(async () => (await committedOffset(groupId, topic)) === '3', {
      timeoutMs: 30_000,
      description: 'the chunk committed',
    });
    expect(handled).toEqual(events.map((e) => e.eventId));
    expect(runner.stats.joins).toBe(1);
  }, 60_000);

  it('narrows a failing batch to the poison event, dead-letters it with the reason (addresses masked), and keeps order for the rest', async () => {
    const { topic, events } = await topicWithEvents('poison', 30, 'k');
    const poison = events[17] as StepCompleted;

    const handled: string[] = [];
    const runner = start(topic, async (batch) => {
      // The message brings an address along (as a library's error might): the DLQ header masks it.
      if (batch.some((b) => b.event.eventId === poison.eventId))
        throw new Error('cannot handle step 17 for ada@exa\u200bmple.com');
      handled.push(...batch.map((b) => (b.event as StepCompleted).stepId));
    });
    await runner.start();
    await settled(runner, 30, '30 events');

    expect(handled).toEqual(events.filter((e) => e !== poison).map((e) => e.stepId));
    const [dead] = await readTopic(kafka, dlqTopicOf(topic), (m) => m.length >= 1);
    expect(dead?.headers['dlq-error-code']).toBe('REJECTED');
    expect(dead?.headers['dlq-reason']).toMatch(/cannot handle step 17 for \[address\]$/);
    expect(eventCodec.decode(dead?.value as Buffer)).toEqual(poison);
    expect(runner.stats.crashes).toBe(0);
  });

  it('dead-letters events the handler rejects as invalid, and commits past them', async () => {
    const { topic } = await topicWithEvents('rejected', 10, 'k');
    const runner = start(topic, async (batch) => ({
      rejected: batch
        .filter((b) => Number((b.event as StepCompleted).stepId) % 3 === 0)
        .map((b) => ({ offset: b.offset, reason: 'step divisible by three' })),
    }));
    await runner.start();
    await settled(runner, 10, '10 events');
    expect(runner.stats.deadLettered).toBe(4);
    const dead = await readTopic(kafka, dlqTopicOf(topic), (m) => m.length >= 4);
    expect(dead.map((d) => d.headers['dlq-reason'])).toEqual(Array(4).fill('step divisible by three'));
  });

  it('hands only the event types it takes to the handler, skips the others unread, and still dead-letters bytes it cannot read', async () => {
    const topic = await topicWithDlq('types', 1);
    const wanted = Array.from({ length: 6 }, (_, i) => stepCompleted(i, 'k'));
    const other = (i: number) =>
      eventCodec.encode({
        type: 'ConversationClosed',
        eventId: randomUUID(),
        occurredAt: Date.now(),
        producer: 'test',
        correlationId: `c-${i}`,
        causationId: null,
        conversationId: 'conv-k',
        campaignId: 'camp',
        candidateKey: 'k',
        reason: 'test',
      } as unknown as Parameters<typeof eventCodec.encode>[0]);
    // Interleaved: wanted, other, wanted, other, ..., then bytes with no known framing at the end.
    const values = wanted.flatMap((e, i) => [eventCodec.encode(e), other(i)]);
    values.push(Buffer.from('not an event'));
    await producer.send({ topic, acks: -1, messages: values.map((value) => ({ key: 'k', value })) });
    const seen: string[] = [];
    const groupId = uniqueName('group');
    const runner = new ConsumerRunner({
      kafka,
      groupId,
      topics: [topic],
      handler: async (batch) => {
        seen.push(...batch.map((b) => `${b.event.type}:${b.offset}`));
      },
      logger,
      metrics: createMetricsRegistry('test', false),
      eventTypes: new Set(['StepCompleted']),
      retry: { initialMs: 20, maxMs: 200 },
    });
    runners.push(runner);
    await runner.start();
    await settled(runner, values.length, 'every message handled, skipped or dead-lettered');
    expect(seen).toEqual(wanted.map((_, i) => `StepCompleted:${2 * i}`));
    expect(runner.stats).toMatchObject({ handled: 12, deadLettered: 1 });
    const dead = await readTopic(kafka, dlqTopicOf(topic), (m) => m.length >= 1);
    expect(dead.map((d) => d.headers['dlq-error-code'])).toEqual(['NOT_SINGLE_OBJECT']);
    await waitFor(async () => (await committedOffset(groupId, topic)) === String(values.length), {
      timeoutMs: 15_000,
      description: 'the offset committed past every message',
    });
  });

  it('caps transient retries: an event that always fails transiently goes to the DLQ as TRANSIENT_EXHAUSTED and the partition moves on', async () => {
    const { topic, events } = await topicWithEvents('exhausted', 10, 'k');
    const stuck = events[3] as StepCompleted;

    const handled: string[] = [];
    let attempts = 0;
    const runner = start(
      topic,
      async (batch) => {
        // A peer that answers 503 for this one event's experiment, forever.
        if (batch.some((b) => b.event.eventId === stuck.eventId)) {
          attempts++;
          throw new TransientError('experiment service answered 503');
        }
        handled.push(...batch.map((b) => (b.event as StepCompleted).stepId));
      },
      200,
      { maxAttempts: 4 },
    );
    await runner.start();
    await settled(runner, 10, '10 events handled or dead-lettered');
    // The chunk: 4 attempts; then each event alone once, so the other nine pass, in order.
    expect(attempts).toBe(5);
    expect(handled).toEqual(events.filter((e) => e !== stuck).map((e) => e.stepId));
    expect(runner.stats.exhausted).toBe(1);
    const [dead] = await readTopic(kafka, dlqTopicOf(topic), (m) => m.length >= 1);
    expect(dead?.headers['dlq-error-code']).toBe(TRANSIENT_EXHAUSTED);
    expect(dead?.headers['dlq-reason']).toMatch(
      /after 4 attempts over \d+ ms with its chunk, then 1 alone: experiment service answered 503/,
    );
    expect(eventCodec.decode(dead?.value as Buffer)).toEqual(stuck);

    // The partition moved on: later events are handled.
    const later = Array.from({ length: 3 }, (_, i) => stepCompleted(100 + i, 'k'));
    await producer.send({
      topic,
      acks: -1,
      messages: later.map((e) => ({ key: e.candidateKey, value: eventCodec.encode(e) })),
    });
    await waitFor(() => handled.length >= 12, { timeoutMs: 30_000, description: 'the later events handled' });
    expect(handled.slice(9)).toEqual(later.map((e) => e.stepId));
    expect(runner.stats.crashes).toBe(0);
  });

  it('caps transient retries by time too', async () => {
    const topic = await topicWithDlq('exhausted_time', 1);
    const event = stepCompleted(0, 'k');
    await producer.send({ topic, acks: -1, messages: [{ key: 'k', value: eventCodec.encode(event) }] });
    const begun = Date.now();
    const runner = start(
      topic,
      async () => {
        throw Object.assign(new Error('canceling statement due to statement timeout'), { code: '57014' });
      },
      200,
      { maxAttempts: 1_000, maxElapsedMs: 1_500 },
    );
    await runner.start();
    const [dead] = await readTopic(kafka, dlqTopicOf(topic), (m) => m.length >= 1, 30_000);
    expect(dead?.headers['dlq-error-code']).toBe(TRANSIENT_EXHAUSTED);
    expect(dead?.headers['dlq-reason']).toMatch(/statement timeout/);
    expect(runner.stats.retries).toBeGreaterThan(2);
    expect(runner.stats.retries).toBeLessThan(1_000);
    expect(Date.now() - begun).toBeLessThan(20_000);
  });

  it('dead-letters thirty 100 KB messages under a 1 MiB DLQ limit, and one too large for the DLQ without its value', async () => {
    const topic = uniqueName('dlq_bytes');
    await createTopicsSettled(admin, [
      { topic, numPartitions: 1 },
      {
        topic: dlqTopicOf(topic),
        numPartitions: 1,
        configEntries: [{ name: 'max.message.bytes', value: '1048576' }],
      },
    ]);
    // Not events at all (no single-object header): each is dead-lettered with its headers added.
    const junk = Array.from({ length: 30 }, (_, i) => ({ key: `k${i}`, value: randomBytes(100_000) }));
    // Fits the source topic (1 MiB + 12) but not its DLQ copy, whose headers add a few hundred bytes.
    const huge = { key: 'huge', value: Buffer.alloc(1_048_400, 7) };
    for (const message of [...junk.slice(0, 15), huge, ...junk.slice(15)]) {
      await producer.send({ topic, acks: -1, messages: [message] });
    }
    const registry = createMetricsRegistry('test', false);
    const runner = new ConsumerRunner({
      kafka,
      groupId: uniqueName('group'),
      topics: [topic],
      handler: async () => undefined,
      logger,
      metrics: registry,
      retry: { initialMs: 20, maxMs: 200 },
    });
    runners.push(runner);
    await runner.start();
    await waitFor(() => runner.stats.deadLettered >= 31, {
      timeoutMs: 60_000,
      description: '31 messages dead-lettered',
    });

    const dlq = await readTopic(kafka, dlqTopicOf(topic), (m) => m.length >= 31, 60_000);
    expect(dlq).toHaveLength(31);
    expect(dlq.filter((m) => m.value !== null).map((m) => m.key)).toEqual(junk.map((j) => j.key));
    const slim = dlq.find((m) => m.key === 'huge');
    expect(slim?.value).toBeNull();
    expect(slim?.headers['dlq-value-omitted']).toMatch(/exceed .* max\.message\.bytes 1048576/);
    expect(slim?.headers['dlq-source-offset']).toBe('15');
    expect(await registry.getSingleMetricAsString('outreach_consumer_dlq_value_omitted_total')).toMatch(/ 1$/m);
    expect(runner.stats.crashes).toBe(0);
  });
});
