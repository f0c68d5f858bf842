import pg from 'pg';
import { waitFor } from '../wait.js';
import { pgClientConfig, type PgConnectionSettings } from './connection.js';

export type { Pool, PoolClient, QueryResultRow } from 'pg';

export interface PoolOptions {
  readonly connectionString: string;
  readonly applicationName: string;
  readonly max?: number;
  /** Sets `search_path` on every connection, so a service (or a test) works inside its own schema. */
  readonly schema?: string;
  readonly logger?: { warn(context: object, message: string): void };
  /** TLS and password file; default: DATABASE_SSL_* and DATABASE_PASSWORD_FILE with the URL's sslmode (connection.ts). */
  readonly settings?: PgConnectionSettings;
}

export function createPool(options: PoolOptions): pg.Pool {
  const pool = new pg.Pool({
    application_name: options.applicationName,
    max: options.max ?? 10,
    connectionTimeoutMillis: 5_000,
    ...(options.schema ? { options: `-c search_path=${quoteIdent(options.schema)},public` } : {}),
    // The URL's own settings win, as they did when node-postgres parsed it.
    ...pgClientConfig(options.connectionString, options.settings),
  });
  // An idle client's error (server restart, network) must not crash the process; the pool replaces it.
  pool.on('error', (error) => options.logger?.warn({ err: error }, 'idle postgres client failed'));
  return pool;
}

export function quoteIdent(identifier: string): string {
  return `"${identifier.replaceAll('"', '""')}"`;
}

export async function waitForPostgres(
  connectionString: string,
  timeoutMs: number,
  settings?: PgConnectionSettings,
): Promise<{ version: string }> {
  const config = pgClientConfig(connectionString, settings);
  return waitFor(
    async () => {
      const client = new pg.Client({ connectionTimeoutMillis: 2_000, ...config });
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
