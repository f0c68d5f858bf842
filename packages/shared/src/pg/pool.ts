import pg from 'pg';
import { waitFor } from '../wait.js';

export type { Pool, PoolClient, QueryResultRow } from 'pg';

export interface PoolOptions {
  readonly connectionString: string;
  readonly applicationName: string;
  readonly max?: number;
  /** Sets `search_path` on every connection, so a service (or a test) works inside its own schema. */
  readonly schema?: string;
  readonly logger?: { warn(context: object, message: string): void };
}

export function createPool(options: PoolOptions): pg.Pool {
  const pool = new pg.Pool({
    connectionString: options.connectionString,
    application_name: options.applicationName,
    max: options.max ?? 10,
    connectionTimeoutMillis: 5_000,
    ...(options.schema ? { options: `-c search_path=${quoteIdent(options.schema)},public` } : {}),
  });
  // An idle client's error (server restart, network) must not crash the process; the pool replaces it.
  pool.on('error', (error) => options.logger?.warn({ err: error }, 'idle postgres client failed'));
  return pool;
}

export function quoteIdent(identifier: string): string {
  return `"${identifier.replaceAll('"', '""')}"`;
}

export async function waitForPostgres(connectionString: string, timeoutMs: number): Promise<{ version: string }> {
  return waitFor(
    async () => {
      const client = new pg.Client({ connectionString, connectionTimeoutMillis: 2_000 });
      try {
        await client.connect();
        const result = await client.query<{ server_version: string }>('SHOW server_version');
        return { version: result.rows[0]?.server_version ?? 'unknown' };
      } finally {
        await client.end().catch(() => undefined);
      }
    },
    { timeoutMs, intervalMs: 250, description: `PostgreSQL at ${redactUrl(connectionString)}` },
  );
}

/** Connection strings may carry passwords; never log them whole. */
export function redactUrl(url: string): string {
  try {
    const parsed = new URL(url);
    if (parsed.password) parsed.password = '***';
    return parsed.toString();
  } catch {
    return '<unparseable url>';
  }
}
