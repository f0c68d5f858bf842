/**
 * The transactional outbox. `enqueueEvents` writes events in the caller's transaction (the same one
 * that changes the state they describe); `OutboxRelay` publishes them to Kafka afterwards.
 *
 * Guarantees: at least once to Kafka, in id order (so per key in the order enqueued); consumers
 * deduplicate by eventId. Enqueuing the same eventId twice is a no-op while its id is kept in
 * `outbox_event_ids` (written with the row; the relay forgets ids after `retentionMs`), published or
 * not: the relay deletes a row once Kafka has it.
 * One relay per service is active at a time (a session advisory lock); when its process dies, the
 * database releases the lock with the session and a standby takes over.
 *
 * Requests to Kafka are cut by bytes below each topic's max.message.bytes (EventProducer). A row
 * too large for its topic even alone would block every row behind it forever; it is moved to
 * `outbox_parked` (metric `outreach_outbox_parked_rows`, an `alert: outbox_parked` log line, runbook
 * "Parked outbox records") and the relay goes on with the rest.
 * The relay is alive while its loop turns: `liveness()` reports a loop that exited or made no
 * progress for `stallAfterMs` (a hung connection), and `/health/live` turns that into a restart.
 */
import { ROOT_CONTEXT, type Span } from '@opentelemetry/api';
import pg from 'pg';
import type { Registry } from 'prom-client';
import { eventCodec } from '@outreach/contracts';
import { crc64Avro } from '@outreach/contracts';
import type { EventProducer, OutgoingEvent, RawRecord } from '../kafka/producer.js';
import {
  eventHeaders,
  fitsAlone,
  HEADER,
  isMessageTooLarge,
  messageKey,
  planRequests,
  recordBytes,
} from '../kafka/producer.js';
import type { Logger } from '../logger.js';
import { counter, gauge, type Counter, type Gauge } from '../metrics.js';
import { pgClientConfig, type PgConnectionSettings } from '../pg/connection.js';
import { countStatements } from '../pg/statements.js';
import { quoteIdent } from '../pg/pool.js';
import type { Queryable } from '../pg/transaction.js';
import {
  causeContext,
  endSpans,
  remoteContext,
  startSendSpan,
  traceFields,
  tracingActive,
} from '../telemetry/trace.js';

/** How often the relay reads from the head of the outbox rather than on from its last id. */
const HEAD_READ_INTERVAL_MS = 1_000;

export function outboxChannel(schema: string): string {
  return `outbox_${schema}`;
}

/**
 * Adds events to the outbox of the current schema (the caller's search_path). Returns how many
 * were new. Wakes the relay when the transaction commits.
 * With tracing on, each row keeps the trace context of its cause (telemetry/trace.ts
 * `causeContext`: the event it was caused by, or the request being served), so the relay's publish,
 * later and in another session, continues that trace.
 */
export async function enqueueEvents(client: Queryable, events: readonly OutgoingEvent[]): Promise<number> {
  if (events.length === 0) return 0;
  const traced = tracingActive();
  const contexts = events.map((e) => (traced ? traceFields(causeContext(e.traceparent, e.event.causationId)) : {}));
  // The payloads travel as one binary parameter, cut by offset in the statement: a bytea[] parameter
  // goes as text, every byte spelled out in hex on both sides.
  const payloads = events.map((e) => eventCodec.encode(e.event));
  const starts: number[] = [];
  let at = 1;
  for (const payload of payloads) {
    starts.push(at);
    at += payload.length;
  }
  // Each event id goes into outbox_event_ids in the same statement, and only an id new there goes into
  // the outbox: a repeat is refused while the id is kept (the relay's retention), published or not.
  // The unique index decides, whatever this statement's snapshot saw of a concurrent one.
  const result = await client.query(
    `WITH q AS (
       SELECT * FROM unnest($1::uuid[], $2::text[], $3::text[], $4::jsonb[], $5::int[], $6::text[], $7::text[], $9::int[])
         AS q(event_id, topic, key, headers, start, traceparent, tracestate, length)),
     fresh AS (
       INSERT INTO outbox_event_ids (event_id) SELECT DISTINCT event_id FROM q
       ON CONFLICT (event_id) DO NOTHING RETURNING event_id)
     INSERT INTO outbox (event_id, topic, key, headers, payload, traceparent, tracestate)
     SELECT q.event_id, q.topic, q.key, q.headers, substring($8::bytea FROM q.start FOR q.length), q.traceparent, q.tracestate
     FROM q JOIN fresh USING (event_id)
     ON CONFLICT (event_id) DO NOTHING`,
    [
      events.map((e) => e.event.eventId),
      events.map((e) => e.topic),
      events.map((e) => messageKey(e.event)),
      events.map((e) => JSON.stringify(eventHeaders(e.event, e.traceparent))),
      starts,
      contexts.map((c) => c.traceparent ?? null),
      contexts.map((c) => c.tracestate ?? null),
      Buffer.concat(payloads),
      payloads.map((p) => p.length),
    ],
  );
  // NOTIFY is delivered at commit, and only once per channel and transaction.
  await client.query(`SELECT pg_notify('outbox_' || current_schema(), '')`);
  return result.rowCount ?? 0;
}

export interface OutboxRelayOptions {
  readonly databaseUrl: string;
  /** TLS and password file; default: this process's DATABASE_SSL_* and DATABASE_PASSWORD_FILE (pg/connection.ts). */
  readonly settings?: PgConnectionSettings;
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
  /** How long an event's id is kept in outbox_event_ids, refusing a repeat (a week). */
  readonly retentionMs?: number;
  /** A query (or a connect) that takes longer fails, and the relay reconnects (default 30 s). */
  readonly queryTimeoutMs?: number;
  /** The loop counts as stalled, and `/health/live` fails, after this long without progress (5 min). */
  readonly stallAfterMs?: number;
}

interface OutboxRow {
  id: string;
  event_id: string;
  topic: string;
  key: string | null;
  headers: Record<string, string>;
  payload: Buffer;
  /** The cause's trace context (null: tracing was off, or nothing was traced). */
  traceparent: string | null;
  tracestate: string | null;
}

interface Parking {
  readonly row: OutboxRow;
  readonly bytes: number;
  readonly limitBytes: number;
  readonly reason: string;
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
  private readonly queryTimeoutMs: number;
  private readonly stallAfterMs: number;
  private lastCleanup = 0;
  /** The last id read: the next read starts after it, except from the head once per HEAD_READ_INTERVAL_MS. */
  private readFrom = '0';
  private lastHeadRead = 0;
  /** When the loop last made progress (a query answered, a batch sent, a pause ended). */
  private lastTick = Date.now();
  private exited: string | undefined;
  /** True while this instance holds the lock and publishes. */
  active = false;
  readonly stats = { published: 0, batches: 0, parked: 0 };
  private readonly publishedCounter?: Counter<never>;
  private readonly parkedCounter?: Counter<never>;
  private readonly activeGauge?: Gauge<never>;

  constructor(private readonly options: OutboxRelayOptions) {
    const fp = crc64Avro(`outbox:${options.schema}`);
    this.lockKeys = [Number(BigInt.asIntN(32, fp >> 32n)), Number(BigInt.asIntN(32, fp))];
    this.batchSize = options.batchSize ?? 500;
    this.pollIntervalMs = options.pollIntervalMs ?? 1_000;
    this.standbyRetryMs = options.standbyRetryMs ?? 1_000;
    this.retentionMs = options.retentionMs ?? 7 * 24 * 60 * 60 * 1000;
    this.queryTimeoutMs = options.queryTimeoutMs ?? 30_000;
    this.stallAfterMs = options.stallAfterMs ?? 5 * 60_000;
    const registry = options.metrics;
    if (registry) {
      this.publishedCounter = counter(registry, 'outreach_outbox_published_total');
      this.parkedCounter = counter(registry, 'outreach_outbox_parked_total');
      this.activeGauge = gauge(registry, 'outreach_outbox_relay_active');
    }
  }

  start(): void {
    this.lastTick = Date.now();
    this.running ??= this.loop().then(
      () => {
        if (!this.stopped) this.exited = 'the loop returned';
      },
      (error: unknown) => {
        this.exited = error instanceof Error ? error.message : String(error);
        this.options.logger.fatal({ err: error, alert: 'outbox_relay_dead' }, 'outbox relay loop died');
      },
    );
  }

  /** Why the relay is dead (its loop exited, or stalled), or undefined while it turns. */
  liveness(now = Date.now()): string | undefined {
    if (!this.running || this.stopped) return undefined;
    if (this.exited !== undefined) return `outbox relay loop exited: ${this.exited}`;
    const idle = now - this.lastTick;
    if (idle > this.stallAfterMs) return `outbox relay stalled: no progress for ${Math.round(idle / 1000)} s`;
    return undefined;
  }

  private tick(): void {
    this.lastTick = Date.now();
  }

  async stop(): Promise<void> {
    this.stopped = true;
    this.wake?.();
    await this.running;
  }

  private async loop(): Promise<void> {
    let failures = 0;
    while (!this.stopped) {
      this.tick();
      try {
        await this.session();
        failures = 0;
      } catch (error) {
        // A session that got as far as publishing was healthy: its loss starts the backoff afresh.
        failures = this.active ? 1 : failures + 1;
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
      ...pgClientConfig(this.options.databaseUrl, this.options.settings),
      application_name: `outbox-relay-${this.options.schema}`,
      // The server side must notice a vanished relay too, or the dead session keeps the advisory
      // lock (and every relay stays a standby) until the OS gives up on it, hours by default.
      // Its statements go by `id` (the next rows in id order, rows by id): without sequential and
      // bitmap scans, a backlog that grew faster than autovacuum's statistics is still read as the
      // first rows of the index, never collected and sorted whole (docs/design.md, "Keyed batch
      // statements"; a bitmap read of the range took 22 ms per batch in the bench).
      options: `-c search_path=${quoteIdent(this.options.schema)} -c tcp_keepalives_idle=30 -c tcp_keepalives_interval=10 -c tcp_keepalives_count=3 -c enable_seqscan=off -c enable_bitmapscan=off`,
      // A connection that stops answering (a network partition leaves no RST) fails a query
      // instead of hanging the loop; keepalive finds a dead peer while we idle in LISTEN.
      connectionTimeoutMillis: this.queryTimeoutMs,
      query_timeout: this.queryTimeoutMs,
      // The OS default waits two hours before its first probe; 30 s matches the server side.
      keepAlive: true,
      keepAliveInitialDelayMillis: 30_000,
    });
    if (this.options.metrics) countStatements(client, this.options.metrics);
    this.client = client;
    let lost: Error | undefined;
    client.on('error', (error) => {
      lost = error;
      this.wake?.();
    });
    await client.connect();
    while (!this.stopped) {
      this.tick();
      const { rows } = await client.query<{ locked: boolean }>(
        'SELECT pg_try_advisory_lock($1, $2) AS locked',
        this.lockKeys,
      );
      if (rows[0]?.locked) break;
      await this.sleep(this.standbyRetryMs);
      if (lost) throw lost;
    }
    if (this.stopped) return;
    // A new session reads from the head: what an earlier one read but did not publish is there.
    this.lastHeadRead = 0;
    this.setActive(true);
    this.options.logger.info({ schema: this.options.schema }, 'outbox relay active');
    client.on('notification', () => this.wake?.());
    await client.query(`LISTEN ${quoteIdent(outboxChannel(this.options.schema))}`);

    while (!this.stopped) {
      this.tick();
      if (lost) throw lost;
      const published = await this.publishBatch(client);
      if (published < this.batchSize) {
        await this.cleanup(client);
        await this.sleep(this.pollIntervalMs);
      }
    }
    await client.query('SELECT pg_advisory_unlock($1, $2)', this.lockKeys).catch(() => undefined);
  }

  /**
   * Publishes (or parks) the next rows in id order; returns how many rows it took off the queue.
   * It reads on from the last id it published: the index entries of the rows it deleted stay until
   * vacuum (and until no snapshot can see them), and reading from the head each time walked them all
   * again. A row that commits after rows with higher ids (its transaction began first) is below that
   * point: at most a second later the read starts from the head again and takes it.
   */
  private async publishBatch(client: pg.Client): Promise<number> {
    const fromHead = Date.now() - this.lastHeadRead >= HEAD_READ_INTERVAL_MS;
    if (fromHead) this.lastHeadRead = Date.now();
    const { rows } = await client.query<OutboxRow>(
      `SELECT id, event_id, topic, key, headers, payload, traceparent, tracestate
       FROM outbox WHERE published_at IS NULL AND id > $2 ORDER BY id LIMIT $1`,
      [this.batchSize, fromHead ? '0' : this.readFrom],
    );
    if (rows.length === 0) {
      // Caught up: the next read starts from the head, so nothing committed late waits for the timer.
      this.lastHeadRead = 0;
      return 0;
    }
    this.readFrom = (rows.at(-1) as OutboxRow).id;
    const { producer } = this.options;
    const limits = new Map<string, number>();
    for (const topic of new Set(rows.map((r) => r.topic))) limits.set(topic, await producer.maxMessageBytes(topic));
    const rowOf = new Map<RawRecord, OutboxRow>();
    const batches: Array<{ topic: string; records: RawRecord[] }> = [];
    const parking: Parking[] = [];
    // With tracing on, a `send <topic>` span per record, a child of the row's stored context.
    const spans = new Map<RawRecord, Span>();
    const finish = (records: readonly RawRecord[], error?: unknown) => {
      for (const record of records) {
        const span = spans.get(record);
        if (span) endSpans([span], error);
        spans.delete(record);
      }
    };
    for (const row of rows) {
      let record: RawRecord = { key: row.key, value: row.payload, headers: row.headers };
      const limitBytes = limits.get(row.topic) as number;
      if (!fitsAlone(record, limitBytes)) {
        parking.push({ row, bytes: recordBytes(record), limitBytes, reason: 'larger than the topic accepts' });
        continue;
      }
      if (tracingActive()) {
        const headers = { ...row.headers };
        const parent = remoteContext(row.traceparent, row.tracestate) ?? ROOT_CONTEXT;
        const info = { topic: row.topic, eventId: row.event_id, eventType: headers[HEADER.eventType] ?? '', headers };
        const span = startSendSpan(info, parent, { 'outreach.outbox.schema': this.options.schema });
        // A tracestate never costs a record its place: without room for it, the stored headers go.
        const traced: RawRecord = { ...record, headers };
        if (fitsAlone(traced, limitBytes)) record = traced;
        spans.set(record, span);
      }
      rowOf.set(record, row);
      // Consecutive rows of one topic stay together, in id order.
      const current = batches.at(-1);
      if (current?.topic === row.topic) current.records.push(record);
      else batches.push({ topic: row.topic, records: [record] });
    }
    if (parking.length > 0) await this.park(client, parking);
    this.options.logger.debug(
      { count: rows.length, firstId: rows[0]?.id, lastId: rows.at(-1)?.id },
      'publishing outbox batch',
    );
    // One request at a time, each marked published once Kafka has it, so a crash re-sends little.
    try {
      for (const request of planRequests(batches, (topic) => limits.get(topic) as number)) {
        const records = request.flatMap((b) => b.records);
        try {
          await producer.publishRaw(request);
          finish(records);
          await this.markPublished(
            client,
            records.map((r) => (rowOf.get(r) as OutboxRow).id),
          );
        } catch (error) {
          // The broker's limit is below the one we read (lowered since, or unreadable): one by one,
          // so only the records it refuses alone are parked.
          if (!isMessageTooLarge(error)) throw error;
          for (const record of records) {
            const parked = await this.publishAlone(client, rowOf.get(record) as OutboxRow, record);
            finish([record], parked ? 'parked: too large for its topic' : undefined);
          }
        }
        this.tick();
      }
    } catch (error) {
      finish([...spans.keys()], error);
      throw error;
    }
    this.options.logger.debug({ count: rows.length, parked: parking.length }, 'published outbox batch');
    this.stats.batches++;
    return rows.length;
  }

  /** Publishes one record, or parks it when the broker refuses it as too large (then true). */
  private async publishAlone(client: pg.Client, row: OutboxRow, record: RawRecord): Promise<boolean> {
    try {
      await this.options.producer.publishRaw([{ topic: row.topic, records: [record] }]);
      await this.markPublished(client, [row.id]);
      return false;
    } catch (error) {
      if (!isMessageTooLarge(error)) throw error;
      const limitBytes = await this.options.producer.maxMessageBytes(row.topic);
      const reason = `the broker refused it: ${error instanceof Error ? error.message : String(error)}`;
      await this.park(client, [{ row, bytes: recordBytes(record), limitBytes, reason }]);
      return true;
    }
  }

  /** A published row leaves the outbox (its event id stays in outbox_event_ids, which refuses a repeat). */
  private async markPublished(client: pg.Client, ids: readonly string[]): Promise<void> {
    await client.query('DELETE FROM outbox WHERE id = ANY($1::bigint[])', [ids]);
    this.stats.published += ids.length;
    this.publishedCounter?.inc(ids.length);
  }

  /** Moves rows that cannot be published to outbox_parked, in one statement. */
  private async park(client: pg.Client, parking: readonly Parking[]): Promise<void> {
    await client.query(
      `WITH moved AS (
         DELETE FROM outbox WHERE id = ANY($1::bigint[])
         RETURNING id, event_id, topic, key, headers, payload, created_at
       )
       INSERT INTO outbox_parked
         (outbox_id, event_id, topic, key, headers, payload, created_at, size_bytes, limit_bytes, reason)
       SELECT m.id, m.event_id, m.topic, m.key, m.headers, m.payload, m.created_at, p.bytes, p.limit_bytes, p.reason
       FROM moved m JOIN unnest($1::bigint[], $2::int[], $3::int[], $4::text[]) AS p(id, bytes, limit_bytes, reason)
         ON p.id = m.id
       ON CONFLICT (event_id) DO NOTHING`,
      [
        parking.map((p) => p.row.id),
        parking.map((p) => p.bytes),
        parking.map((p) => p.limitBytes),
        parking.map((p) => p.reason),
      ],
    );
    this.stats.parked += parking.length;
    this.parkedCounter?.inc(parking.length);
    for (const { row, bytes, limitBytes, reason } of parking) {
      this.options.logger.error(
        {
          alert: 'outbox_parked',
          outboxId: row.id,
          eventId: row.event_id,
          topic: row.topic,
          bytes,
          limitBytes,
          reason,
        },
        'outbox record too large for its topic: parked in outbox_parked (docs/operations.md, parked outbox records)',
      );
    }
  }

  private async cleanup(client: pg.Client): Promise<void> {
    if (Date.now() - this.lastCleanup < 60_000) return;
    this.lastCleanup = Date.now();
    await client.query(`DELETE FROM outbox_event_ids WHERE enqueued_at < now() - make_interval(secs => $1)`, [
      this.retentionMs / 1000,
    ]);
    // Rows a relay of the previous release marked published in place (a rolling upgrade): removed,
    // their ids kept (a process of that release enqueued them without one).
    await client.query(
      `WITH gone AS (DELETE FROM outbox WHERE published_at IS NOT NULL RETURNING event_id, published_at)
       INSERT INTO outbox_event_ids (event_id, enqueued_at) SELECT * FROM gone ON CONFLICT (event_id) DO NOTHING`,
    );
  }

  private setActive(active: boolean): void {
    this.active = active;
    this.activeGauge?.set(active ? 1 : 0);
  }

  private sleep(ms: number): Promise<void> {
    // A pause the loop chose is progress until it ends: the watchdog counts from its end.
    this.lastTick = Math.max(this.lastTick, Date.now() + ms);
    return new Promise((resolve) => {
      const timer = setTimeout(done, ms);
      const tick = () => this.tick();
      function done() {
        clearTimeout(timer);
        tick();
        resolve();
      }
      this.wake = done;
    });
  }
}
