/**
 * Attacks on promises 3 and 4: a consumer that can no longer make progress on a partition, for a
 * reason other than a kafkajs crash. The promise checked is the one a user (the orchestrator) sees:
 * either the partition keeps flowing, or /health/live stops answering 200.
 */
import type { FastifyInstance } from 'fastify';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { randomUUID } from 'node:crypto';
import {
  buildHttpApp,
  createKafka,
  createLogger,
  createTopicsSettled,
  dlqTopicOf,
  registerConsumer,
  waitFor,
} from '@outreach/shared';
import { eventCodec, type StepCompleted } from '@outreach/contracts';
import { uniqueName } from '@outreach/testkit';

const brokers = inject('kafkaBrokers');
/** A valid StepCompleted (the shape of the shared fixture, which the public surface does not export). */
const stepCompleted = (seq: number, key: string): StepCompleted => ({
  type: 'StepCompleted',
  eventId: randomUUID(),
  occurredAt: Date.now(),
  producer: 'attack',
  correlationId: `corr-${seq}`,
  causationId: null,
  conversationId: `conv-${key}`,
  campaignId: 'camp',
  candidateKey: key,
  stepId: String(seq),
});
const logger = createLogger({ name: 'attack-health', level: 'silent' });
const kafka = createKafka({ brokers: brokers.split(','), clientId: 'attack-health' });
const admin = kafka.admin();
const producer = kafka.producer({ idempotent: true });
const cleanups: Array<() => Promise<unknown>> = [];

beforeAll(async () => {
  await admin.connect();
  await producer.connect();
});
afterAll(async () => {
  // A consumer stuck in its handler never finishes closing: bound each cleanup.
  for (const cleanup of cleanups.reverse())
    await Promise.race([cleanup().catch(() => undefined), new Promise((r) => setTimeout(r, 5_000))]);
  await producer.disconnect();
  await admin.disconnect();
});

async function app(): Promise<FastifyInstance> {
  const built = await buildHttpApp({
    name: 'attack-health',
    logger,
    kafka: { brokers: brokers.split(','), clientId: 'attack-health' },
  });
  cleanups.push(() => built.close());
  return built;
}

const live = async (target: FastifyInstance) =>
  (await target.inject({ method: 'GET', url: '/health/live' })).statusCode;

/** Either the later events get handled, or liveness fails: one of them within `ms`. */
async function flowsOrDies(target: FastifyInstance, handled: () => boolean, ms: number) {
  let outcome: string | undefined;
  await waitFor(
    async () => {
      if (handled()) outcome = 'flowing';
      else if ((await live(target)) !== 200) outcome = 'live 503';
      return outcome;
    },
    { timeoutMs: ms, description: 'the partition to flow again or /health/live to fail' },
  ).catch(() => undefined);
  return outcome ?? 'stuck, and /health/live says 200';
}

describe('/health/live while a partition cannot move', { timeout: 90_000 }, () => {
  it('the DLQ topic is missing (deleted): a poison message, then good events', async () => {
    const topic = uniqueName('attack_nodlq');
    await createTopicsSettled(admin, [{ topic, numPartitions: 1 }]);
    const target = await app();
    const seen: string[] = [];
    registerConsumer(target, {
      groupId: uniqueName('attack_group'),
      topics: [topic],
      sessionTimeoutMs: 6_000,
      chunkSize: 1,
      retry: { initialMs: 20, maxMs: 200, maxAttempts: 3, maxElapsedMs: 2_000 },
      stallAfterMs: 5_000,
      handler: async (events) => {
        seen.push(...events.map((e) => e.event.eventId));
      },
    });
    await target.ready();
    const good = Array.from({ length: 3 }, (_, i) => stepCompleted(i, 'k'));
    await producer.send({
      topic,
      acks: -1,
      messages: [
        { key: 'k', value: Buffer.from('not avro at all') },
        ...good.map((e) => ({ key: 'k', value: eventCodec.encode(e) })),
      ],
    });
    const outcome = await flowsOrDies(target, () => good.every((g) => seen.includes(g.eventId)), 45_000);
    expect(outcome).not.toBe('stuck, and /health/live says 200');
  });

  it('a handler that never settles on one event (a hung query without a timeout)', async () => {
    const topic = uniqueName('attack_hang');
    await createTopicsSettled(
      admin,
      [topic, dlqTopicOf(topic)].map((name) => ({ topic: name, numPartitions: 1 })),
    );
    const target = await app();
    const seen: string[] = [];
    const events = Array.from({ length: 3 }, (_, i) => stepCompleted(i, 'k'));
    const hang = events[0]?.eventId;
    registerConsumer(target, {
      groupId: uniqueName('attack_group'),
      topics: [topic],
      sessionTimeoutMs: 6_000,
      chunkSize: 1,
      stallAfterMs: 5_000,
      handler: async (batch) => {
        if (batch.some((b) => b.event.eventId === hang)) await new Promise(() => undefined);
        seen.push(...batch.map((b) => b.event.eventId));
      },
    });
    await target.ready();
    await producer.send({
      topic,
      acks: -1,
      messages: events.map((e) => ({ key: 'k', value: eventCodec.encode(e) })),
    });
    const outcome = await flowsOrDies(target, () => seen.length >= 2, 45_000);
    expect(outcome).not.toBe('stuck, and /health/live says 200');
  });
});
