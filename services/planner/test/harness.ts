/**
 * The planner's test harness: the shared service harness for the planner (and for the experiment
 * service it calls, run as a process), and the OutreachRequested its tests publish.
 */
import { randomUUID } from 'node:crypto';
import { join } from 'node:path';
import type { OutreachRequested } from '@outreach/contracts';
import { ownService, serviceTestEnv, type ServiceTestEnv } from '@outreach/testkit';
import { inject } from 'vitest';
import { buildApp, migrationsDir } from '../src/app.js';
import { ConfigSchema } from '../src/config.js';
import { requestEvent } from './requests.js';

/** The broker and database the int project's global setup provides. */
export const infra = { kafkaBrokers: inject('kafkaBrokers'), databaseUrl: inject('databaseUrl') };
/** The harness's token: serviceTestEnv gives it every scope. */
export const auth = { authorization: 'Bearer test-token' };

/** The planner, in-process (startApp) or as a process from its server.ts (startProcess). */
const plannerService = ownService(import.meta.dirname, {
  name: 'planner',
  configSchema: ConfigSchema,
  buildApp,
  migrationsDir,
});

export function plannerTestEnv(env: Record<string, string>): Promise<ServiceTestEnv> {
  return serviceTestEnv(plannerService, infra, { env });
}

/** The experiment service: another service, run as a process from its folder, never imported (the lint boundary). */
export function experimentTestEnv(): Promise<ServiceTestEnv> {
  return serviceTestEnv(
    {
      name: 'experiment',
      migrationsDir: join(import.meta.dirname, '../../experiment/migrations'),
      entry: join(import.meta.dirname, '../../experiment/src/server.ts'),
    },
    infra,
  );
}

/**
 * Defines experiment `experimentId` on the experiment service at `url`, variants A and B at one weight
 * each (`status` when given), with the harness's token (it holds operate).
 */
export function defineExperiment(url: string, experimentId: string, status?: string): Promise<Response> {
  return fetch(`${url}/v1/experiments`, {
    method: 'POST',
    headers: { ...auth, 'content-type': 'application/json' },
    body: JSON.stringify({
      experimentId,
      status,
      variants: [
        { name: 'A', weight: 1 },
        { name: 'B', weight: 1 },
      ],
    }),
  });
}

/**
 * An OutreachRequested as the ATS publishes it (requestEvent with fresh ids, now): one intro step in
 * campaign `camp` to the candidate's own address, no experiment, schedule or follow-up; `fields` over that.
 */
export function outreachRequested(fields: Partial<OutreachRequested> & { candidateId: string }): OutreachRequested {
  return requestEvent({
    eventId: randomUUID(),
    occurredAt: Date.now(),
    correlationId: randomUUID(),
    requestId: randomUUID(),
    email: `${fields.candidateId}@example.com`,
    contents: [{ variant: null, subject: 'Hello', body: 'Would you like to talk?' }],
    ...fields,
  });
}
