import type { Pool } from 'pg';
import { gauge, sharedRead, type Registry } from '../metrics.js';

/**
 * Gauges of the outbox backlog, read at scrape time: how many rows wait, how old the oldest one is
 * (the relay's lag), and how many are parked. One query per scrape, shared by the three gauges; the
 * partial index `outbox_unpublished_idx` (WHERE published_at IS NULL) bounds it by the backlog, not
 * the table and the deleted rows vacuum has not removed yet (test: metrics/outbox.int.test.ts).
 * `outbox_parked` holds only the few records an
 * operator has not dealt with yet, so counting it whole is cheap.
 */
export function registerOutboxMetrics(registry: Registry, pool: Pick<Pool, 'query'>): void {
  const read = sharedRead(() =>
    pool.query<{ rows: string; age: number | null; parked: string }>(OUTBOX_BACKLOG_SQL).then((r) => ({
      rows: Number(r.rows[0]?.rows ?? 0),
      age: r.rows[0]?.age ?? 0,
      parked: Number(r.rows[0]?.parked ?? 0),
    })),
  );
  gauge(registry, 'outreach_outbox_unpublished_rows', async (g) => g.set((await read()).rows));
  gauge(registry, 'outreach_outbox_parked_rows', async (g) => g.set((await read()).parked));
  gauge(registry, 'outreach_outbox_oldest_unpublished_age_seconds', async (g) => g.set((await read()).age));
}

/** Exported for the EXPLAIN test. `greatest(0, …)`: a row stamped by a clock ahead of ours is not negative. */
export const OUTBOX_BACKLOG_SQL = `SELECT count(*) AS rows,
       greatest(0, extract(epoch FROM now() - min(created_at)))::float8 AS age,
       (SELECT count(*) FROM outbox_parked) AS parked
  FROM outbox WHERE published_at IS NULL`;

/**
 * `outreach_outbox_relay_up`: 1 while this process's relay loop turns (active or on standby), 0
 * before it starts, once it stops, and once its loop exited or stalled. A service none of whose
 * instances has `relay_active * relay_up == 1` publishes nothing (alert OutreachNoOutboxRelay).
 */
export function registerRelayUp(registry: Registry, isUp: () => boolean): void {
  gauge(registry, 'outreach_outbox_relay_up', (g) => g.set(isUp() ? 1 : 0));
}
