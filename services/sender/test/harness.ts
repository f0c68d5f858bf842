/**
 * Test harness for the sender: an isolated schema and topic prefix per spec, a real SMTP sink, and
 * the sender either in-process (fastify app) or as its own process (for SIGKILL and rebalances).
 */
import { randomUUID } from 'node:crypto';
import { join } from 'node:path';
import {
  createKafka,
  createLogger,
  ensureTopics,
  EventProducer,
  loadConfig,
  migrate,
  normalizeCandidateKey,
  normalizeEmail,
  quoteIdent,
  sendIdFor,
  topicName,
  type SendRequested,
} from '@outreach/shared';
import {
  SmtpSink,
  startProcess,
  uniqueName,
  type RunningProcess,
  type SmtpSinkOptions,
} from '@outreach/shared/testing';
import type { FastifyInstance } from 'fastify';
import pg from 'pg';
import { buildApp, migrationsDir } from '../src/app.js';
import { ConfigSchema } from '../src/config.js';

const root = join(import.meta.dirname, '..', '..', '..');
export const API_TOKEN = 'sender-test-token';

export interface SenderTestEnv {
  readonly env: Record<string, string>;
  readonly sink: SmtpSink;
  readonly kafka: ReturnType<typeof createKafka>;
  readonly prefix: string;
  readonly schema: string;
  readonly databaseUrl: string;
  /** `fresh`: through a new client, so partitions added since are in its metadata. */
  publish(requests: readonly SendRequested[], options?: { fresh?: boolean }): Promise<void>;
  query<T extends pg.QueryResultRow>(sql: string, params?: unknown[]): Promise<T[]>;
  startApp(overrides?: Record<string, string>): Promise<FastifyInstance>;
  startProcess(overrides?: Record<string, string>): RunningProcess;
  cleanup(): Promise<void>;
}

export async function senderTestEnv(
  infra: { kafkaBrokers: string; databaseUrl: string },
  options: { sink?: SmtpSinkOptions; env?: Record<string, string>; partitions?: number } = {},
): Promise<SenderTestEnv> {
  const prefix = `${uniqueName('snd')}.`;
  const schema = uniqueName('sender');
  const kafka = createKafka({ brokers: infra.kafkaBrokers.split(','), clientId: 'sender-test' });
  const admin = kafka.admin();
  await admin.connect();
  await ensureTopics(admin, { prefix, partitions: options.partitions ?? 3 });
  await admin.disconnect();
  await migrate({ databaseUrl: infra.databaseUrl, schema, dir: migrationsDir, outbox: true });
  const sink = await new SmtpSink(options.sink ?? {}).start();
  const producer = new EventProducer(kafka);
  const pool = new pg.Pool({
    connectionString: infra.databaseUrl,
    options: `-c search_path=${quoteIdent(schema)}`,
    max: 3,
  });
  const apps: FastifyInstance[] = [];
  const processes: RunningProcess[] = [];

  const env: Record<string, string> = {
    KAFKA_BROKERS: infra.kafkaBrokers,
    DATABASE_URL: infra.databaseUrl,
    DATABASE_SCHEMA: schema,
    TOPIC_PREFIX: prefix,
    CONSUMER_GROUP: uniqueName('sender_group'),
    SMTP_HOST: '127.0.0.1',
    SMTP_PORT: String(sink.port),
    API_TOKENS: API_TOKEN,
    LEASE_MS: '6000',
    PROVIDER_TIMEOUT_MS: '2000',
    RECONCILE_INTERVAL_MS: '300',
    RETRY_BACKOFF_MS: '100',
    SEND_RATE_PER_SECOND: '1000',
    LOG_LEVEL: process.env.TEST_LOG_LEVEL ?? 'silent',
    HTTP_HOST: '127.0.0.1',
    HTTP_PORT: '0',
    ...options.env,
  };

  return {
    env,
    sink,
    kafka,
    prefix,
    schema,
    databaseUrl: infra.databaseUrl,
    async publish(requests, publishOptions = {}) {
      const messages = requests.map((event) => ({ topic: topicName('sendRequested', prefix), event }));
      if (!publishOptions.fresh) return producer.publish(messages);
      const fresh = new EventProducer(
        createKafka({ brokers: infra.kafkaBrokers.split(','), clientId: 'sender-test-fresh' }),
      );
      await fresh.publish(messages);
      await fresh.disconnect();
    },
    async query(sql, params = []) {
      return (await pool.query(sql, params)).rows;
    },
    async startApp(overrides = {}) {
      const config = loadConfig(ConfigSchema, { ...env, ...overrides });
      const app = await buildApp({ config, logger: createLogger({ name: 'sender', level: config.LOG_LEVEL }) });
      await app.ready();
      apps.push(app);
      return app;
    },
    startProcess(overrides = {}) {
      const proc = startProcess(
        join(root, 'services', 'sender', 'src', 'server.ts'),
        // Runs the TypeScript sources through tsx; autoload must be told it may load .ts files.
        { PATH: process.env.PATH, ...env, LOG_LEVEL: 'info', FASTIFY_AUTOLOAD_TYPESCRIPT: '1', ...overrides },
        [],
        ['--conditions=source', '--import', join(root, 'node_modules', 'tsx', 'dist', 'loader.mjs')],
      );
      processes.push(proc);
      return proc;
    },
    async cleanup() {
      await Promise.all(processes.map((p) => p.stop('SIGKILL')));
      for (const app of apps) await app.close();
      await producer.disconnect();
      await sink.stop();
      await pool.query(`DROP SCHEMA IF EXISTS ${quoteIdent(schema)} CASCADE`).catch(() => undefined);
      await pool.end();
    },
  };
}

let sequence = 0;

/** A SendRequested as the planner would emit it: keys derived from the raw fields. */
export function sendRequested(fields: {
  campaignId: string;
  candidateId: string;
  email: string;
  step?: string;
  subject?: string;
  body?: string;
  experimentId?: string;
  variant?: string;
}): SendRequested {
  const step = fields.step ?? 'intro';
  const candidateKey = normalizeCandidateKey(fields.candidateId);
  return {
    type: 'SendRequested',
    eventId: randomUUID(),
    occurredAt: Date.now(),
    producer: 'test',
    correlationId: `corr-${++sequence}`,
    causationId: null,
    sendId: sendIdFor(fields.campaignId, candidateKey, step),
    requestId: `req-${sequence}`,
    campaignId: fields.campaignId,
    candidateId: fields.candidateId,
    candidateKey,
    email: fields.email,
    emailNorm: normalizeEmail(fields.email),
    step,
    experimentId: fields.experimentId ?? null,
    variant: fields.variant ?? null,
    subject: fields.subject ?? `Hello ${fields.candidateId}`,
    body: fields.body ?? 'We would like to talk.',
    scheduledFor: null,
  };
}

/** Counts, per recipient address (case-insensitive), how many emails the sink received. */
export function deliveriesByRecipient(sink: SmtpSink): Map<string, number> {
  const counts = new Map<string, number>();
  for (const message of sink.messages) {
    for (const to of message.to) counts.set(to.toLowerCase(), (counts.get(to.toLowerCase()) ?? 0) + 1);
  }
  return counts;
}
