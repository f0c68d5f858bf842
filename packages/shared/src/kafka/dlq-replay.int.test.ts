/**
 * A handler bug dead-letters events; once fixed, the replay sends them back to their topic, where
 * the fixed consumer handles each once. Filters pick by code; a second run replays nothing new; a
 * dry run changes nothing.
 */
import type { Admin, Kafka } from 'kafkajs';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { createLogger } from '../logger.js';
import { stepCompleted } from '../../test/fixtures/events.js';
import { uniqueName } from '@outreach/testkit';
import { waitFor } from '../wait.js';
import { createKafka } from './client.js';
import { ConsumerRunner, type ConsumedEvent } from './consumer.js';
import { replayDeadLetters } from './dlq-replay.js';
import { EventProducer } from './producer.js';
import { createTopicsSettled, dlqTopicOf } from './topics.js';

let kafka: Kafka;
let admin: Admin;
const logger = createLogger({ name: 'dlq-replay-test', level: 'silent' });

beforeAll(async () => {
  kafka = createKafka({ brokers: inject('kafkaBrokers').split(','), clientId: 'dlq-replay-test' });
  admin = kafka.admin();
  await admin.connect();
});
afterAll(async () => {
  await admin.disconnect();
});

const step = (seq: number) => stepCompleted(seq, `cand-${seq}`);

/** A topic and its DLQ, `count` events on it, and a buggy consumer group that dead-lettered them all. */
async function deadLettered(count: number, partitions: number, reason: string) {
  const topic = uniqueName('dlq-replay');
  const dlqTopic = dlqTopicOf(topic);
  await createTopicsSettled(admin, [
    { topic, numPartitions: partitions },
    { topic: dlqTopic, numPartitions: partitions },
  ]);
  const groupId = uniqueName('group');
  const events = Array.from({ length: count }, (_, i) => step(i));
  const producer = new EventProducer(kafka);
  await producer.publish(events.map((event) => ({ topic, event })));
  await producer.disconnect();
  const buggy = new ConsumerRunner({
    kafka,
    groupId,
    topics: [topic],
    logger,
    handler: async (batch) => ({ rejected: batch.map((e) => ({ offset: e.offset, reason })) }),
  });
  await buggy.start();
  await waitFor(() => buggy.stats.deadLettered === count, {
    timeoutMs: 30_000,
    description: `${count} dead-lettered`,
  });
  await buggy.stop();
  return { topic, dlqTopic, groupId, events };
}

describe('replayDeadLetters', () => {
  it('sends dead-lettered events back once, after the fix, with filters, resumption and a dry run', async () => {
    // The bug: every event is rejected, so all 30 go to the DLQ with their reason.
    const { topic, dlqTopic, groupId, events } = await deadLettered(30, 3, 'template missing');

    // A dry run reports and changes nothing.
    const dry = await replayDeadLetters({ kafka, dlqTopic, dryRun: true });
    expect(dry).toMatchObject({ replayed: 30, skipped: 0, byReason: { 'REJECTED: template missing': 30 } });

    // The fix, then the replay: each event handled once by the fixed consumer of the same group.
    const handled: ConsumedEvent[] = [];
    const fixed = new ConsumerRunner({
      kafka,
      groupId,
      topics: [topic],
      logger,
      handler: async (batch) => {
        handled.push(...batch);
        return { rejected: [] };
      },
    });
    await fixed.start();
    const replay = await replayDeadLetters({ kafka, dlqTopic, codes: ['REJECTED'], group: groupId });
    expect(replay).toMatchObject({ replayed: 30, skipped: 0 });
    await waitFor(() => handled.length >= 30, { timeoutMs: 30_000, description: 'the replayed events handled' });
    expect(new Set(handled.map((e) => e.event.eventId))).toEqual(new Set(events.map((e) => e.eventId)));
    expect(handled.every((e) => e.headers['replayed-from']?.startsWith(`${dlqTopic}/`))).toBe(true);
    expect(handled.some((e) => Object.keys(e.headers).some((h) => h.startsWith('dlq-')))).toBe(false);

    // A second run resumes after what it replayed: nothing again.
    expect(await replayDeadLetters({ kafka, dlqTopic })).toMatchObject({ replayed: 0, skipped: 0 });
    expect(handled).toHaveLength(30);
    await fixed.stop();
  });

  it('skips what the filters leave out, and commits past it', async () => {
    const { topic, dlqTopic } = await deadLettered(5, 1, 'nope');
    expect(await replayDeadLetters({ kafka, dlqTopic, group: 'another-group' })).toMatchObject({
      replayed: 0,
      skipped: 5,
    });
    expect(await replayDeadLetters({ kafka, dlqTopic })).toMatchObject({ replayed: 0, skipped: 0 });
    const offsets = await admin.fetchTopicOffsets(topic);
    expect(offsets[0]?.high).toBe('5'); // nothing was published back
  });
});
