/**
 * The experiment service's integration-test setup, shared by its test files: the service under test
 * on the shared infrastructure, the API token the tests use, the requests and events the tests
 * make, and the replay of the exposure projection.
 */
import { join } from 'node:path';
import { createLogger, loadSuppressionKey } from '@outreach/shared';
import type { Pool } from 'pg';
import type { SendRecorded } from '@outreach/contracts';
import {
  sendRecordedEvent,
  serviceTestEnv,
  TEST_SUPPRESSION_KEY_ENV,
  withLivePool,
  type ServiceTestEnv,
} from '@outreach/testkit';
import type { FastifyInstance } from 'fastify';
import { inject } from 'vitest';
import { buildApp, migrationsDir } from '../src/app.js';
import { ConfigSchema } from '../src/config.js';
import { replayExposures } from '../src/workflow/replay.js';

export const auth = { authorization: 'Bearer test-token' };

/** The service under test, on its own schema and topics. */
export const experimentEnv = () =>
  serviceTestEnv(
    {
      name: 'experiment',
      configSchema: ConfigSchema,
      buildApp,
      migrationsDir,
      entry: join(import.meta.dirname, '..', 'src', 'server.ts'),
    },
    { kafkaBrokers: inject('kafkaBrokers'), databaseUrl: inject('databaseUrl') },
  );

/** Replays the exposures and replies from the service's topics and compares them with its live projections. */
export const replayFromLog = (
  t: ServiceTestEnv,
  options: { timeoutMs?: number; inspect?: (pool: Pool) => Promise<void> } = {},
) =>
  withLivePool(t, (livePool) =>
    replayExposures({
      kafka: t.kafka,
      topic: t.topic('sendRecorded'),
      repliesTopic: t.topic('conversationEvents'),
      databaseUrl: t.databaseUrl,
      livePool,
      migrationsDir,
      logger: createLogger({ name: 'replay', level: 'silent' }),
      suppressionKey: loadSuppressionKey({ ...TEST_SUPPRESSION_KEY_ENV, SUPPRESSION_KEY_FILE: '' }),
      ...options,
    }),
  );

/** POST /v1/experiments with the test token. */
export const createExperiment = (app: FastifyInstance, body: Record<string, unknown>) =>
  app.inject({ method: 'POST', url: '/v1/experiments', headers: auth, payload: body });

/** POST /v1/experiments/:id/assignments for a batch of candidates, with the test token. */
export const postAssignments = (app: FastifyInstance, experimentId: string, candidateIds: readonly string[]) =>
  app.inject({
    method: 'POST',
    url: `/v1/experiments/${experimentId}/assignments`,
    headers: auth,
    payload: { candidateIds },
  });

/** PUT /v1/experiments/:id/assignments/:candidate (the candidate as it goes in the path), with the test token. */
export const putAssignment = (app: FastifyInstance, experimentId: string, candidateInPath: string) =>
  app.inject({ method: 'PUT', url: `/v1/experiments/${experimentId}/assignments/${candidateInPath}`, headers: auth });

/** A SendRecorded of campaign `camp` for a candidate in an experiment's variant, sent now. */
export const sendRecorded = (fields: {
  experimentId: string;
  candidateKey: string;
  variant: string;
  step: string;
}): SendRecorded => sendRecordedEvent({ campaignId: 'camp', emailHash: 'hash', ...fields });
