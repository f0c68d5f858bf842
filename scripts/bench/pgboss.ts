/**
 * The pg-boss peer: jobs inserted in bulk with singletonKey = campaign:candidate:step (its dedupe
 * key), in a schema of its own, run by pgboss-worker.ts.
 */
import { join } from 'node:path';
import { startProcess } from '@outreach/testkit';
import PgBoss from 'pg-boss';
import pg from 'pg';
import { root } from '../lib/paths.js';
import { postgresPids } from './common.js';
import { runId, tsNode } from './harness.js';
import type { Peer } from './peers.js';

export function pgbossPeer(databaseUrl: string): Peer {
  const queueName = 'bench';
  const schema = runId('pgboss');
  const boss = new PgBoss({ connectionString: databaseUrl, schema, max: 4 });
  const pool = new pg.Pool({ connectionString: databaseUrl, max: 1 });
  boss.on('error', () => undefined);
  return {
    name: 'pg-boss 10.4 (PostgreSQL)',
    backend: { name: 'postgres (all backends)', pids: postgresPids },
    async setUp() {
      await boss.start();
      await boss.createQueue(queueName);
    },
    async enqueue(chunk) {
      await boss.insert(
        chunk.map((r) => ({
          name: queueName,
          data: { key: r.jobKey, to: r.event.email },
          // The dedupe key; with singletonSeconds the unique index covers every state in that window.
          singletonKey: r.jobKey,
          singletonSeconds: 86_400,
          expireInSeconds: 15,
        })),
      );
    },
    worker: (deliveryLog, delayMs) =>
      startProcess(
        join(root, 'scripts', 'bench', 'pgboss-worker.ts'),
        {
          DELAY_MS: String(delayMs),
          PATH: process.env.PATH,
          DATABASE_URL: databaseUrl,
          SCHEMA: schema,
          QUEUE: queueName,
          DELIVERY_LOG: deliveryLog,
          WORKERS: '8',
          BATCH: '50',
        },
        [],
        tsNode,
      ),
    async idle() {
      const { rows } = await pool.query<{ n: number }>(
        `SELECT count(*)::int AS n FROM "${schema}".job WHERE name = $1 AND state IN ('created', 'retry', 'active')`,
        [queueName],
      );
      return rows[0]?.n === 0;
    },
    async tearDown() {
      await boss.stop({ graceful: false, wait: true });
      await pool.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
      await pool.end();
    },
  };
}
