/**
 * The console's process: configuration, its migrations, listen, and a graceful shutdown. It has no
 * Kafka and writes no event, so it does not go through runService (which binds the schema registry
 * and checks Kafka's settings); the steps it shares are the same calls.
 */
import closeWithGrace from 'close-with-grace';
import { ConfigError, createLogger, migrate } from '@outreach/shared';
import { buildApp, migrationsDir } from './app.js';
import { loadConfig, loadMigrateConfig, type Config, type MigrateConfig } from './config.js';

function configured<T>(load: () => T): T {
  try {
    return load();
  } catch (error) {
    if (error instanceof ConfigError) {
      process.stderr.write(`console: ${error.message}\n`);
      process.exit(78);
    }
    throw error;
  }
}

// `migrate` (the migrate Job, `docker run IMAGE migrate console`) needs PostgreSQL's settings alone.
const migrating = process.argv[2] === 'migrate';
const migrateConfig: MigrateConfig = configured(loadMigrateConfig);
const logger = createLogger({ name: 'console', level: migrateConfig.LOG_LEVEL });
const runMigrations = (config: MigrateConfig) =>
  migrate({
    databaseUrl: config.DATABASE_SESSION_URL || config.DATABASE_URL,
    schema: config.DATABASE_SCHEMA,
    dir: migrationsDir,
    outbox: false,
    logger: { info: (m) => logger.info(m), debug: (m) => logger.debug(m) },
    ...(config.DATABASE_RUNTIME_ROLE ? { runtimeRole: config.DATABASE_RUNTIME_ROLE } : {}),
  });

if (migrating) {
  await runMigrations(migrateConfig);
  logger.info('migrations up to date');
  process.exit(0);
}
const config: Config = configured(loadConfig);
if (config.MIGRATE_ON_START) await runMigrations(config);
let app;
try {
  app = await buildApp({ config, logger });
} catch (error) {
  if (error instanceof ConfigError) {
    process.stderr.write(`console: ${error.message}\n`);
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
logger.info({ port: config.HTTP_PORT }, 'console started');
