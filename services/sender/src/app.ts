import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { brokerList, buildHttpApp, tokenList, type Logger } from '@outreach/shared';
import type { FastifyInstance } from 'fastify';
import { checkConfig, type Config } from './config.js';

export type { Config } from './config.js';

const here = dirname(fileURLToPath(import.meta.url));
export const migrationsDir = join(here, '..', 'migrations');

/** Builds the sender without listening, so tests can `inject` requests. */
export async function buildApp({ config, logger }: { config: Config; logger: Logger }): Promise<FastifyInstance> {
  checkConfig(config);
  return buildHttpApp({
    name: 'sender',
    logger,
    postgres: { connectionString: config.DATABASE_URL, applicationName: 'sender', schema: config.DATABASE_SCHEMA },
    kafka: { brokers: brokerList(config.KAFKA_BROKERS), clientId: 'sender' },
    apiTokens: tokenList(config.API_TOKENS),
    pluginsDir: join(here, 'plugins'),
    routesDir: join(here, 'routes'),
    options: { config },
  });
}
