import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { brokerList, buildHttpApp, tokenList, type BaseConfig, type Logger } from '@outreach/shared';
import type { Static } from '@sinclair/typebox';
import type { FastifyInstance } from 'fastify';
import type { ConfigSchema } from './config.js';

export type Config = BaseConfig & Static<typeof ConfigSchema>;

const here = dirname(fileURLToPath(import.meta.url));

/** Builds the sender service without listening, so tests can `inject` requests. */
export async function buildApp({ config, logger }: { config: Config; logger: Logger }): Promise<FastifyInstance> {
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
