/**
 * The liveness service's integration-test setup, shared by its test files: the service under test
 * on the shared infrastructure (with default graces, when given, and a sweep every 200 ms), the
 * API token the tests use, the sweeps counted, and the rebuild from the log.
 */
import { join } from 'node:path';
import { createLogger, loadSuppressionKey } from '@outreach/shared';
import type { Pool } from 'pg';
import { serviceTestEnv, TEST_SUPPRESSION_KEY_ENV, withLivePool, type ServiceTestEnv } from '@outreach/testkit';
import type { FastifyInstance } from 'fastify';
import { inject } from 'vitest';
import { buildApp, migrationsDir } from '../src/app.js';
import { ConfigSchema } from '../src/config.js';
import type { Graces } from '../src/domain/conversation.js';
import { rebuildConversations } from '../src/workflow/rebuild.js';

export const auth = { authorization: 'Bearer test-token' };

/** The service under test, on its own schema and topics; with `defaults`, those graces and a sweep every 200 ms. */
export const livenessEnv = (defaults?: Graces) =>
  serviceTestEnv(
    {
      name: 'liveness',
      configSchema: ConfigSchema,
      buildApp,
      migrationsDir,
      entry: join(import.meta.dirname, '..', 'src', 'server.ts'),
    },
    { kafkaBrokers: inject('kafkaBrokers'), databaseUrl: inject('databaseUrl') },
    defaults
      ? {
          env: {
            GRACE_INBOUND_MS: String(defaults.inboundMs),
            GRACE_OUTBOUND_MS: String(defaults.outboundMs),
            GRACE_OVERDUE_MS: String(defaults.overdueMs),
            REPLY_WINDOW_MS: String(defaults.replyWindowMs),
            SWEEP_INTERVAL_MS: '200',
          },
        }
      : {},
  );

/** How many sweeps the app has run, from its metrics. */
export async function sweepsDone(app: FastifyInstance): Promise<number> {
  const body = (await app.inject({ url: '/metrics' })).body;
  return Number(/^outreach_liveness_sweeps_total\{[^}]*\} (\d+)/m.exec(body)?.[1] ?? 0);
}

/** Rebuilds the conversations from both topics with `defaults` and compares them with the live projection. */
export const rebuildFromLog = (t: ServiceTestEnv, defaults: Graces, inspect?: (pool: Pool) => Promise<void>) =>
  withLivePool(t, (livePool) =>
    rebuildConversations({
      kafka: t.kafka,
      topics: [t.topic('conversationEvents'), t.topic('sendRecorded')],
      databaseUrl: t.databaseUrl,
      livePool,
      migrationsDir,
      defaults,
      logger: createLogger({ name: 'rebuild', level: 'silent' }),
      suppressionKey: loadSuppressionKey({ ...TEST_SUPPRESSION_KEY_ENV, SUPPRESSION_KEY_FILE: '' }),
      ...(inspect ? { inspect } : {}),
    }),
  );
