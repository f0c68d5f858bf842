import { randomBytes } from 'node:crypto';
import type { Pool } from 'pg';
import { migrate } from './migrate.js';
import { createPool, quoteIdent } from './pool.js';

/**
 * A throw-away schema with a service's migrations applied, for rebuilding a projection from the
 * log beside the live one; dropped afterwards, whatever happens.
 */
export async function withScratchSchema<T>(
  options: { databaseUrl: string; prefix: string; migrationsDir: string },
  work: (pool: Pool, schema: string) => Promise<T>,
): Promise<T> {
  const schema = `${options.prefix}_${Date.now().toString(36)}_${randomBytes(3).toString('hex')}`;
  await migrate({ databaseUrl: options.databaseUrl, schema, dir: options.migrationsDir, outbox: true });
  const pool = createPool({ connectionString: options.databaseUrl, applicationName: options.prefix, schema, max: 2 });
  try {
    return await work(pool, schema);
  } finally {
    await pool.query(`DROP SCHEMA IF EXISTS ${quoteIdent(schema)} CASCADE`).catch(() => undefined);
    await pool.end();
  }
}
