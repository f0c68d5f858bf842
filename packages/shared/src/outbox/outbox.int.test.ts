/**
 * The outbox against the real database and broker: idempotent enqueue in the caller's transaction,
 * in-order publishing, relay processes killed with SIGKILL mid-batch, hand-over between relays, and
 * requests cut by bytes under the topic's max.message.bytes with oversized records parked.
 */
import { randomUUID } from 'node:crypto';
import { join } from 'node:path';
import { ConfigResourceTypes, type Admin, type Kafka } from 'kafkajs';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { eventCodec } from '@outreach/contracts';
import type { StepCompleted } from '@outreach/contracts';
import { createKafka } from '../kafka/client.js';
import { EventProducer, HEADER } from '../kafka/producer.js';
import { readTopic, type ReadMessage } from '@outreach/testkit';
import { createTopicsSettled } from '../kafka/topics.js';
import { createLogger } from '../logger.js';
import { createMetricsRegistry } from '../metrics.js';
import { migrate, sharedMigrationsDir } from '../pg/migrate.js';
import { withTransaction } from '../pg/transaction.js';
import { isolatedSchema, type IsolatedSchema } from '@outreach/testkit';
import { uniqueName } from '@outreach/testkit';
import { startProcess, type RunningProcess } from '@outreach/testkit';
import { waitFor } from '../wait.js';
import { registerOutboxMetrics } from '../metrics/outbox.js';
import { enqueueEvents, OutboxRelay, type OutboxRelayOptions } from './outbox.js';

const databaseUrl = inject('databaseUrl');
const brokers = inject('kafkaBrokers');
const root = join(import.meta.dirname, '..', '..', '..', '..');
const relayEntry = join(import.meta.dirname, '..', '..', 'test', 'fixtures', 'outbox-relay-process.ts');
const logger = createLogger({ name: 'outbox-test', level: 'silent' });
const MiB = 1_048_576;

/** A logger whose JSON lines the test can read. */
function capturingLogger() {
  const lines: Array<Record<string, unknown>> = [];
  const log = createLogger(
    { name: 'outbox-test', level: 'info' },
    { write: (line: string) => lines.push(JSON.parse(line)) },
  );
  return { log, lines };
}

let kafka: Kafka;
let admin: Admin;
const cleanups: Array<() => Promise<unknown>> = [];

beforeAll(async () => {
  kafka = createKafka({ brokers: brokers.split(','), clientId: 'outbox-test' });
  admin = kafka.admin();
  await admin.connect();
});
afterAll(async () => {
  for (const cleanup of cleanups.reverse()) await cleanup().catch(() => undefined);
  await admin.disconnect();
});

async function outboxSchema(): Promise<IsolatedSchema> {
  const isolated = await isolatedSchema(databaseUrl, 'outbox');
  await migrate({ databaseUrl, schema: isolated.schema, dir: sharedMigrationsDir });
  cleanups.push(() => isolated.drop());
  return isolated;
}

async function topic(partitions = 3): Promise<string> {
  const name = uniqueName('outbox_topic');
  await createTopicsSettled(admin, [{ topic: name, numPartitions: partitions }]);
  return name;
}

function step(key: string, seq: number, padBytes = 0): StepCompleted {
  return {
    type: 'StepCompleted',
    eventId: randomUUID(),
    occurredAt: Date.now(),
    producer: 'outbox-test',
    correlationId: randomUUID(),
    causationId: null,
    conversationId: `conv-${key}`,
    campaignId: `camp${'x'.repeat(padBytes)}`,
    candidateKey: key,
    stepId: String(seq),
  };
}

async function limitedTopic(maxMessageBytes: number): Promise<string> {
  const name = uniqueName('outbox_limited');
  await createTopicsSettled(admin, [
    {
      topic: name,
      numPartitions: 3,
      configEntries: [{ name: 'max.message.bytes', value: String(maxMessageBytes) }],
    },
  ]);
  return name;
}

const unpublished = async (pool: IsolatedSchema['pool']) =>
  (await pool.query('SELECT count(*)::int AS n FROM outbox WHERE published_at IS NULL')).rows[0].n as number;

/** A relay started in this process; stopped, and its producer disconnected, after the tests. */
function startRelay(options: OutboxRelayOptions): OutboxRelay {
  const relay = new OutboxRelay(options);
  relay.start();
  cleanups.push(async () => {
    await relay.stop();
    await options.producer.disconnect();
  });
  return relay;
}

/** The batch of the relay processes below: at most this many rows are in flight when one is killed. */
const RELAY_BATCH_SIZE = 50;

function relayProcess(schema: string): RunningProcess {
  const proc = startProcess(
    relayEntry,
    {
      PATH: process.env.PATH,
      DATABASE_URL: databaseUrl,
      KAFKA_BROKERS: brokers,
      OUTBOX_SCHEMA: schema,
      BATCH_SIZE: String(RELAY_BATCH_SIZE),
    },
    [],
    ['--conditions=source', '--import', join(root, 'node_modules', 'tsx', 'dist', 'loader.mjs')],
  );
  cleanups.push(() => proc.stop('SIGKILL'));
  return proc;
}

const logged = (proc: RunningProcess, msg: string) =>
  proc.stdoutLines.filter((line) => line.includes(`"msg":"${msg}"`)).length;

/** Each eventId once (first occurrence), and per key the sequence numbers strictly increase. */
function checkDelivery(messages: readonly ReadMessage[], enqueued: readonly StepCompleted[]) {
  const firstSeen = new Map<string, StepCompleted>();
  for (const message of messages) {
    const event = eventCodec.decode(message.value as Buffer) as StepCompleted;
    expect(message.headers[HEADER.eventId]).toBe(event.eventId);
    expect(message.key).toBe(event.candidateKey);
    if (!firstSeen.has(event.eventId)) firstSeen.set(event.eventId, event);
  }
  expect(new Set(firstSeen.keys())).toEqual(new Set(enqueued.map((e) => e.eventId)));
  const lastByKey = new Map<string, number>();
  for (const event of firstSeen.values()) {
    const seq = Number(event.stepId);
    expect(seq, `order for ${event.candidateKey}`).toBeGreaterThan(lastByKey.get(event.candidateKey) ?? -1);
    lastByKey.set(event.candidateKey, seq);
  }
  return { duplicates: messages.length - firstSeen.size };
}

describe('outbox', () => {
  it("enqueues in the caller's transaction: a rollback leaves nothing, the same event twice is one row", async () => {
    const { pool } = await outboxSchema();
    const event = step('k', 0);
    await expect(
      withTransaction(pool, async (client) => {
        await enqueueEvents(client, [{ topic: 't', event }]);
        throw new Error('the state change failed');
      }),
    ).rejects.toThrow('the state change failed');
    expect((await pool.query('SELECT count(*)::int AS n FROM outbox')).rows[0].n).toBe(0);

    const inserted = await withTransaction(pool, async (client) => {
      const first = await enqueueEvents(client, [{ topic: 't', event }]);
      const second = await enqueueEvents(client, [{ topic: 't', event }]);
      return [first, second];
    });
    expect(inserted).toEqual([1, 0]);
    expect(await enqueueEvents(pool, [{ topic: 't', event }])).toBe(0);
    expect((await pool.query('SELECT count(*)::int AS n FROM outbox')).rows[0].n).toBe(1);
  });

  it('a published row leaves the outbox and its id refuses a repeat; rows an older relay marked are moved, not re-sent', async () => {
    const { pool, schema } = await outboxSchema();
    const name = await topic(1);
    const events = Array.from({ length: 30 }, (_, i) => step('k', i));
    await enqueueEvents(
      pool,
      events.map((event) => ({ topic: name, event })),
    );
    // A row a relay of the previous release marked published in place during a rolling upgrade.
    const marked = step('old', 0);
    await enqueueEvents(pool, [{ topic: name, event: marked }]);
    await pool.query('UPDATE outbox SET published_at = now() WHERE event_id = $1', [marked.eventId]);
    // An id published longer ago than the retention: forgotten by the relay's cleanup.
    const expired = randomUUID();
    await pool.query(`INSERT INTO outbox_event_ids (event_id, enqueued_at) VALUES ($1, now() - interval '8 days')`, [
      expired,
    ]);

    const relay = startRelay({ databaseUrl, schema, producer: new EventProducer(kafka), logger, pollIntervalMs: 50 });
    await waitFor(async () => relay.stats.published === 30, { timeoutMs: 20_000, description: '30 rows published' });
    await waitFor(async () => (await pool.query('SELECT count(*)::int AS n FROM outbox')).rows[0].n === 0, {
      timeoutMs: 10_000,
      description: 'the outbox empty, the marked row moved out by the cleanup',
    });
    const kept = await pool.query<{ event_id: string }>('SELECT event_id FROM outbox_event_ids');
    expect(new Set(kept.rows.map((r) => r.event_id))).toEqual(
      new Set([...events.map((e) => e.eventId), marked.eventId]),
    );

    // Enqueued again, published or marked: nothing new, nothing sent twice; a fresh event still goes.
    expect(
      await enqueueEvents(
        pool,
        [...events, marked].map((event) => ({ topic: name, event })),
      ),
    ).toBe(0);
    const fresh = step('k', 30);
    expect(await enqueueEvents(pool, [{ topic: name, event: fresh }])).toBe(1);
    const messages = await readTopic(kafka, name, (m) => m.some((x) => x.headers[HEADER.eventId] === fresh.eventId));
    expect(checkDelivery(messages, [...events, fresh]).duplicates).toBe(0);
    expect(messages.some((m) => m.headers[HEADER.eventId] === marked.eventId)).toBe(false);
  });

  it('refuses a repeat that arrives while the relay deletes the published row (its transaction not yet committed)', async () => {
    const { pool } = await outboxSchema();
    const event = step('race', 0);
    expect(await enqueueEvents(pool, [{ topic: 't', event }])).toBe(1);
    // The relay's publication of that row, caught between its DELETE and its COMMIT.
    const relay = await pool.connect();
    try {
      await relay.query('BEGIN');
      await relay.query('DELETE FROM outbox WHERE event_id = $1', [event.eventId]);
      // The repeat: a lookup of published ids would see nothing yet, and the outbox's own unique
      // index, once the DELETE commits, nothing either; the id written with the first enqueue decides.
      const repeat = enqueueEvents(pool, [{ topic: 't', event }]);
      await relay.query('COMMIT');
      expect(await repeat).toBe(0);
    } finally {
      relay.release();
    }
    expect((await pool.query('SELECT count(*)::int AS n FROM outbox')).rows[0].n).toBe(0);
  });

  it('publishes a row that commits after rows with higher ids were published (its transaction began first)', async () => {
    const { pool, schema } = await outboxSchema();
    const name = await topic(1);
    const relay = startRelay({ databaseUrl, schema, producer: new EventProducer(kafka), logger, pollIntervalMs: 50 });
    const straggler = step('late', 0);
    const later = Array.from({ length: 40 }, (_, i) => step('k', i));
    const client = await pool.connect();
    try {
      await client.query('BEGIN');
      await enqueueEvents(client, [{ topic: name, event: straggler }]);
      // Rows with higher ids, committed and published while the first transaction stays open.
      for (let i = 0; i < later.length; i += 10) {
        await enqueueEvents(
          pool,
          later.slice(i, i + 10).map((event) => ({ topic: name, event })),
        );
      }
      await waitFor(async () => relay.stats.published === 40, { timeoutMs: 20_000, description: '40 rows published' });
      await client.query('COMMIT');
    } finally {
      client.release();
    }
    await waitFor(async () => relay.stats.published === 41, {
      timeoutMs: 10_000,
      description: 'the late row published too',
    });
    const messages = await readTopic(kafka, name, (m) => m.length >= 41);
    expect(checkDelivery(messages, [...later, straggler]).duplicates).toBe(0);
  });

  it('publishes in id order with event headers, marks rows published, and reports its backlog', async () => {
    const { pool, schema } = await outboxSchema();
    const name = await topic();
    const events = Array.from({ length: 120 }, (_, i) => step(`k${i % 4}`, i));
    await withTransaction(pool, (client) =>
      enqueueEvents(
        client,
        events.map((event) => ({ topic: name, event })),
      ),
    );

    const registry = createMetricsRegistry('outbox-test', false);
    registerOutboxMetrics(registry, pool);
    expect(await registry.getSingleMetricAsString('outreach_outbox_unpublished_rows')).toMatch(
      /outreach_outbox_unpublished_rows\{[^}]*\} 120/,
    );

    const producer = new EventProducer(kafka);
    startRelay({
      databaseUrl,
      schema,
      producer,
      logger,
      metrics: registry,
      batchSize: 50,
      pollIntervalMs: 100,
    });
    await waitFor(
      async () =>
        (await pool.query('SELECT count(*)::int AS n FROM outbox WHERE published_at IS NULL')).rows[0].n === 0,
      {
        timeoutMs: 20_000,
        description: 'every outbox row published',
      },
    );
    const messages = await readTopic(kafka, name, (m) => m.length >= 120);
    expect(checkDelivery(messages, events).duplicates).toBe(0);
    expect(await registry.getSingleMetricAsString('outreach_outbox_unpublished_rows')).toMatch(/ 0$/m);
    expect(await registry.getSingleMetricAsString('outreach_outbox_published_total')).toMatch(/ 120$/m);
  });

  it('loses nothing when relay processes are killed with SIGKILL mid-batch, five times, while events are enqueued', async () => {
    const { pool, schema } = await outboxSchema();
    const name = await topic();
    const enqueued: StepCompleted[] = [];
    const keys = Array.from({ length: 20 }, (_, i) => `cand-${i}`);
    const seqByKey = new Map<string, number>();
    let enqueuing = true;
    const producerLoop = (async () => {
      for (let tx = 0; tx < 150; tx++) {
        const batch = Array.from({ length: 20 }, (_, i) => {
          const key = keys[(tx + i) % keys.length] as string;
          const seq = (seqByKey.get(key) ?? -1) + 1;
          seqByKey.set(key, seq);
          return step(key, seq);
        });
        await withTransaction(pool, (client) =>
          enqueueEvents(
            client,
            batch.map((event) => ({ topic: name, event })),
          ),
        );
        enqueued.push(...batch);
        await new Promise((resolve) => setImmediate(resolve));
      }
      enqueuing = false;
    })();

    for (let kill = 1; kill <= 5; kill++) {
      const relay = relayProcess(schema);
      // Kill while a batch is in flight: after "publishing", before "published" and the UPDATE.
      const target = 1 + Math.floor(Math.random() * 4);
      await waitFor(() => logged(relay, 'publishing outbox batch') >= target, {
        timeoutMs: 30_000,
        description: `relay ${kill} to start batch ${target}`,
      });
      await relay.stop('SIGKILL');
    }
    await producerLoop;
    expect(enqueuing).toBe(false);

    const survivor = relayProcess(schema);
    await waitFor(
      async () =>
        (await pool.query('SELECT count(*)::int AS n FROM outbox WHERE published_at IS NULL')).rows[0].n === 0,
      {
        timeoutMs: 60_000,
        description: 'the surviving relay to publish the backlog',
      },
    );
    const unique = () => new Set<string>();
    const messages = await readTopic(
      kafka,
      name,
      (m) => m.reduce((seen, msg) => seen.add(msg.headers[HEADER.eventId] as string), unique()).size >= enqueued.length,
      60_000,
    );
    const { duplicates } = checkDelivery(messages, enqueued);
    expect(enqueued).toHaveLength(3_000);
    // Killed between Kafka's ack and the UPDATE, a batch is published again: at least once, but never
    // more than the batch each kill interrupted (RELAY_BATCH_SIZE rows), so five kills re-publish at most
    // five batches. A relay that re-published what it had already marked would exceed it.
    expect(duplicates).toBeLessThanOrEqual(5 * RELAY_BATCH_SIZE);
    console.info(
      `outbox crash test: ${messages.length} messages for ${enqueued.length} events (${duplicates} re-published after kills)`,
    );
    await survivor.stop('SIGTERM');
  });

  it('runs one active relay at a time; a standby takes over within seconds after the active one is killed', async () => {
    const { pool, schema } = await outboxSchema();
    const name = await topic();
    const a = relayProcess(schema);
    const b = relayProcess(schema);
    const active = await waitFor(() => [a, b].find((p) => logged(p, 'outbox relay active') > 0), {
      timeoutMs: 20_000,
      description: 'one relay to become active',
    });
    const standby = active === a ? b : a;
    await waitFor(() => logged(standby, 'relay process started') > 0, {
      timeoutMs: 20_000,
      description: 'the standby to run',
    });

    const first = Array.from({ length: 200 }, (_, i) => step(`k${i % 5}`, i));
    await withTransaction(pool, (client) =>
      enqueueEvents(
        client,
        first.map((event) => ({ topic: name, event })),
      ),
    );
    await waitFor(
      async () =>
        (await pool.query('SELECT count(*)::int AS n FROM outbox WHERE published_at IS NULL')).rows[0].n === 0,
      {
        timeoutMs: 20_000,
        description: 'the first 200 published',
      },
    );
    expect(logged(active, 'publishing outbox batch')).toBeGreaterThan(0);
    expect(logged(standby, 'outbox relay active')).toBe(0);
    expect(logged(standby, 'publishing outbox batch')).toBe(0);

    await active.stop('SIGKILL');
    // The database drops the dead session's advisory lock; the standby retries every 100 ms.
    await waitFor(() => logged(standby, 'outbox relay active') > 0, {
      timeoutMs: 5_000,
      description: 'the standby to take over within 5 s',
    });

    const second = Array.from({ length: 200 }, (_, i) => step(`k${i % 5}`, 200 + i));
    await withTransaction(pool, (client) =>
      enqueueEvents(
        client,
        second.map((event) => ({ topic: name, event })),
      ),
    );
    const messages = await readTopic(kafka, name, (m) => new Set(m.map((x) => x.headers[HEADER.eventId])).size >= 400);
    checkDelivery(messages, [...first, ...second]);
    expect(logged(standby, 'publishing outbox batch')).toBeGreaterThan(0);
  });

  it('publishes 100 KB bodies in requests under a 1 MiB topic limit, parks the one 1.2 MB record, and goes on', async () => {
    const { pool, schema } = await outboxSchema();
    const name = await limitedTopic(MiB);
    // 80 bodies of 100 KB (8 MB, so one fetch of rows needs several requests), the big one in the middle.
    const bodies = Array.from({ length: 80 }, (_, i) => step(`k${i % 4}`, i, 100_000));
    const big = step('k1', 1_000, 1_200_000);
    await withTransaction(pool, async (client) => {
      await enqueueEvents(
        client,
        bodies.slice(0, 40).map((event) => ({ topic: name, event })),
      );
      await enqueueEvents(client, [{ topic: name, event: big }]);
      await enqueueEvents(
        client,
        bodies.slice(40).map((event) => ({ topic: name, event })),
      );
    });

    const registry = createMetricsRegistry('outbox-test', false);
    registerOutboxMetrics(registry, pool);
    const { log, lines } = capturingLogger();
    const producer = new EventProducer(kafka, { logger: log });
    const relay = startRelay({
      databaseUrl,
      schema,
      producer,
      logger: log,
      metrics: registry,
      pollIntervalMs: 100,
    });
    await waitFor(async () => (await unpublished(pool)) === 0, {
      timeoutMs: 60_000,
      description: 'the outbox drained (published or parked)',
    });

    const messages = await readTopic(kafka, name, (m) => m.length >= bodies.length, 60_000);
    expect(checkDelivery(messages, bodies).duplicates).toBe(0);
    expect(messages.some((m) => m.headers[HEADER.eventId] === big.eventId)).toBe(false);

    const parked = await pool.query('SELECT event_id, topic, size_bytes, limit_bytes, reason FROM outbox_parked');
    expect(parked.rows).toEqual([
      {
        event_id: big.eventId,
        topic: name,
        size_bytes: expect.any(Number),
        limit_bytes: MiB,
        reason: expect.any(String),
      },
    ]);
    expect(parked.rows[0].size_bytes).toBeGreaterThan(1_200_000);
    expect(
      (await pool.query('SELECT count(*)::int AS n FROM outbox WHERE event_id = $1', [big.eventId])).rows[0].n,
    ).toBe(0);
    expect(await registry.getSingleMetricAsString('outreach_outbox_parked_rows')).toMatch(/ 1$/m);
    expect(await registry.getSingleMetricAsString('outreach_outbox_parked_total')).toMatch(/ 1$/m);
    expect(await registry.getSingleMetricAsString('outreach_outbox_published_total')).toMatch(/ 80$/m);
    expect(lines.filter((l) => l.alert === 'outbox_parked').map((l) => l.eventId)).toEqual([big.eventId]);
    expect(relay.stats.batches).toBeGreaterThanOrEqual(1);

    // The same event enqueued again (a redelivered handler) is parked once, not twice.
    await enqueueEvents(pool, [{ topic: name, event: big }]);
    await waitFor(async () => (await unpublished(pool)) === 0, {
      timeoutMs: 20_000,
      description: 'the copy taken off',
    });
    expect((await pool.query('SELECT count(*)::int AS n FROM outbox_parked')).rows[0].n).toBe(1);
    expect(relay.liveness()).toBeUndefined();
  });

  it('when the broker refuses a request its stale limit allowed, sends one by one and parks only what it refuses alone', async () => {
    const { pool, schema } = await outboxSchema();
    const name = await limitedTopic(MiB);
    const producer = new EventProducer(kafka, { logger });
    // The producer reads 1 MiB and keeps it (5 minutes); then the topic's limit drops to 300 KB.
    expect(await producer.maxMessageBytes(name)).toBe(MiB);
    await admin.alterConfigs({
      validateOnly: false,
      resources: [
        { type: ConfigResourceTypes.TOPIC, name, configEntries: [{ name: 'max.message.bytes', value: '307200' }] },
      ],
    });
    const small = Array.from({ length: 12 }, (_, i) => step('same', i, 100_000));
    const tooBig = step('same', 100, 400_000);
    await withTransaction(pool, (client) =>
      enqueueEvents(
        client,
        [...small.slice(0, 6), tooBig, ...small.slice(6)].map((event) => ({ topic: name, event })),
      ),
    );
    startRelay({ databaseUrl, schema, producer, logger, pollIntervalMs: 100 });
    await waitFor(async () => (await unpublished(pool)) === 0, {
      timeoutMs: 60_000,
      description: 'the outbox drained',
    });
    const messages = await readTopic(kafka, name, (m) => m.length >= small.length, 30_000);
    checkDelivery(messages, small);
    const parked = await pool.query('SELECT event_id, reason FROM outbox_parked');
    expect(parked.rows.map((r) => r.event_id)).toEqual([tooBig.eventId]);
    // Parked on the way one by one, which only a refused request leads to.
    expect(parked.rows[0].reason).toMatch(/refused/);
  });
});
