/**
 * Evidence for ADR 001: what the platform relies on from kafkajs 2.2.4, against the real broker
 * this run provisions (Apache Kafka 4.x, KRaft). This file tests the client library itself, so it
 * is the one test that uses kafkajs directly rather than through this package's helpers.
 */
import { createRequire } from 'node:module';
import { Partitioners, type Admin, type Consumer, type EachBatchPayload, type Kafka, type Producer } from 'kafkajs';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { uniqueName, waitFor } from '@outreach/testkit';
import { createKafka } from './client.js';
import { patchKafkajsIdleTimer, unpatchKafkajsIdleTimerForTest } from './kafkajs-patches.js';
import { createTopicsSettled } from './topics.js';

const brokers = inject('kafkaBrokers').split(',');
let kafka: Kafka;
let admin: Admin;
const closers: Array<() => Promise<void>> = [];

function track<T extends Producer | Consumer>(client: T): T {
  closers.push(() => client.disconnect());
  return client;
}

/** Short long-polls, so stopping a consumer does not wait out kafkajs's default 5 s fetch wait. */
function consumerFor(options: Parameters<Kafka['consumer']>[0]): Consumer {
  return track(kafka.consumer({ maxWaitTimeInMs: 250, ...options }));
}

async function createTopic(
  name: string,
  partitions: number,
  configEntries: Array<{ name: string; value: string }> = [],
) {
  await createTopicsSettled(admin, [{ topic: name, numPartitions: partitions, configEntries }]);
}

function producer(options: Parameters<Kafka['producer']>[0] = {}): Producer {
  return track(kafka.producer({ createPartitioner: Partitioners.DefaultPartitioner, ...options }));
}

async function produceNumbered(topic: string, count: number, partitions: number): Promise<void> {
  const p = producer({ idempotent: true });
  await p.connect();
  await p.send({
    topic,
    acks: -1,
    messages: Array.from({ length: count }, (_, i) => ({ key: `k${i}`, value: String(i), partition: i % partitions })),
  });
  await p.disconnect();
}

async function committedTotal(groupId: string, topic: string): Promise<number> {
  const [entry] = await admin.fetchOffsets({ groupId, topics: [topic] });
  return (entry?.partitions ?? []).reduce((sum, p) => sum + Math.max(0, Number(p.offset)), 0);
}

beforeAll(async () => {
  kafka = createKafka({ brokers, clientId: 'kafkajs-compat' });
  admin = kafka.admin();
  await admin.connect();
});

afterAll(async () => {
  for (const close of closers.reverse()) await close().catch(() => undefined);
  await admin.disconnect();
});

describe('kafkajs 2.2.4 against the local Kafka broker', () => {
  it('idempotent producer with acks=all delivers every message once, in order per partition', async () => {
    const topic = uniqueName('compat_idem');
    await createTopic(topic, 2);
    const p = producer({ idempotent: true, maxInFlightRequests: 1 });
    await p.connect();
    const results = [];
    for (let batch = 0; batch < 10; batch++) {
      results.push(
        ...(await p.send({
          topic,
          acks: -1,
          messages: Array.from({ length: 50 }, (_, i) => ({
            key: `c${(batch * 50 + i) % 7}`,
            value: `${batch * 50 + i}`,
          })),
        })),
      );
    }
    expect(results.every((r) => r.errorCode === 0)).toBe(true);

    const seen: Array<{ partition: number; value: number }> = [];
    const consumer = consumerFor({ groupId: uniqueName('compat_idem_reader') });
    await consumer.connect();
    await consumer.subscribe({ topic, fromBeginning: true });
    await consumer.run({
      eachMessage: async ({ partition, message }) => {
        seen.push({ partition, value: Number(message.value?.toString()) });
      },
    });
    await waitFor(() => seen.length >= 500, { timeoutMs: 30_000, description: '500 messages read back' });
    await consumer.stop();

    const values = seen.map((s) => s.value).sort((a, b) => a - b);
    expect(values).toEqual(Array.from({ length: 500 }, (_, i) => i));
    for (const partition of [0, 1]) {
      const inPartition = seen.filter((s) => s.partition === partition).map((s) => s.value);
      expect(inPartition).toEqual([...inPartition].sort((a, b) => a - b));
    }
  });

  it('commits offsets only for processed messages; a new member resumes at the first unprocessed one', async () => {
    const topic = uniqueName('compat_commit');
    const groupId = uniqueName('compat_commit_group');
    await createTopic(topic, 1);
    await produceNumbered(topic, 10, 1);

    const first = consumerFor({ groupId });
    await first.connect();
    await first.subscribe({ topic, fromBeginning: true });
    const processed: number[] = [];
    await first.run({
      eachBatchAutoResolve: false,
      eachBatch: async ({ batch, resolveOffset, commitOffsetsIfNecessary, pause }) => {
        for (const message of batch.messages) {
          const value = Number(message.value?.toString());
          if (value === 5) {
            // Processing of message 5 "fails": stop here without resolving it.
            pause();
            return;
          }
          processed.push(value);
          resolveOffset(message.offset);
        }
        await commitOffsetsIfNecessary();
      },
    });
    await waitFor(async () => (await committedTotal(groupId, topic)) === 5, {
      timeoutMs: 20_000,
      description: 'offset 5 committed for the group',
    });
    await first.disconnect();
    expect(processed).toEqual([0, 1, 2, 3, 4]);

    const second = consumerFor({ groupId });
    const resumed: number[] = [];
    await second.connect();
    await second.subscribe({ topic, fromBeginning: true });
    await second.run({
      eachMessage: async ({ message }) => {
        resumed.push(Number(message.value?.toString()));
      },
    });
    await waitFor(() => resumed.length >= 5, { timeoutMs: 30_000, description: 'messages 5..9 redelivered' });
    expect(resumed).toEqual([5, 6, 7, 8, 9]);
  });

  it('rebalances a two-member group during a long eachBatch that heartbeats, and loses nothing', async () => {
    const topic = uniqueName('compat_rebalance');
    const groupId = uniqueName('compat_rebalance_group');
    const partitions = 4;
    const total = 400;
    await createTopic(topic, partitions);
    await produceNumbered(topic, total, partitions);

    const processed = new Map<string, number[]>();
    let secondJoined = false;
    let firstInLongBatch = false;
    let sawStaleOrRebalance = false;
    const record = (member: string, value: number) => processed.set(member, [...(processed.get(member) ?? []), value]);

    const handler =
      (member: string, slowUntilSecondJoins: boolean) =>
      async ({ batch, resolveOffset, heartbeat, isRunning, isStale, commitOffsetsIfNecessary }: EachBatchPayload) => {
        for (const message of batch.messages) {
          if (!isRunning() || isStale()) {
            sawStaleOrRebalance = true;
            return;
          }
          if (slowUntilSecondJoins && !sawStaleOrRebalance) {
            firstInLongBatch = true;
            // A long batch: keep the membership alive with heartbeats. Once the second member joins,
            // heartbeat() rejects with REBALANCE_IN_PROGRESS and kafkajs rejoins the group; nothing
            // after the last resolved offset of this batch is committed.
            const deadline = Date.now() + 30_000;
            try {
              while (Date.now() < deadline) {
                await heartbeat();
                await new Promise((r) => setTimeout(r, 200));
              }
            } catch (error) {
              sawStaleOrRebalance = true;
              throw error;
            }
            throw new Error('no rebalance reached the long batch within 30 s');
          }
          record(member, Number(message.value?.toString()));
          resolveOffset(message.offset);
          await heartbeat();
        }
        await commitOffsetsIfNecessary();
      };

    const a = consumerFor({ groupId, sessionTimeout: 10_000, heartbeatInterval: 500, maxBytesPerPartition: 512 });
    await a.connect();
    await a.subscribe({ topic, fromBeginning: true });
    await a.run({ eachBatchAutoResolve: false, eachBatch: handler('a', true) });
    await waitFor(() => firstInLongBatch, { timeoutMs: 30_000, description: 'the first member inside its long batch' });

    const b = consumerFor({ groupId, sessionTimeout: 10_000, heartbeatInterval: 500 });
    const assignments: number[][] = [];
    b.on(b.events.GROUP_JOIN, (event) => {
      assignments.push(event.payload.memberAssignment[topic] ?? []);
      secondJoined = true;
    });
    await b.connect();
    await b.subscribe({ topic, fromBeginning: true });
    await b.run({ eachBatchAutoResolve: false, eachBatch: handler('b', false) });

    await waitFor(async () => (await committedTotal(groupId, topic)) === total, {
      timeoutMs: 60_000,
      description: `all ${total} offsets committed by the group`,
    });

    const all = [...(processed.get('a') ?? []), ...(processed.get('b') ?? [])];
    expect(new Set(all).size).toBe(total);
    expect(secondJoined).toBe(true);
    expect(sawStaleOrRebalance).toBe(true);
    expect(assignments.at(-1)?.length ?? 0).toBeGreaterThan(0);
    expect(processed.get('b')?.length ?? 0).toBeGreaterThan(0);
  });

  it('transactional consume→produce with sendOffsets: commit publishes, abort hides', async () => {
    const input = uniqueName('compat_tx_in');
    const output = uniqueName('compat_tx_out');
    const groupId = uniqueName('compat_tx_group');
    await createTopic(input, 1);
    await createTopic(output, 1);
    await produceNumbered(input, 3, 1);

    const tx = producer({ transactionalId: uniqueName('compat_tx'), idempotent: true, maxInFlightRequests: 1 });
    await tx.connect();

    const committed = await tx.transaction();
    await committed.send({
      topic: output,
      messages: [
        { key: 'k', value: 'committed-0' },
        { key: 'k', value: 'committed-1' },
      ],
    });
    await committed.sendOffsets({
      consumerGroupId: groupId,
      topics: [{ topic: input, partitions: [{ partition: 0, offset: '2' }] }],
    });
    await committed.commit();

    const aborted = await tx.transaction();
    await aborted.send({ topic: output, messages: [{ key: 'k', value: 'aborted' }] });
    await aborted.sendOffsets({
      consumerGroupId: groupId,
      topics: [{ topic: input, partitions: [{ partition: 0, offset: '3' }] }],
    });
    await aborted.abort();

    const marker = producer({ idempotent: true });
    await marker.connect();
    await marker.send({ topic: output, acks: -1, messages: [{ key: 'k', value: 'after' }] });

    const seen: string[] = [];
    const reader = consumerFor({ groupId: uniqueName('compat_tx_reader'), readUncommitted: false });
    await reader.connect();
    await reader.subscribe({ topic: output, fromBeginning: true });
    await reader.run({ eachMessage: async ({ message }) => void seen.push(message.value?.toString() ?? '') });
    await waitFor(() => seen.includes('after'), {
      timeoutMs: 30_000,
      description: 'the marker after the aborted transaction',
    });

    expect(seen).toEqual(['committed-0', 'committed-1', 'after']);
    expect(await committedTotal(groupId, input)).toBe(2);
  });

  it('creates a topic with message.timestamp.type=LogAppendTime and stamps the broker time', async () => {
    const topic = uniqueName('compat_logappend');
    await createTopic(topic, 1, [{ name: 'message.timestamp.type', value: 'LogAppendTime' }]);
    const described = await admin.describeConfigs({
      includeSynonyms: false,
      resources: [{ type: 2 /* TOPIC */, name: topic, configNames: ['message.timestamp.type'] }],
    });
    expect(described.resources[0]?.configEntries[0]?.configValue).toBe('LogAppendTime');

    const before = Date.now();
    const p = producer({ idempotent: true });
    await p.connect();
    // A producer clock far in the past: the broker must ignore it.
    await p.send({ topic, acks: -1, messages: [{ key: 'k', value: 'v', timestamp: '1000' }] });

    let timestamp: number | undefined;
    const reader = consumerFor({ groupId: uniqueName('compat_logappend_reader') });
    await reader.connect();
    await reader.subscribe({ topic, fromBeginning: true });
    await reader.run({ eachMessage: async ({ message }) => void (timestamp = Number(message.timestamp)) });
    const stamped = await waitFor(() => timestamp, { timeoutMs: 30_000, description: 'the message read back' });
    expect(stamped).toBeGreaterThanOrEqual(before - 5_000);
    expect(stamped).toBeLessThanOrEqual(Date.now() + 5_000);
  });
});

describe('an idle connection (kafkajs#1751, fixed in kafkajs-patches.ts)', () => {
  const require = createRequire(import.meta.url);
  const RequestQueue = require('kafkajs/src/network/requestQueue/index.js') as {
    prototype: { checkPendingRequests(this: { clientId: string }): void };
  };

  /**
   * How often the request queues of a new admin and producer woke up while they sat idle for `ms`
   * (counted by client id: the other tests' consumers are still fetching). `asShipped` runs it on
   * kafkajs without the fix, which createKafka applies.
   */
  async function wakeUpsWhileIdle(ms: number, asShipped = false): Promise<number> {
    const clientId = uniqueName('idle');
    const client = createKafka({ brokers, clientId });
    if (asShipped) unpatchKafkajsIdleTimerForTest();
    const idleAdmin = client.admin();
    const idleProducer = client.producer();
    const original = RequestQueue.prototype.checkPendingRequests;
    let wakeUps = 0;
    try {
      await idleAdmin.connect();
      await idleProducer.connect();
      await idleAdmin.listTopics();
      RequestQueue.prototype.checkPendingRequests = function counted(this: { clientId: string }) {
        if (this.clientId === clientId) wakeUps += 1;
        original.call(this);
      };
      // Idleness is the subject here: nothing to poll for, the clients must simply not run.
      await new Promise((resolve) => setTimeout(resolve, ms));
    } finally {
      RequestQueue.prototype.checkPendingRequests = original;
      patchKafkajsIdleTimer();
      await idleProducer.disconnect();
      await idleAdmin.disconnect();
    }
    return wakeUps;
  }

  it('is fixed for the kafkajs version in use (another version needs the fix read again)', () => {
    expect(patchKafkajsIdleTimer()).toBe(true);
  });

  it('does not wake its process: no checks in an idle second, where kafkajs as shipped makes one a millisecond', async () => {
    expect(await wakeUpsWhileIdle(1_000, true)).toBeGreaterThan(300);
    expect(await wakeUpsWhileIdle(1_000)).toBeLessThan(5);
  });
});
