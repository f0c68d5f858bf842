/**
 * `/health/live` and `/health/ready` tell the truth, each failure made to happen for real against
 * the real broker and database: a consumer kafkajs crashes for good (the broker refuses its join),
 * a periodic task whose run waits on a lock forever, an outbox relay whose connection stops
 * answering mid-session (a TCP proxy that stops forwarding, as a network partition does), and a
 * relay whose connection is killed (it reconnects: alive, and says so).
 */
import type { FastifyInstance } from 'fastify';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { createKafka } from '../kafka/client.js';
import { createTopicsSettled, dlqTopicOf } from '../kafka/topics.js';
import { createLogger } from '../logger.js';
import { enqueueEvents } from '../outbox/outbox.js';
import { migrate, sharedMigrationsDir } from '../pg/migrate.js';
import { stepCompleted } from '../../test/fixtures/events.js';
import { isolatedSchema, tcpProxy, type IsolatedSchema } from '@outreach/testkit';
import { uniqueName } from '@outreach/testkit';
import { waitFor } from '../wait.js';
import { buildHttpApp } from './http.js';
import { PeriodicTask } from './periodic.js';
import { registerConsumer, registerOutboxRelay, registerPeriodicTask } from './workers.js';

const brokers = inject('kafkaBrokers');
const databaseUrl = inject('databaseUrl');
const logger = createLogger({ name: 'health-test', level: 'silent' });
const kafka = createKafka({ brokers: brokers.split(','), clientId: 'health-test' });
const admin = kafka.admin();
const cleanups: Array<() => Promise<unknown>> = [];

beforeAll(async () => {
  await admin.connect();
});
afterAll(async () => {
  for (const cleanup of cleanups.reverse()) await cleanup().catch(() => undefined);
  await admin.disconnect();
});

async function app(options: { postgres?: IsolatedSchema; kafka?: boolean }): Promise<FastifyInstance> {
  const built = await buildHttpApp({
    name: 'health-test',
    logger,
    ...(options.postgres
      ? {
          postgres: { connectionString: databaseUrl, applicationName: 'health-test', schema: options.postgres.schema },
        }
      : {}),
    ...(options.kafka ? { kafka: { brokers: brokers.split(','), clientId: 'health-test' } } : {}),
    readiness: { refreshMs: 200 },
  });
  cleanups.push(() => built.close());
  return built;
}

async function outboxSchema(): Promise<IsolatedSchema> {
  const isolated = await isolatedSchema(databaseUrl, 'health');
  await migrate({ databaseUrl, schema: isolated.schema, dir: sharedMigrationsDir });
  cleanups.push(() => isolated.drop());
  return isolated;
}

const probe = async (target: FastifyInstance, path: '/health/live' | '/health/ready') => {
  const response = await target.inject({ method: 'GET', url: path });
  return { status: response.statusCode, body: response.json() as { checks?: Record<string, string> } };
};

/** The first `/health/live` answer that is a 503, within `timeoutMs`. */
const unhealthy = (target: FastifyInstance, timeoutMs: number) =>
  waitFor(
    async () => {
      const result = await probe(target, '/health/live');
      return result.status === 503 ? result : undefined;
    },
    { timeoutMs, description: '/health/live to answer 503' },
  );

/** Waits (10 s at most) until `/health/live` answers 200 again and `and` holds. */
const aliveAgain = (target: FastifyInstance, and: () => boolean, description: string) =>
  waitFor(async () => (await probe(target, '/health/live')).status === 200 && and(), {
    timeoutMs: 10_000,
    description,
  });

/** A TCP proxy in front of PostgreSQL (closed after the tests) and the database URL through it. */
async function proxiedDatabase() {
  const proxy = await tcpProxy(Number(new URL(databaseUrl).port || 5432), new URL(databaseUrl).hostname);
  cleanups.push(() => proxy.close());
  const viaProxy = new URL(databaseUrl);
  viaProxy.port = String(proxy.port);
  return { proxy, url: viaProxy.toString() };
}

/**
 * An outbox schema, a fresh one-partition topic and an app whose outbox relay (polling every 50 ms,
 * on `databaseUrl` unless another is given) is active.
 */
async function relayOnApp(
  prefix: string,
  options: { databaseUrl?: string; queryTimeoutMs?: number; stallAfterMs?: number },
) {
  const schema = await outboxSchema();
  const topic = uniqueName(prefix);
  await createTopicsSettled(admin, [{ topic, numPartitions: 1 }]);
  const target = await app({ postgres: schema, kafka: true });
  const relay = registerOutboxRelay(target, { databaseUrl, schema: schema.schema, pollIntervalMs: 50, ...options });
  await target.ready();
  await waitFor(() => relay.active, { timeoutMs: 10_000, description: 'the relay active' });
  return { schema, topic, target, relay };
}

describe('health', () => {
  it('liveness and readiness fail when kafkajs crashes a consumer and will not restart it', async () => {
    const topic = uniqueName('health_crash');
    await createTopicsSettled(
      admin,
      [topic, dlqTopicOf(topic)].map((name) => ({ topic: name, numPartitions: 1 })),
    );
    const target = await app({ kafka: true });
    const groupId = uniqueName('health_group');
    // The broker refuses a session timeout under its group.min.session.timeout.ms (6 s by default):
    // INVALID_SESSION_TIMEOUT is not retriable, so kafkajs emits CRASH with restart: false.
    const runner = registerConsumer(target, {
      groupId,
      topics: [topic],
      sessionTimeoutMs: 1_000,
      handler: async () => undefined,
    });
    await target.ready();
    const live = await unhealthy(target, 30_000);
    // The answer names the check and gives a code; the reason (the group, the broker's error) is logged.
    expect(live.body.checks).toEqual({ 'consumer-1': 'dead' });
    expect(runner.liveness()).toMatch(/crashed and will not restart: .*session timeout/i);
    expect(runner.stats.crashes).toBeGreaterThanOrEqual(1);
    const ready = await waitFor(
      async () => {
        const answer = await probe(target, '/health/ready');
        return answer.status === 503 && answer.body.checks?.['consumer-1'] === 'crashed' ? answer : undefined;
      },
      { timeoutMs: 5_000, description: 'readiness to report the crash' },
    );
    expect(JSON.stringify(ready.body)).not.toContain(groupId);
  });

  it('readiness waits for the group join; liveness holds while a healthy consumer runs', async () => {
    const topic = uniqueName('health_join');
    await createTopicsSettled(
      admin,
      [topic, dlqTopicOf(topic)].map((name) => ({ topic: name, numPartitions: 1 })),
    );
    const target = await app({ kafka: true });
    const groupId = uniqueName('health_group');
    const runner = registerConsumer(target, { groupId, topics: [topic], handler: async () => undefined });
    expect((await probe(target, '/health/ready')).body.checks?.['consumer-1']).toBe('not_joined');
    await target.ready();
    await waitFor(async () => (await probe(target, '/health/ready')).status === 200, {
      timeoutMs: 30_000,
      description: 'ready once the consumer joined',
    });
    expect(runner.joined).toBe(true);
    expect((await probe(target, '/health/live')).status).toBe(200);
  });

  it('liveness fails while a periodic task is stuck in a run (waiting on a lock), and recovers when the run ends', async () => {
    const schema = await outboxSchema();
    const target = await app({ postgres: schema });
    const key = Math.floor(Math.random() * 1e9);
    const holder = new pg.Client({ connectionString: databaseUrl });
    await holder.connect();
    cleanups.push(() => holder.end());
    await holder.query('SELECT pg_advisory_lock($1)', [key]);
    let runs = 0;
    registerPeriodicTask(
      target,
      new PeriodicTask(
        'locked sweep',
        async () => {
          runs++;
          // Waits as long as the holder keeps the lock: no statement timeout is set.
          await target.pg.query('SELECT pg_advisory_xact_lock($1)', [key]);
        },
        50,
        logger,
        { stallAfterMs: 1_000 },
      ),
    );
    await target.ready();
    expect((await probe(target, '/health/live')).status).toBe(200);
    const live = await unhealthy(target, 10_000);
    expect(live.body.checks).toEqual({ 'task:locked sweep': 'dead' });
    expect(target.liveness.get('task:locked sweep')?.()).toMatch(/a run has been going for \d+ s/);
    expect(runs).toBe(1);

    await holder.query('SELECT pg_advisory_unlock($1)', [key]);
    await aliveAgain(target, () => runs >= 3, 'alive again, and running');
  });

  it('liveness fails while the outbox relay is stuck on a connection that stopped answering, and recovers when it answers', async () => {
    const { proxy, url } = await proxiedDatabase();
    const { schema, topic, target, relay } = await relayOnApp('health_relay', {
      databaseUrl: url,
      // The query timeout (the relay's own cure) is longer than the watchdog here, to see the watchdog.
      queryTimeoutMs: 60_000,
      stallAfterMs: 1_500,
    });
    await enqueueEvents(schema.pool, [{ topic, event: stepCompleted(1) }]);
    await waitFor(() => relay.stats.published >= 1, { timeoutMs: 10_000, description: 'the first event published' });
    expect((await probe(target, '/health/live')).status).toBe(200);

    proxy.freeze();
    const live = await unhealthy(target, 10_000);
    expect(live.body.checks).toEqual({ 'outbox-relay': 'dead' });
    expect(relay.liveness()).toMatch(/outbox relay stalled: no progress for \d+ s/);

    proxy.thaw();
    await enqueueEvents(schema.pool, [{ topic, event: stepCompleted(2) }]);
    await aliveAgain(target, () => relay.stats.published >= 2, 'alive again, and publishing');
  });

  it('a relay whose connection goes silent gives it up after its query timeout and reconnects on its own', async () => {
    const { proxy, url } = await proxiedDatabase();
    const { schema, topic, target, relay } = await relayOnApp('health_silent', {
      databaseUrl: url,
      queryTimeoutMs: 1_000,
    });

    // The open connection never answers again (no RST, no FIN); new ones work.
    proxy.blackholeExisting();
    await enqueueEvents(schema.pool, [{ topic, event: stepCompleted(1) }]);
    await waitFor(() => relay.stats.published >= 1, {
      timeoutMs: 15_000,
      description: 'the event published over a new connection',
    });
    expect((await probe(target, '/health/live')).status).toBe(200);
  });

  it('a relay whose connection is killed reconnects and keeps publishing, and stays alive throughout', async () => {
    const { schema, topic, target, relay } = await relayOnApp('health_kill', { stallAfterMs: 1_500 });
    const backend = async () =>
      (
        await schema.pool.query<{ pid: number }>(
          `SELECT pid FROM pg_stat_activity WHERE application_name = $1 AND state IS NOT NULL`,
          [`outbox-relay-${schema.schema}`],
        )
      ).rows.map((r) => r.pid);
    const [first] = await backend();
    expect(first).toBeGreaterThan(0);

    const statuses: number[] = [];
    for (let kill = 0; kill < 3; kill++) {
      const [pid] = await waitFor(
        async () => {
          const pids = await backend();
          return pids.length === 1 && pids[0] !== undefined ? pids : undefined;
        },
        { timeoutMs: 10_000, description: 'one relay session' },
      );
      await schema.pool.query('SELECT pg_terminate_backend($1)', [pid]);
      await enqueueEvents(schema.pool, [{ topic, event: stepCompleted(kill) }]);
      await waitFor(
        async () => {
          statuses.push((await probe(target, '/health/live')).status);
          return relay.stats.published >= kill + 1;
        },
        { timeoutMs: 15_000, description: `event ${kill} published after the kill` },
      );
    }
    expect(statuses.length).toBeGreaterThan(3);
    expect(new Set(statuses)).toEqual(new Set([200]));
    const [last] = await backend();
    expect(last).not.toBe(first);
    expect(relay.liveness()).toBeUndefined();
  });
});
