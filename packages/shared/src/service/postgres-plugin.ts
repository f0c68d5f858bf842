import fp from 'fastify-plugin';
import type { Pool } from 'pg';
import { explainPgError, type PgConnectionSettings } from '../pg/connection.js';
import { counter } from '../metrics.js';
import { createPool } from '../pg/pool.js';
import { countStatements } from '../pg/statements.js';
import { StartupError } from './startup-error.js';

declare module 'fastify' {
  interface FastifyInstance {
    readonly pg: Pool;
    /** Where connections that need a session go (DATABASE_SESSION_URL); undefined: the pool's URL. */
    readonly pgSessionUrl: string | undefined;
  }
}

export interface PostgresPluginOptions {
  readonly connectionString: string;
  readonly applicationName: string;
  readonly schema?: string;
  readonly max?: number;
  /** TLS and password file; default: this process's DATABASE_SSL_* and DATABASE_PASSWORD_FILE (pg/connection.ts). */
  readonly settings?: PgConnectionSettings;
  /** DATABASE_SESSION_URL: for the outbox relay, when the pool's URL goes through a transaction-mode pooler. */
  readonly sessionConnectionString?: string;
}

/**
 * Decorates the app with a pool, adds a readiness check, and closes the pool last on shutdown. When
 * the app becomes ready it connects once: a refusal that retrying cannot fix (password, certificate,
 * hba rule, a missing database) rejects `ready()` with a StartupError naming it; a server that does
 * not answer yet is left to readiness, as before.
 */
export const postgresPlugin = fp<PostgresPluginOptions>(
  async (app, options) => {
    const { sessionConnectionString, ...poolOptions } = options;
    const pool = createPool({ ...poolOptions, logger: app.log });
    app.decorate('pg', pool);
    // Every statement of every pooled connection, counted (one increment per query): the benchmark's
    // statements per send, and an operator's view of what a change did to the database's load.
    counter(app.metrics, 'outreach_pg_statements_total').inc(0);
    pool.on('connect', (client) => countStatements(client, app.metrics));
    app.decorate('pgSessionUrl', sessionConnectionString || undefined);
    app.addHook('onReady', async () => {
      try {
        await pool.query('SELECT 1');
      } catch (error) {
        const known = explainPgError(error);
        if (known) throw new StartupError('postgres', known.failure, known.message);
        app.log.warn({ err: error }, 'postgres does not answer yet; readiness reports it until it does');
      }
    });
    app.readiness.set('postgres', async () => {
      await pool.query('SELECT 1');
    });
    app.addHook('onClose', async () => {
      await pool.end();
    });
  },
  { name: 'postgres', dependencies: ['health'] },
);
