/**
 * One harness for every service's integration tests: its own topic prefix (topics and DLQs
 * created), its own migrated schema, and the service either in-process (a fastify app, for
 * `inject`) or as a process (for SIGKILL, rebalances and two instances at once).
 */
import { join } from 'node:path';
import type { Static, TObject, TProperties } from '@sinclair/typebox';
import type { FastifyInstance } from 'fastify';
import pg from 'pg';
import { loadConfig, type BaseConfig } from '@outreach/shared';
import type { EmailHashKey } from '@outreach/contracts';
import { loadEmailHashKey } from '@outreach/shared';
import type { OutreachEvent } from '@outreach/contracts';
import { createKafka, type KafkaSecurity } from '@outreach/shared';
import { EventProducer } from '@outreach/shared';
import { ensureTopics, listTopicsSettled, topicName, type TopicId } from '@outreach/shared';
import { createLogger, type Logger } from '@outreach/shared';
import { migrate } from '@outreach/shared';
import { quoteIdent } from '@outreach/shared';
import { waitFor } from '@outreach/shared';
import { uniqueName } from './names.js';
import { startProcess, type RunningProcess } from './process.js';
import { dropWireFormatSubjects, wireFormatEnv, wireFormatFromEnv } from './wire-format.js';

/** The repository root (this file is packages/testkit/src/service-env.ts). */
const root = join(import.meta.dirname, '..', '..', '..');

/**
 * The emailHash key every test service gets: a fixed development key, so a test can compute the
 * hash it expects (testEmailHashKey). Production reads EMAIL_HASH_KEY_FILE.
 */
export const TEST_EMAIL_HASH_ENV = {
  EMAIL_HASH_KEY: 'test-only-email-hash-key-not-a-secret-0123456789abcdef',
  EMAIL_HASH_KEY_ID: 'test-1',
} as const;

export function testEmailHashKey(): EmailHashKey {
  return loadEmailHashKey({ ...TEST_EMAIL_HASH_ENV, EMAIL_HASH_KEY_FILE: '' });
}

/**
 * The sender's identifier key every test service gets (the MAC in its Message-IDs, ENVIDs and
 * unsubscribe tokens; ADR 012): fixed, so a test can make the identifiers it expects. Production
 * reads IDENTIFIER_KEY_FILE.
 */
export const TEST_IDENTIFIER_KEY_ENV = {
  IDENTIFIER_KEY: 'test-only-identifier-key-not-a-secret-0123456789abcdef',
  IDENTIFIER_KEY_ID: 'test-1',
} as const;

/**
 * The suppression key every test service gets (ADR 014: the keyed hash an erased address's
 * suppression is kept as): fixed, so a test can compute the hash. Production reads SUPPRESSION_KEY_FILE.
 */
export const TEST_SUPPRESSION_KEY_ENV = {
  SUPPRESSION_KEY: 'test-only-suppression-key-not-a-secret-0123456789abcdef',
} as const;

export interface ServiceUnderTest<P extends TProperties> {
  readonly name: string;
  /**
   * For in-process apps (`startApp`). A test of another service that runs this one only as a process
   * leaves these out and names its folders by path: a service's src/ is not imported from outside it.
   */
  readonly configSchema?: TObject<P>;
  readonly buildApp?: (context: {
    config: BaseConfig & Static<TObject<P>>;
    logger: Logger;
  }) => Promise<FastifyInstance>;
  readonly migrationsDir: string;
  /** The TypeScript entry file, run through tsx for process tests. */
  readonly entry: string;
}

export interface ServiceTestEnv {
  readonly env: Record<string, string>;
  readonly prefix: string;
  readonly schema: string;
  readonly databaseUrl: string;
  readonly kafka: ReturnType<typeof createKafka>;
  topic(id: TopicId): string;
  /** `fresh`: through a new client, so partitions added since are in its metadata. */
  publish(id: TopicId, events: readonly OutreachEvent[], options?: { fresh?: boolean }): Promise<void>;
  query<T extends pg.QueryResultRow>(sql: string, params?: unknown[]): Promise<T[]>;
  startApp(overrides?: Record<string, string>): Promise<FastifyInstance>;
  startProcess(overrides?: Record<string, string>): RunningProcess;
  /** Processes started so far (for diagnostics on failure). */
  readonly processes: readonly RunningProcess[];
  onCleanup(task: () => Promise<unknown>): void;
  cleanup(): Promise<void>;
}

/** Deletes every topic whose name starts with `prefix` (a test's own topics and their DLQs). */
export async function deleteTopicsWithPrefix(kafka: ReturnType<typeof createKafka>, prefix: string): Promise<void> {
  if (prefix === '') throw new Error('refusing to delete topics without a prefix');
  const admin = kafka.admin();
  await admin.connect();
  try {
    const topics = (await listTopicsSettled(admin)).filter((t) => t.startsWith(prefix));
    if (topics.length > 0) await admin.deleteTopics({ topics, timeout: 10_000 });
  } finally {
    await admin.disconnect();
  }
}

/**
 * The infrastructure a service test runs on. `kafkaSecurity`: how the test's own clients (topics,
 * publishing) log in to a secured broker; the service's process gets its KAFKA_* variables from the
 * test, since on a secured broker it connects as its own principal.
 */
export interface TestInfra {
  readonly kafkaBrokers: string;
  readonly databaseUrl: string;
  readonly kafkaSecurity?: KafkaSecurity;
}

export async function serviceTestEnv<P extends TProperties>(
  service: ServiceUnderTest<P>,
  infra: TestInfra,
  options: { env?: Record<string, string>; partitions?: number } = {},
): Promise<ServiceTestEnv> {
  const prefix = `${uniqueName(service.name.slice(0, 3))}.`;
  const schema = uniqueName(service.name);
  const security = infra.kafkaSecurity ? { security: infra.kafkaSecurity } : {};
  const kafka = createKafka({ brokers: infra.kafkaBrokers.split(','), clientId: `${service.name}-test`, ...security });
  const admin = kafka.admin();
  await admin.connect();
  await ensureTopics(admin, { prefix, partitions: options.partitions ?? 3 });
  await admin.disconnect();
  await migrate({ databaseUrl: infra.databaseUrl, schema, dir: service.migrationsDir, outbox: true });
  // The format test/wire-format.ts put this worker in; in the Confluent one, the subjects under this
  // prefix, which a service started as a process looks up at start.
  const { format, registryUrl } = wireFormatFromEnv();
  const wireFormat = await wireFormatEnv(prefix, format, registryUrl);
  const producer = new EventProducer(kafka);
  const pool = new pg.Pool({
    connectionString: infra.databaseUrl,
    options: `-c search_path=${quoteIdent(schema)}`,
    max: 3,
  });
  const apps: FastifyInstance[] = [];
  const processes: RunningProcess[] = [];
  const cleanups: Array<() => Promise<unknown>> = [];

  const env: Record<string, string> = {
    KAFKA_BROKERS: infra.kafkaBrokers,
    DATABASE_URL: infra.databaseUrl,
    DATABASE_SCHEMA: schema,
    TOPIC_PREFIX: prefix,
    CONSUMER_GROUP: uniqueName(`${service.name}_group`),
    ...TEST_EMAIL_HASH_ENV,
    ...TEST_IDENTIFIER_KEY_ENV,
    // One token holding every scope, for the behaviour tests; the route tests set scoped ones.
    API_TOKENS_PUBLISH: 'test-token',
    API_TOKENS_OPERATE: 'test-token',
    API_TOKENS_READ: 'test-token',
    API_TOKENS_DSN: 'test-token',
    API_TOKENS_ERASE: 'test-token',
    ...TEST_SUPPRESSION_KEY_ENV,
    LOG_LEVEL: process.env.TEST_LOG_LEVEL ?? 'silent',
    // Production refuses placeholder identities (the sender's From, Message-ID domain...).
    NODE_ENV: 'development',
    HTTP_HOST: '127.0.0.1',
    HTTP_PORT: '0',
    // Readiness is a cached result (service/health.ts); tests wait for it, so it refreshes often.
    READINESS_REFRESH_MS: '200',
    ...wireFormat,
    ...options.env,
  };

  return {
    env,
    prefix,
    schema,
    databaseUrl: infra.databaseUrl,
    kafka,
    processes,
    topic: (id) => topicName(id, prefix),
    async publish(id, events, publishOptions = {}) {
      const messages = events.map((event) => ({ topic: topicName(id, prefix), event }));
      if (!publishOptions.fresh) return producer.publish(messages);
      const fresh = new EventProducer(
        createKafka({ brokers: infra.kafkaBrokers.split(','), clientId: `${service.name}-test-fresh`, ...security }),
      );
      await fresh.publish(messages);
      await fresh.disconnect();
    },
    async query(sql, params = []) {
      return (await pool.query(sql, params)).rows;
    },
    async startApp(overrides = {}) {
      if (!service.configSchema || !service.buildApp)
        throw new Error(`${service.name} is declared for process tests only (no buildApp/configSchema)`);
      const config = loadConfig(service.configSchema, { ...env, ...overrides });
      const app = await service.buildApp({
        config,
        logger: createLogger({ name: service.name, level: config.LOG_LEVEL }),
      });
      await app.ready();
      apps.push(app);
      // Ready means connected and joined: tests that count time from a publish start from here.
      await waitFor(async () => (await app.inject({ url: '/health/ready' })).statusCode === 200, {
        timeoutMs: 60_000,
        intervalMs: 100,
        description: `${service.name} to report ready`,
      });
      return app;
    },
    startProcess(overrides = {}) {
      const proc = startProcess(
        service.entry,
        // The TypeScript sources run through tsx; autoload must be told it may load .ts files.
        { PATH: process.env.PATH, ...env, LOG_LEVEL: 'info', FASTIFY_AUTOLOAD_TYPESCRIPT: '1', ...overrides },
        [],
        ['--conditions=source', '--import', join(root, 'node_modules', 'tsx', 'dist', 'loader.mjs')],
      );
      processes.push(proc);
      return proc;
    },
    onCleanup(task) {
      cleanups.push(task);
    },
    async cleanup() {
      await Promise.all(processes.map((p) => p.stop('SIGKILL')));
      for (const app of apps) await app.close();
      for (const task of cleanups.reverse()) await task().catch(() => undefined);
      await producer.disconnect();
      // Each test's topics are its own (a unique prefix): deleting them keeps the broker's open
      // files bounded however many tests a run holds (see file.delete.delay.ms in scripts/infra.ts).
      await deleteTopicsWithPrefix(kafka, prefix).catch(() => undefined);
      if (format === 'confluent') await dropWireFormatSubjects(prefix, registryUrl).catch(() => undefined);
      await pool.query(`DROP SCHEMA IF EXISTS ${quoteIdent(schema)} CASCADE`).catch(() => undefined);
      await pool.end();
    },
  };
}
