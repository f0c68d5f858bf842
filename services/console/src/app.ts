import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { buildHttpApp, type Logger } from '@outreach/shared';
import type { FastifyInstance } from 'fastify';
import type { Config } from './config.js';

export type { Config } from './config.js';

const here = dirname(fileURLToPath(import.meta.url));
export const migrationsDir = join(here, '..', 'migrations');

/**
 * Builds the console without listening, so tests can `inject` requests. It shares the services'
 * HTTP shell (health, metrics, limits, timeouts) with PostgreSQL for its audit table and none of the
 * shell's Kafka (the dead-letter pages make their own client, adapters/dead-letters.ts);
 * its routes are pages, whose access the console plugin decides (plugins/console.ts), so none takes
 * a bearer token of the shell's: they are `public` to it.
 */
export async function buildApp({ config, logger }: { config: Config; logger: Logger }): Promise<FastifyInstance> {
  return buildHttpApp({
    name: 'console',
    logger,
    postgres: {
      connectionString: config.DATABASE_URL,
      applicationName: 'console',
      schema: config.DATABASE_SCHEMA,
      ...(config.DATABASE_SESSION_URL ? { sessionConnectionString: config.DATABASE_SESSION_URL } : {}),
    },
    rateLimit: { max: config.RATE_LIMIT_MAX, windowMs: config.RATE_LIMIT_WINDOW_MS },
    // The console reads its proxy's headers itself (plugins/console.ts); fastify believes no proxy.
    trustProxy: '',
    timeouts: { requestMs: config.HTTP_REQUEST_TIMEOUT_MS, connectionMs: config.HTTP_CONNECTION_TIMEOUT_MS },
    readiness: { refreshMs: config.READINESS_REFRESH_MS },
    pluginsDir: join(here, 'plugins'),
    routesDir: join(here, 'routes'),
    options: { config },
  });
}
