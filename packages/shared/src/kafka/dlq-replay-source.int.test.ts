/**
 * Attack round 4: a replay sends each dead letter to the topic its own `dlq-source-topic` header
 * names. Whoever may write a DLQ (every consumer of its source topic, the upstream `publisher` role
 * included for `outreach.rejected.v1.dlq`) can name another topic there, and an operator's routine
 * replay of that DLQ (the console's principal, or dlq:replay's, may write every source topic)
 * publishes the record into it: shown with a SendRequested in the rejected DLQ, which the sender
 * then mailed. Fixed: a replay writes only to the DLQ's own source topic (the DLQ's name without
 * `.dlq`) and counts the others as skipped, misrouted.
 */
import type { Admin, Kafka } from 'kafkajs';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { uniqueName } from '@outreach/testkit';
import { createKafka } from './client.js';
import { replayDeadLetters } from './dlq-replay.js';
import { createTopicsSettled, dlqTopicOf } from './topics.js';

let kafka: Kafka;
let admin: Admin;

beforeAll(async () => {
  kafka = createKafka({ brokers: inject('kafkaBrokers').split(','), clientId: 'dlq-replay-source-test' });
  admin = kafka.admin();
  await admin.connect();
});
afterAll(async () => {
  await admin.disconnect();
});

const depth = async (topic: string) =>
  (await admin.fetchTopicOffsets(topic)).reduce((n, p) => n + Number(BigInt(p.high) - BigInt(p.low)), 0);

describe('replayDeadLetters and the source a dead letter names', () => {
  it('writes nothing to a topic other than the DLQ’s own source', async () => {
    const source = uniqueName('dlq-source');
    const dlqTopic = dlqTopicOf(source);
    const elsewhere = uniqueName('dlq-elsewhere');
    await createTopicsSettled(admin, [
      { topic: source, numPartitions: 1 },
      { topic: dlqTopic, numPartitions: 1 },
      { topic: elsewhere, numPartitions: 1 },
    ]);
    const producer = kafka.producer();
    await producer.connect();
    const headers = (topic: string) => ({ 'dlq-error-code': 'HANDLER', 'dlq-reason': 'x', 'dlq-source-topic': topic });
    await producer.send({
      topic: dlqTopic,
      messages: [
        { key: 'own', value: 'own', headers: headers(source) },
        { key: 'forged', value: 'forged', headers: headers(elsewhere) },
      ],
    });
    await producer.disconnect();

    const result = await replayDeadLetters({ kafka, dlqTopic, timeoutMs: 30_000 });

    expect(await depth(source)).toBe(1);
    expect(await depth(elsewhere)).toBe(0);
    expect(result).toMatchObject({ destination: source, replayed: 1, skipped: 1, misrouted: 1 });
    // A dry run says where a replay would write, and what it would leave.
    const dry = await replayDeadLetters({ kafka, dlqTopic, dryRun: true, timeoutMs: 30_000 });
    expect(dry).toMatchObject({ destination: source, misrouted: 1 });
    // A topic that is not a DLQ is refused before anything is read.
    await expect(replayDeadLetters({ kafka, dlqTopic: source })).rejects.toThrow(/is not a dead-letter topic/);
  });
});
