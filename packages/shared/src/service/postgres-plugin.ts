import fp from 'fastify-plugin';
import type { Pool } from 'pg';
import { createPool } from '../pg/pool.js';

declare module 'fastify' {
  interface FastifyInstance {
    readonly pg: Pool;
  }
}

export interface PostgresPluginOptions {
  readonly connectionString: string;
  readonly applicationName: string;
  readonly schema?: string;
  readonly max?: number;
}

/** Decorates the app with a pool, adds a readiness check, and closes the pool last on shutdown. */
export const postgresPlugin = fp<PostgresPluginOptions>(
  async (app, options) => {
    const pool = createPool({ ...options, logger: app.log });
    app.decorate('pg', pool);
    app.readiness.set('postgres', async () => {
      await pool.query('SELECT 1');
    });
    app.addHook('onClose', async () => {
      await pool.end();
    });
  },
  { name: 'postgres', dependencies: ['health'] },
);
