/**
 * The consumer runner survives a broker restart and a PostgreSQL restart mid-consumption, with no
 * message skipped and none dead-lettered. Both are restarted, so this spec runs its own broker and
 * its own database server (under .infra/faults/), never the shared ones other specs use.
 */
import { spawnSync } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { existsSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import {
  ConsumerRunner,
  createKafka,
  createLogger,
  createPool,
  createTopicsSettled,
  dlqTopicOf,
  EventProducer,
  withTransaction,
} from '@outreach/shared';
import { type StepCompleted } from '@outreach/contracts';
import { freePort, uniqueName, waitFor } from '@outreach/testkit';
import type { Pool } from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  purgeOwnedPostgres,
  startKafka,
  startOwnedPostgres,
  stopKafka,
  stopOwnedPostgres,
  type KafkaInstance,
  type PostgresInstance,
} from '../../scripts/infra.js';

const root = join(import.meta.dirname, '..', '..');
const hasJava = !spawnSync('java', ['-version']).error;
const hasPostgresBinaries = existsSync('/usr/lib/postgresql') || Boolean(process.env.PG_BIN_DIR);
const logger = createLogger({ name: 'consumer-faults', level: process.env.TEST_LOG_LEVEL ?? 'silent' });

describe.skipIf(!hasJava || !hasPostgresBinaries)('consumer runner under infrastructure restarts', () => {
  const dir = join(root, '.infra', 'faults', uniqueName('consumer'));
  let kafkaInstance: KafkaInstance;
  let postgresInstance: PostgresInstance;
  let brokers: string;
  let pool: Pool;

  beforeAll(async () => {
    kafkaInstance = { dir: join(dir, 'kafka'), port: await freePort(), controllerPort: await freePort() };
    postgresInstance = { dir: join(dir, 'postgres'), port: await freePort() };
    const [kafka, databaseUrl] = await Promise.all([startKafka(kafkaInstance), startOwnedPostgres(postgresInstance)]);
    brokers = kafka.brokers;
    pool = createPool({ connectionString: databaseUrl, applicationName: 'consumer-faults', max: 4, logger });
    await pool.query('CREATE TABLE IF NOT EXISTS handled (event_id uuid PRIMARY KEY, seq int NOT NULL)');
  }, 180_000);

  afterAll(async () => {
    await pool?.end().catch(() => undefined);
    await stopKafka(kafkaInstance).catch(() => undefined);
    // Purge, not only stop: as root its data lives outside `dir`, in the temp directory (issue #22).
    await purgeOwnedPostgres(postgresInstance).catch(() => undefined);
    rmSync(dir, { recursive: true, force: true });
  }, 120_000);

  it('handles every message exactly once in the database across a broker restart and a database restart', async () => {
    const kafka = createKafka({ brokers: [brokers], clientId: 'consumer-faults', logger });
    const admin = kafka.admin();
    await admin.connect();
    const topic = uniqueName('faults');
    await createTopicsSettled(admin, [
      { topic, numPartitions: 3 },
      { topic: dlqTopicOf(topic), numPartitions: 3 },
    ]);
    await admin.disconnect();

    const runner = new ConsumerRunner({
      kafka,
      groupId: uniqueName('faults_group'),
      topics: [topic],
      logger,
      chunkSize: 50,
      retry: { initialMs: 100, maxMs: 1_000 },
      handler: async (events) => {
        await withTransaction(pool, async (client) => {
          await client.query(
            'INSERT INTO handled (event_id, seq) SELECT * FROM unnest($1::uuid[], $2::int[]) ON CONFLICT DO NOTHING',
            [events.map((e) => e.event.eventId), events.map((e) => Number((e.event as StepCompleted).stepId))],
          );
        });
      },
    });
    await runner.start();

    const producer = new EventProducer(kafka);
    const sent: string[] = [];
    const produce = async (from: number, count: number) => {
      for (let i = from; i < from + count; i += 50) {
        const events: StepCompleted[] = Array.from({ length: 50 }, (_, j) => ({
          type: 'StepCompleted',
          eventId: randomUUID(),
          occurredAt: Date.now(),
          producer: 'faults',
          correlationId: 'c',
          causationId: null,
          conversationId: 'conv',
          campaignId: 'camp',
          candidateKey: `k${(i + j) % 13}`,
          stepId: String(i + j),
        }));
        // The producer itself may fail while the broker is down: retry the same batch until it lands.
        await waitFor(
          async () => {
            await producer.publish(events.map((event) => ({ topic, event })));
            return true;
          },
          { timeoutMs: 120_000, intervalMs: 500, description: 'a batch to be produced' },
        );
        sent.push(...events.map((e) => e.eventId));
      }
    };
    const handledCount = async () =>
      (await pool.query<{ n: number }>('SELECT count(*)::int AS n FROM handled')).rows[0]?.n ?? 0;

    await produce(0, 1_000);
    await waitFor(async () => (await handledCount()) >= 200, {
      timeoutMs: 60_000,
      description: 'consumption under way',
    });

    await stopKafka(kafkaInstance);
    await startKafka(kafkaInstance);
    await produce(1_000, 1_000);

    await waitFor(async () => (await handledCount()) >= 2_000, {
      timeoutMs: 120_000,
      description: 'consumption after the broker restart',
    });

    // The database goes away while messages arrive: the handler fails, and must retry, not skip.
    await stopOwnedPostgres(postgresInstance);
    await produce(2_000, 1_000);
    await waitFor(() => runner.stats.retries > 0, {
      timeoutMs: 60_000,
      description: 'the handler to meet the stopped database',
    });
    await startOwnedPostgres(postgresInstance);

    await waitFor(async () => (await handledCount()) >= 3_000, {
      timeoutMs: 180_000,
      description: 'all 3,000 events in the database',
    });
    const rows = await pool.query<{ event_id: string }>('SELECT event_id FROM handled');
    expect(new Set(rows.rows.map((r) => r.event_id))).toEqual(new Set(sent));
    expect(runner.stats.deadLettered).toBe(0);
    expect(runner.stats.retries).toBeGreaterThan(0);

    await runner.stop();
    await producer.disconnect();
  }, 600_000);
});
