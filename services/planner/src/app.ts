import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { buildServiceApp, type Logger } from '@outreach/shared';
import type { FastifyInstance } from 'fastify';
import type { Config } from './config.js';

export type { Config } from './config.js';

const here = dirname(fileURLToPath(import.meta.url));
export const migrationsDir = join(here, '..', 'migrations');

/** Builds the planner without listening, so tests can `inject` requests. */
export async function buildApp({ config, logger }: { config: Config; logger: Logger }): Promise<FastifyInstance> {
  return buildServiceApp({ name: 'planner', dir: here, logger, config });
}
