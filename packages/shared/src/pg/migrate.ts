import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { runner } from 'node-pg-migrate';
import { crc64Avro } from '../contracts/fingerprint.js';

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
}

/**
 * Applies pending migrations in one transaction. Replicas starting together wait on an advisory
 * lock per schema (not one global lock), so services never wait for each other.
 */
export async function migrate(options: MigrateOptions): Promise<string[]> {
  const lockValue = Number(BigInt.asIntN(32, crc64Avro(`migrations:${options.schema}`)));
  const applied = await runner({
    databaseUrl: options.databaseUrl,
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
  return applied.map((m) => m.name);
}
