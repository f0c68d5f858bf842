import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { runner } from 'node-pg-migrate';
import pg from 'pg';
import { crc64Avro } from '@outreach/contracts';
import { pgClientConfig, type PgConnectionSettings } from './connection.js';
import { grantRuntimeAccess } from './roles.js';

/** Migrations every service with an outbox shares (the outbox table itself). */
export const sharedMigrationsDir = join(dirname(fileURLToPath(import.meta.url)), '..', '..', 'migrations');

export interface MigrateOptions {
  readonly databaseUrl: string;
  /** The one schema the service owns; created if missing. Its migrations table lives in it too. */
  readonly schema: string;
  /** The service's own `migrations/` directory (SQL files with `-- Up Migration` / `-- Down Migration`). */
  readonly dir: string;
  /** Include the shared outbox migration. */
  readonly outbox?: boolean;
  readonly logger?: { info(message: string): void; debug(message: string): void };
  /**
   * The service's runtime role (DATABASE_RUNTIME_ROLE): after the migrations it gets its rights on
   * what they created, and on what later ones create (pg/roles.ts). Run as the migrator.
   */
  readonly runtimeRole?: string;
  /** TLS and password file; default: this process's DATABASE_SSL_* and DATABASE_PASSWORD_FILE. */
  readonly settings?: PgConnectionSettings;
}

/**
 * Applies pending migrations in one transaction. Replicas starting together wait on an advisory
 * lock per schema (not one global lock), so services never wait for each other.
 */
export async function migrate(options: MigrateOptions): Promise<string[]> {
  const lockValue = Number(BigInt.asIntN(32, crc64Avro(`migrations:${options.schema}`)));
  const connection = pgClientConfig(options.databaseUrl, options.settings);
  const applied = await runner({
    databaseUrl: connection,
    // Globs, so the shared outbox migration and the service's own run as one ordered list.
    dir: (options.outbox ? [sharedMigrationsDir, options.dir] : [options.dir]).map((d) => `${d}/*.sql`),
    useGlob: true,
    ignorePattern: '**/.*',
    schema: options.schema,
    createSchema: true,
    migrationsSchema: options.schema,
    migrationsTable: 'pgmigrations',
    direction: 'up',
    checkOrder: true,
    singleTransaction: true,
    advisoryLockMode: 'wait',
    lockValue,
    log: (message: string) => options.logger?.debug(message),
  });
  if (applied.length > 0) options.logger?.info(`applied migrations: ${applied.map((m) => m.name).join(', ')}`);
  if (options.runtimeRole) {
    const client = new pg.Client(connection);
    await client.connect();
    try {
      await grantRuntimeAccess(client, options.schema, options.runtimeRole);
    } finally {
      await client.end();
    }
  }
  return applied.map((m) => m.name);
}
