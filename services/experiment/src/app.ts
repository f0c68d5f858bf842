import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { brokerList, buildHttpApp, tokenList, type Logger } from '@outreach/shared';
import type { FastifyInstance } from 'fastify';
import type { Config } from './config.js';

export type { Config } from './config.js';

const here = dirname(fileURLToPath(import.meta.url));
export const migrationsDir = join(here, '..', 'migrations');

/** Builds the experiment service without listening, so tests can `inject` requests. */
export async function buildApp({ config, logger }: { config: Config; logger: Logger }): Promise<FastifyInstance> {
  return buildHttpApp({
    name: 'experiment',
    logger,
    postgres: { connectionString: config.DATABASE_URL, applicationName: 'experiment', schema: config.DATABASE_SCHEMA },
    kafka: { brokers: brokerList(config.KAFKA_BROKERS), clientId: 'experiment' },
    apiTokens: tokenList(config.API_TOKENS),
    pluginsDir: join(here, 'plugins'),
    routesDir: join(here, 'routes'),
    options: { config },
  });
}
