/**
 * The sender's test harness: the shared service harness plus a real SMTP sink the sender delivers to.
 */
import { spawnSync } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { join } from 'node:path';
import { candidateKeyFor, normalizeEmail, sendIdFor, type SendRequested } from '@outreach/contracts';
import { migrate } from '@outreach/shared';
import {
  isolatedSchema,
  serviceTestEnv,
  SmtpSink,
  TEST_EMAIL_HASH_ENV,
  TEST_IDENTIFIER_KEY_ENV,
  testEmailHashKey,
  type IsolatedSchema,
  type ServiceTestEnv,
  type SmtpSinkOptions,
  type TestInfra,
} from '@outreach/testkit';
import { buildApp, migrationsDir } from '../src/app.js';
import { ConfigSchema } from '../src/config.js';
import { SendIdentifiers } from '../src/domain/identifiers.js';

export const API_TOKEN = 'test-token';

/** The identifiers a sender under the harness's key makes (TEST_IDENTIFIER_KEY_ENV). */
export const testIdentifiers = new SendIdentifiers({
  current: {
    id: TEST_IDENTIFIER_KEY_ENV.IDENTIFIER_KEY_ID,
    material: Buffer.from(TEST_IDENTIFIER_KEY_ENV.IDENTIFIER_KEY),
  },
});

/** The Message-ID such a sender gives send `sendId` (MESSAGE_ID_DOMAIN `domain`). */
export const messageIdOf = (sendId: string, domain = 'outreach.local'): string =>
  testIdentifiers.messageId(sendId, domain, testIdentifiers.currentKeyId) as string;

export interface SenderTestEnv extends ServiceTestEnv {
  readonly sink: SmtpSink;
  publishRequests(requests: readonly SendRequested[], options?: { fresh?: boolean }): Promise<void>;
}

export async function senderTestEnv(
  infra: TestInfra,
  options: { sink?: SmtpSinkOptions; env?: Record<string, string>; partitions?: number } = {},
): Promise<SenderTestEnv> {
  const sink = await new SmtpSink(options.sink ?? {}).start();
  const base = await serviceTestEnv(
    {
      name: 'sender',
      configSchema: ConfigSchema,
      buildApp,
      migrationsDir,
      entry: join(import.meta.dirname, '..', 'src', 'server.ts'),
    },
    infra,
    {
      partitions: options.partitions ?? 3,
      env: {
        SMTP_HOST: '127.0.0.1',
        // The sink offers no TLS unless a test gives it a certificate (smtp-tls.int.test.ts).
        SMTP_REQUIRE_TLS: 'false',
        SMTP_PORT: String(sink.port),
        LEASE_MS: '6000',
        PROVIDER_TIMEOUT_MS: '2000',
        RECONCILE_INTERVAL_MS: '300',
        RETRY_BACKOFF_MS: '100',
        SEND_RATE_PER_SECOND: '1000',
        ...options.env,
      },
    },
  );
  base.onCleanup(() => sink.stop());
  return Object.assign(base, {
    sink,
    publishRequests: (requests: readonly SendRequested[], publishOptions?: { fresh?: boolean }) =>
      base.publish('sendRequested', requests, publishOptions),
  });
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
  conversationId?: string;
}): SendRequested {
  const step = fields.step ?? 'intro';
  // The test key is every test service's: an address as candidate id gets the key the sender derives.
  const candidateKey = candidateKeyFor(fields.candidateId, testEmailHashKey());
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
    conversationId: fields.conversationId ?? null,
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

export interface BackfillRun {
  readonly status: number | null;
  readonly stdout: string;
  readonly stderr: string;
}

const root = join(import.meta.dirname, '..', '..', '..');

/**
 * The backfill CLI (src/cli/backfill.ts) run as a process on `file` against the test env's schema,
 * with the test email hash key; `env` adds to its environment.
 */
export function runBackfill(
  t: SenderTestEnv,
  file: string,
  args: readonly string[] = [],
  env: Record<string, string> = {},
): BackfillRun {
  const run = spawnSync(
    process.execPath,
    [
      '--conditions=source',
      '--import',
      join(root, 'node_modules/tsx/dist/loader.mjs'),
      join(root, 'services/sender/src/cli/backfill.ts'),
      '--file',
      file,
      ...args,
    ],
    {
      env: {
        PATH: process.env.PATH,
        DATABASE_URL: t.databaseUrl,
        DATABASE_SCHEMA: t.schema,
        ...env,
        ...TEST_EMAIL_HASH_ENV,
      },
      encoding: 'utf8',
    },
  );
  return { status: run.status, stdout: run.stdout, stderr: run.stderr };
}

/** A schema of its own on `databaseUrl`, with the sender's migrations applied (and the outbox). */
export async function migratedSenderSchema(databaseUrl: string, prefix: string): Promise<IsolatedSchema> {
  const db = await isolatedSchema(databaseUrl, prefix);
  await migrate({ databaseUrl, schema: db.schema, dir: migrationsDir, outbox: true });
  return db;
}
