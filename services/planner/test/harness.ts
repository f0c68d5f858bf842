/**
 * The planner's test harness: the shared service harness for the planner (and for the experiment
 * service it calls, run as a process), and the one OutreachRequested builder its tests publish.
 */
import { randomUUID } from 'node:crypto';
import { join } from 'node:path';
import type { OutreachRequested } from '@outreach/contracts';
import { serviceTestEnv, type ServiceTestEnv } from '@outreach/testkit';
import { buildApp, migrationsDir } from '../src/app.js';
import { ConfigSchema } from '../src/config.js';

type Infra = { kafkaBrokers: string; databaseUrl: string };

/** The planner, in-process (startApp) or as a process from its server.ts (startProcess). */
export const plannerService = {
  name: 'planner',
  configSchema: ConfigSchema,
  buildApp,
  migrationsDir,
  entry: join(import.meta.dirname, '../src/server.ts'),
};

export function plannerTestEnv(infra: Infra, env: Record<string, string>): Promise<ServiceTestEnv> {
  return serviceTestEnv(plannerService, infra, { env });
}

/** The experiment service: another service, run as a process from its folder, never imported (the lint boundary). */
export function experimentTestEnv(infra: Infra): Promise<ServiceTestEnv> {
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
 * An OutreachRequested as the ATS publishes it: a fresh event and request id, one intro step in
 * campaign `camp` to the candidate's own address, no experiment, schedule or follow-up; `fields` over that.
 */
export function outreachRequested(fields: Partial<OutreachRequested> & { candidateId: string }): OutreachRequested {
  return {
    type: 'OutreachRequested',
    eventId: randomUUID(),
    occurredAt: Date.now(),
    producer: 'ats',
    correlationId: randomUUID(),
    causationId: null,
    requestId: randomUUID(),
    campaignId: 'camp',
    email: `${fields.candidateId}@example.com`,
    step: 'intro',
    experimentId: null,
    contents: [{ variant: null, subject: 'Hello', body: 'Would you like to talk?' }],
    sendAt: null,
    conversationId: null,
    followUps: [],
    ...fields,
  };
}
