/**
 * The transactional outbox. `enqueueEvents` writes events in the caller's transaction (the same one
 * that changes the state they describe); `OutboxRelay` publishes them to Kafka afterwards.
 *
 * Guarantees: at least once to Kafka, in id order (so per key in the order enqueued); consumers
 * deduplicate by eventId. Enqueuing the same eventId twice is a no-op (UNIQUE constraint).
 * One relay per service is active at a time (a session advisory lock); when its process dies, the
 * database releases the lock with the session and a standby takes over.
 */
import pg, { type Pool } from 'pg';
import type { Registry } from 'prom-client';
import { eventCodec } from '../contracts/codec.js';
import { crc64Avro } from '../contracts/fingerprint.js';
import type { EventProducer, OutgoingEvent } from '../kafka/producer.js';
import { eventHeaders, messageKey } from '../kafka/producer.js';
import type { Logger } from '../logger.js';
import { Counter, Gauge, metric } from '../metrics.js';
import { quoteIdent } from '../pg/pool.js';
import type { Queryable } from '../pg/transaction.js';

export function outboxChannel(schema: string): string {
  return `outbox_${schema}`;
}

/**
 * Adds events to the outbox of the current schema (the caller's search_path). Returns how many
 * were new. Wakes the relay when the transaction commits.
 */
export async function enqueueEvents(client: Queryable, events: readonly OutgoingEvent[]): Promise<number> {
  if (events.length === 0) return 0;
  const result = await client.query(
    `INSERT INTO outbox (event_id, topic, key, headers, payload)
     SELECT * FROM unnest($1::uuid[], $2::text[], $3::text[], $4::jsonb[], $5::bytea[])
     ON CONFLICT (event_id) DO NOTHING`,
    [
      events.map((e) => e.event.eventId),
      events.map((e) => e.topic),
      events.map((e) => messageKey(e.event)),
      events.map((e) => JSON.stringify(eventHeaders(e.event, e.traceparent))),
      events.map((e) => eventCodec.encode(e.event)),
    ],
  );
  // NOTIFY is delivered at commit, and only once per channel and transaction.
  await client.query(`SELECT pg_notify('outbox_' || current_schema(), '')`);
  return result.rowCount ?? 0;
}

export interface OutboxRelayOptions {
  readonly databaseUrl: string;
  /** The schema whose outbox this relay publishes. */
  readonly schema: string;
  readonly producer: EventProducer;
  readonly logger: Logger;
  readonly metrics?: Registry;
  readonly batchSize?: number;
  /** Polling fallback when no NOTIFY arrives (missed notification, other writers). */
  readonly pollIntervalMs?: number;
  /** How often a standby tries to take over. */
  readonly standbyRetryMs?: number;
  /** Published rows older than this are deleted. */
  readonly retentionMs?: number;
}

interface OutboxRow {
  id: string;
  topic: string;
  key: string | null;
  headers: Record<string, string>;
  payload: Buffer;
}

export class OutboxRelay {
  private stopped = false;
  private running: Promise<void> | undefined;
  private wake: (() => void) | undefined;
  private client: pg.Client | undefined;
  private readonly lockKeys: [number, number];
  private readonly batchSize: number;
  private readonly pollIntervalMs: number;
  private readonly standbyRetryMs: number;
  private readonly retentionMs: number;
  private lastCleanup = 0;
  /** True while this instance holds the lock and publishes. */
  active = false;
  readonly stats = { published: 0, batches: 0 };
  private readonly publishedCounter?: Counter;
  private readonly activeGauge?: Gauge;

  constructor(private readonly options: OutboxRelayOptions) {
    const fp = crc64Avro(`outbox:${options.schema}`);
    this.lockKeys = [Number(BigInt.asIntN(32, fp >> 32n)), Number(BigInt.asIntN(32, fp))];
    this.batchSize = options.batchSize ?? 500;
    this.pollIntervalMs = options.pollIntervalMs ?? 1_000;
    this.standbyRetryMs = options.standbyRetryMs ?? 1_000;
    this.retentionMs = options.retentionMs ?? 7 * 24 * 60 * 60 * 1000;
    const registry = options.metrics;
    if (registry) {
      this.publishedCounter = metric(
        registry,
        'outbox_published_total',
        () =>
          new Counter({
            name: 'outbox_published_total',
            help: 'Outbox rows published to Kafka',
            registers: [registry],
          }),
      );
      this.activeGauge = metric(
        registry,
        'outbox_relay_active',
        () =>
          new Gauge({
            name: 'outbox_relay_active',
            help: '1 while this instance is the active relay',
            registers: [registry],
          }),
      );
    }
  }

  start(): void {
    this.running ??= this.loop();
  }

  async stop(): Promise<void> {
    this.stopped = true;
    this.wake?.();
    await this.running;
  }

  private async loop(): Promise<void> {
    let failures = 0;
    while (!this.stopped) {
      try {
        await this.session();
        failures = 0;
      } catch (error) {
        failures++;
        this.options.logger.warn({ err: error }, 'outbox relay session failed; reconnecting');
      } finally {
        this.setActive(false);
        await this.client?.end().catch(() => undefined);
        this.client = undefined;
      }
      if (!this.stopped) await this.sleep(Math.min(10_000, 200 * 2 ** Math.min(failures, 6)));
    }
  }

  /** One database session: wait for the lock, then publish until the session ends or we stop. */
  private async session(): Promise<void> {
    const client = new pg.Client({
      connectionString: this.options.databaseUrl,
      application_name: `outbox-relay-${this.options.schema}`,
      options: `-c search_path=${quoteIdent(this.options.schema)}`,
    });
    this.client = client;
    let lost: Error | undefined;
    client.on('error', (error) => {
      lost = error;
      this.wake?.();
    });
    await client.connect();
    while (!this.stopped) {
      const { rows } = await client.query<{ locked: boolean }>(
        'SELECT pg_try_advisory_lock($1, $2) AS locked',
        this.lockKeys,
      );
      if (rows[0]?.locked) break;
      await this.sleep(this.standbyRetryMs);
      if (lost) throw lost;
    }
    if (this.stopped) return;
    this.setActive(true);
    this.options.logger.info({ schema: this.options.schema }, 'outbox relay active');
    client.on('notification', () => this.wake?.());
    await client.query(`LISTEN ${quoteIdent(outboxChannel(this.options.schema))}`);

    while (!this.stopped) {
      if (lost) throw lost;
      const published = await this.publishBatch(client);
      if (published < this.batchSize) {
        await this.cleanup(client);
        await this.sleep(this.pollIntervalMs);
      }
    }
    await client.query('SELECT pg_advisory_unlock($1, $2)', this.lockKeys).catch(() => undefined);
  }

  private async publishBatch(client: pg.Client): Promise<number> {
    const { rows } = await client.query<OutboxRow>(
      `SELECT id, topic, key, headers, payload FROM outbox WHERE published_at IS NULL ORDER BY id LIMIT $1`,
      [this.batchSize],
    );
    if (rows.length === 0) return 0;
    // Consecutive rows of one topic go in one request, in id order; batches never overlap.
    const batches: Array<{
      topic: string;
      records: Array<{ key: string | null; value: Buffer; headers: Record<string, string> }>;
    }> = [];
    for (const row of rows) {
      const current = batches.at(-1);
      const record = { key: row.key, value: row.payload, headers: row.headers };
      if (current?.topic === row.topic) current.records.push(record);
      else batches.push({ topic: row.topic, records: [record] });
    }
    this.options.logger.debug(
      { count: rows.length, firstId: rows[0]?.id, lastId: rows.at(-1)?.id },
      'publishing outbox batch',
    );
    await this.options.producer.publishRaw(batches);
    await client.query('UPDATE outbox SET published_at = now() WHERE id = ANY($1::bigint[])', [rows.map((r) => r.id)]);
    this.options.logger.debug({ count: rows.length }, 'published outbox batch');
    this.stats.published += rows.length;
    this.stats.batches++;
    this.publishedCounter?.inc(rows.length);
    return rows.length;
  }

  private async cleanup(client: pg.Client): Promise<void> {
    if (Date.now() - this.lastCleanup < 60_000) return;
    this.lastCleanup = Date.now();
    await client.query(`DELETE FROM outbox WHERE published_at < now() - make_interval(secs => $1)`, [
      this.retentionMs / 1000,
    ]);
  }

  private setActive(active: boolean): void {
    this.active = active;
    this.activeGauge?.set(active ? 1 : 0);
  }

  private sleep(ms: number): Promise<void> {
    return new Promise((resolve) => {
      const timer = setTimeout(done, ms);
      function done() {
        clearTimeout(timer);
        resolve();
      }
      this.wake = done;
    });
  }
}

/**
 * Gauges of the outbox backlog, computed at scrape time: how many rows wait, and how old the
 * oldest one is (the relay's lag).
 */
export function registerOutboxMetrics(registry: Registry, pool: Pool): void {
  // One small query per gauge and scrape (a partial index keeps it cheap); never a cached value.
  const read = () =>
    pool
      .query<{ rows: string; age: number | null }>(
        `SELECT count(*) AS rows, extract(epoch FROM now() - min(created_at))::float8 AS age
         FROM outbox WHERE published_at IS NULL`,
      )
      .then((r) => ({ rows: Number(r.rows[0]?.rows ?? 0), age: r.rows[0]?.age ?? 0 }));
  metric(
    registry,
    'outbox_unpublished_rows',
    () =>
      new Gauge({
        name: 'outbox_unpublished_rows',
        help: 'Outbox rows not yet published to Kafka',
        registers: [registry],
        async collect() {
          this.set((await read()).rows);
        },
      }),
  );
  metric(
    registry,
    'outbox_oldest_unpublished_age_seconds',
    () =>
      new Gauge({
        name: 'outbox_oldest_unpublished_age_seconds',
        help: 'Age of the oldest unpublished outbox row (0 when none)',
        registers: [registry],
        async collect() {
          this.set((await read()).age);
        },
      }),
  );
}
