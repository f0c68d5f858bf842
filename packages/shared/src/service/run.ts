import closeWithGrace from 'close-with-grace';
import type { FastifyInstance } from 'fastify';
import type { TObject, TProperties, Static } from '@sinclair/typebox';
import { loadConfig, ConfigError, type BaseConfig } from '../config.js';
import { createLogger, type Logger } from '../logger.js';
import { migrate } from '../pg/migrate.js';

export interface ServiceDefinition<P extends TProperties> {
  readonly name: string;
  readonly configSchema: TObject<P>;
  /** The service's migrations and schema; run at start-up and by `server.js migrate`. */
  readonly migrations?: {
    readonly dir: string;
    readonly schema: (config: BaseConfig & Static<TObject<P>>) => string;
    readonly outbox?: boolean;
  };
  readonly build: (context: { config: BaseConfig & Static<TObject<P>>; logger: Logger }) => Promise<FastifyInstance>;
}

/**
 * The process around a service: validate config, migrate, log, listen, and shut down gracefully on
 * SIGTERM/SIGINT (fastify's onClose hooks stop consumers and relays before pools close).
 * `node server.js migrate` applies the migrations and exits (the Kubernetes migration Job).
 */
export async function runService<P extends TProperties>(
  definition: ServiceDefinition<P>,
  argv: readonly string[] = process.argv.slice(2),
): Promise<FastifyInstance | undefined> {
  let config: BaseConfig & Static<TObject<P>>;
  try {
    config = loadConfig(definition.configSchema);
  } catch (error) {
    if (error instanceof ConfigError) {
      process.stderr.write(`${definition.name}: ${error.message}\n`);
      process.exit(78); // EX_CONFIG
    }
    throw error;
  }
  const logger = createLogger({ name: definition.name, level: config.LOG_LEVEL });
  const runMigrations = async () => {
    if (!definition.migrations) return;
    await migrate({
      databaseUrl: config.DATABASE_URL,
      schema: definition.migrations.schema(config),
      dir: definition.migrations.dir,
      outbox: definition.migrations.outbox ?? false,
      logger: { info: (m) => logger.info(m), debug: (m) => logger.debug(m) },
    });
  };

  if (argv[0] === 'migrate') {
    await runMigrations();
    logger.info('migrations up to date');
    return undefined;
  }
  if (config.MIGRATE_ON_START) await runMigrations();

  let app: FastifyInstance;
  try {
    app = await definition.build({ config, logger });
  } catch (error) {
    if (error instanceof ConfigError) {
      process.stderr.write(`${definition.name}: ${error.message}\n`);
      process.exit(78);
    }
    throw error;
  }
  closeWithGrace({ delay: config.SHUTDOWN_TIMEOUT_MS, logger }, async ({ signal, err }) => {
    if (err) logger.error({ err }, 'fatal error, shutting down');
    else logger.info({ signal }, 'shutting down');
    await app.close();
  });

  await app.listen({ host: config.HTTP_HOST, port: config.HTTP_PORT });
  logger.info({ port: config.HTTP_PORT }, `${definition.name} started`);
  return app;
}
