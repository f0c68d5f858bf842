import closeWithGrace from 'close-with-grace';
import type { FastifyInstance } from 'fastify';
import type { TObject, TProperties, Static } from '@sinclair/typebox';
import { loadConfig, ConfigError, type BaseConfig } from '../config.js';
import { kafkaSecurityFromEnv } from '../kafka/security.js';
import { createLogger, type Logger } from '../logger.js';
import { explainPgError, resolvePgSettings, unverifiedTls } from '../pg/connection.js';
import { migrate } from '../pg/migrate.js';
import { openApiDocument } from './docs.js';
import { bindSchemaRegistry } from '../registry/binding.js';
import { StartupError } from './startup-error.js';
import { shutdownTracing, tracingActive } from '../telemetry/trace.js';

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
 * `node server.js migrate` applies the migrations and exits (the Kubernetes migration Job);
 * `node server.js openapi` prints the service's OpenAPI document and exits, connecting to nothing.
 */
export async function runService<P extends TProperties>(
  definition: ServiceDefinition<P>,
  argv: readonly string[] = process.argv.slice(2),
): Promise<FastifyInstance | undefined> {
  let config: BaseConfig & Static<TObject<P>>;
  let pgTlsUnverified = false;
  try {
    config = loadConfig(definition.configSchema);
    // The combinations and files of the Kafka and PostgreSQL security settings: checked here, once,
    // so a bad one stops the start (78) before anything connects.
    kafkaSecurityFromEnv();
    pgTlsUnverified = unverifiedTls(resolvePgSettings(config.DATABASE_URL));
    if (config.DATABASE_SESSION_URL) resolvePgSettings(config.DATABASE_SESSION_URL);
  } catch (error) {
    if (error instanceof ConfigError) {
      process.stderr.write(`${definition.name}: ${error.message}\n`);
      process.exit(78); // EX_CONFIG
    }
    throw error;
  }
  const logger = createLogger({ name: definition.name, level: config.LOG_LEVEL });
  if (pgTlsUnverified)
    logger.warn('postgres: sslmode=require without a CA file encrypts but does not verify the server');
  // A dependency that refused us: one line naming the cause on stderr (and in the log), then the exit.
  const stop = (error: StartupError): never => {
    logger.fatal({ dependency: error.dependency, failure: error.failure }, error.message);
    process.stderr.write(`${definition.name}: ${error.message}\n`);
    process.exit(error.exitCode);
  };
  const runMigrations = async () => {
    if (!definition.migrations) return;
    try {
      await migrate({
        // Migrations hold an advisory lock for their session: not through a transaction-mode pooler.
        databaseUrl: config.DATABASE_SESSION_URL || config.DATABASE_URL,
        schema: definition.migrations.schema(config),
        dir: definition.migrations.dir,
        outbox: definition.migrations.outbox ?? false,
        logger: { info: (m) => logger.info(m), debug: (m) => logger.debug(m) },
        ...(config.DATABASE_RUNTIME_ROLE ? { runtimeRole: config.DATABASE_RUNTIME_ROLE } : {}),
      });
    } catch (error) {
      const known = explainPgError(error);
      if (known) {
        // A runtime role has no DDL (pg/roles.ts): migrations are the migrator's, in the migrate Job.
        const hint =
          known.failure === 'authorization'
            ? '; with a runtime role, set MIGRATE_ON_START=false and migrate as the migrator'
            : '';
        stop(new StartupError('postgres', known.failure, `${known.message} (while migrating${hint})`));
      }
      throw error;
    }
  };

  if (argv[0] === 'openapi') {
    // The routes are all registered once the app is built; nothing connects before ready().
    const app = await definition.build({ config, logger });
    process.stdout.write(`${JSON.stringify(await openApiDocument(app, definition.name), null, 2)}\n`);
    return undefined;
  }
  if (argv[0] === 'migrate') {
    await runMigrations();
    logger.info('migrations up to date');
    return undefined;
  }
  if (config.MIGRATE_ON_START) await runMigrations();
  try {
    const binding = await bindSchemaRegistry(config);
    if (binding) {
      logger.info(
        { format: binding.format, subjects: binding.currentIds.size, registry: binding.resolver.client.url },
        'schema registry ids bound',
      );
    }
  } catch (error) {
    if (error instanceof StartupError) stop(error);
    throw error;
  }

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
    // Spans still buffered go to the collector before the process ends (a no-op with tracing off).
    await shutdownTracing();
  });

  try {
    // ready() runs the start-up checks of the Kafka and PostgreSQL plugins before any consumer starts.
    await app.listen({ host: config.HTTP_HOST, port: config.HTTP_PORT });
  } catch (error) {
    if (error instanceof StartupError) {
      await app.close().catch(() => undefined);
      stop(error);
    }
    throw error;
  }
  logger.info({ port: config.HTTP_PORT, tracing: tracingActive() }, `${definition.name} started`);
  return app;
}
