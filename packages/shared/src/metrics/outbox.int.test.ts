/**
 * The outbox gauges against a real PostgreSQL: the age of the oldest unpublished row (published rows
 * and parked records aside), the index that serves the query, and the relay-up gauge of a service's
 * relay through its life (before start, turning, closed).
 */
import { randomUUID } from 'node:crypto';
import { afterAll, describe, expect, inject, it } from 'vitest';
import { createLogger } from '../logger.js';
import { createMetricsRegistry } from '../metrics.js';
import { migrate, sharedMigrationsDir } from '../pg/migrate.js';
import { buildHttpApp } from '../service/http.js';
import { registerOutboxRelay } from '../service/workers.js';
import { planScans } from '@outreach/testkit';
import { isolatedSchema, type IsolatedSchema } from '@outreach/testkit';
import { waitFor } from '../wait.js';
import { OUTBOX_BACKLOG_SQL, registerOutboxMetrics } from './outbox.js';

const databaseUrl = inject('databaseUrl');
const brokers = inject('kafkaBrokers');
const logger = createLogger({ name: 'outbox-metrics-test', level: 'silent' });
const cleanups: Array<() => Promise<unknown>> = [];
afterAll(async () => {
  for (const cleanup of cleanups.reverse()) await cleanup().catch(() => undefined);
});

async function outboxSchema(): Promise<IsolatedSchema> {
  const isolated = await isolatedSchema(databaseUrl, 'outbox_metrics');
  await migrate({ databaseUrl, schema: isolated.schema, dir: sharedMigrationsDir });
  cleanups.push(() => isolated.drop());
  return isolated;
}

/** A row as the relay would find it, written `ageSeconds` ago (by the database clock). */
async function row(pool: IsolatedSchema['pool'], ageSeconds: number, published: boolean): Promise<void> {
  await pool.query(
    `INSERT INTO outbox (event_id, topic, key, payload, created_at, published_at)
     VALUES ($1, 'metrics.test', 'k', '\\x00'::bytea, now() - make_interval(secs => $2),
             CASE WHEN $3 THEN now() END)`,
    [randomUUID(), ageSeconds, published],
  );
}

const value = (text: string, name: string) => {
  const match = new RegExp(`^${name}\\{[^}]*\\} (\\S+)$`, 'm').exec(text);
  return match ? Number(match[1]) : undefined;
};

describe('outbox gauges', () => {
  it('age is the seconds since the oldest unpublished row; published rows and an empty outbox count 0', async () => {
    const { pool } = await outboxSchema();
    const registry = createMetricsRegistry('outbox-metrics-test', false);
    registerOutboxMetrics(registry, pool);

    let text = await registry.metrics();
    expect(value(text, 'outreach_outbox_oldest_unpublished_age_seconds')).toBe(0);
    expect(value(text, 'outreach_outbox_unpublished_rows')).toBe(0);

    await row(pool, 3_600, true); // old but published: not a backlog
    await row(pool, 300, false);
    await row(pool, 20, false);
    await pool.query(
      `INSERT INTO outbox_parked (outbox_id, event_id, topic, key, headers, payload, size_bytes, limit_bytes, reason, created_at)
       SELECT id, event_id, topic, key, headers, payload, 1, 1, 'test', created_at FROM outbox LIMIT 1`,
    );
    text = await registry.metrics();
    const age = value(text, 'outreach_outbox_oldest_unpublished_age_seconds') ?? -1;
    expect(age).toBeGreaterThanOrEqual(300);
    expect(age).toBeLessThan(330);
    expect(value(text, 'outreach_outbox_unpublished_rows')).toBe(2);
    expect(value(text, 'outreach_outbox_parked_rows')).toBe(1);

    await pool.query(`UPDATE outbox SET published_at = now()`);
    expect(value(await registry.metrics(), 'outreach_outbox_oldest_unpublished_age_seconds')).toBe(0);
  });

  it('one query per scrape for the three gauges, served by the partial index on unpublished rows', async () => {
    const { pool } = await outboxSchema();
    let queries = 0;
    const counting = {
      query: ((...args: Parameters<typeof pool.query>) => {
        queries++;
        return pool.query(...args);
      }) as typeof pool.query,
    };
    const registry = createMetricsRegistry('outbox-metrics-test', false);
    registerOutboxMetrics(registry, counting);
    await registry.metrics();
    expect(queries).toBe(1);
    await registry.metrics();
    expect(queries).toBe(2);

    const scans = await planScans(pool, OUTBOX_BACKLOG_SQL);
    // A published row leaves the outbox (its id stays in outbox_event_ids, which grows for a week and
    // is never read here). The backlog is counted through the partial index of unpublished rows, which
    // skips the entries of deleted rows vacuum has not removed yet. The parked records, which stay few
    // (each waits for an operator), are counted whole.
    expect(scans.filter((s) => s.relation === 'outbox').map((s) => s.indexes)).toEqual([['outbox_unpublished_idx']]);
    expect(scans.map((s) => s.relation).sort()).toEqual(['outbox', 'outbox_parked']);
  });

  it("a service's relay is up while its loop turns, and not before it starts or after it stops", async () => {
    const { schema } = await outboxSchema();
    const app = await buildHttpApp({
      name: 'relay-up-test',
      logger,
      postgres: { connectionString: databaseUrl, applicationName: 'relay-up-test', schema },
      kafka: { brokers: brokers.split(','), clientId: 'relay-up-test' },
    });
    registerOutboxRelay(app, { databaseUrl, schema, pollIntervalMs: 100 });
    const relay = () =>
      app.metrics.metrics().then((text) => ({
        up: value(text, 'outreach_outbox_relay_up'),
        active: value(text, 'outreach_outbox_relay_active'),
      }));
    expect((await relay()).up).toBe(0);
    await app.ready();
    await waitFor(async () => (await relay()).active === 1, {
      timeoutMs: 15_000,
      description: 'the relay to take the lock',
    });
    expect(await relay()).toEqual({ up: 1, active: 1 });
    // Scraped over HTTP too, with its service label.
    expect((await app.inject({ url: '/metrics' })).body).toMatch(
      /^outreach_outbox_relay_up\{service="relay-up-test"\} 1$/m,
    );
    await app.close();
    expect((await relay()).up).toBe(0);
  });
});
