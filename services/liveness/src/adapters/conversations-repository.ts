/**
 * The liveness projection. Events are stored once (by event id) and each touched conversation is
 * re-folded from its stored events under a row lock, so redeliveries, out-of-order arrivals and two
 * projector instances (one per topic partition) all converge on the same state. Flags are set by
 * the sweep with `FOR UPDATE SKIP LOCKED` and a `stalled_reason IS NULL` guard: exactly once.
 */
import {
  enqueueEvents,
  uuidV5,
  withTransaction,
  type ConversationRecovered,
  type ConversationStalled,
  type OutgoingEvent,
} from '@outreach/shared';
import type { Pool, PoolClient } from 'pg';
import {
  refold,
  type ConversationInput,
  type Graces,
  type Refolded,
  type StallReason,
  type TimedInput,
} from '../domain/conversation.js';
import { deadlineAssignmentsSql, stallReasonSql, stallSinceSql } from './stall-sql.js';

export interface ProjectedEvent {
  readonly eventId: string;
  readonly conversationId: string;
  readonly campaignId: string;
  readonly candidateKey: string;
  /** The broker's append time (epoch ms). */
  readonly at: number;
  readonly position: readonly [topic: string, partition: number, offset: number];
  readonly input: ConversationInput;
  readonly correlationId: string;
}

/** A synthetic history for load tests: `count` conversations holding this one event, and its fold. */
export interface SyntheticTemplate {
  readonly count: number;
  readonly event: Pick<TimedInput, 'at' | 'input'>;
  readonly folded: Refolded;
}

export interface ConversationRow {
  readonly conversationId: string;
  readonly campaignId: string;
  readonly candidateKey: string;
  readonly status: 'open' | 'closed';
  readonly obligationSince: Date | null;
  readonly obligationKind: 'inbound' | 'outbound' | null;
  readonly pendingStepId: string | null;
  readonly dueAt: Date | null;
  readonly lastEventAt: Date | null;
  readonly lastEventType: string | null;
  readonly stalledReason: StallReason | null;
  readonly stalledSince: Date | null;
  readonly flaggedAt: Date | null;
  readonly stallCount: number;
  readonly stallDeadline: Date | null;
}

function columns(p = ''): string {
  return `${p}conversation_id AS "conversationId", ${p}campaign_id AS "campaignId", ${p}candidate_key AS "candidateKey", ${p}status,
  ${p}obligation_since AS "obligationSince", ${p}obligation_kind AS "obligationKind", ${p}pending_step_id AS "pendingStepId",
  ${p}due_at AS "dueAt", ${p}last_event_at AS "lastEventAt", ${p}last_event_type AS "lastEventType",
  ${p}stalled_reason AS "stalledReason", ${p}stalled_since AS "stalledSince", ${p}flagged_at AS "flaggedAt",
  ${p}stall_count AS "stallCount", ${p}stall_deadline AS "stallDeadline"`;
}
const COLUMNS = columns();

const date = (ms: number | null) => (ms === null ? null : new Date(ms));

// The rules' SQL, generated from the domain's stall rules (stall-sql.ts).
const SWEPT_REASON = stallReasonSql('c.');
const SWEPT_SINCE = stallSinceSql('c.');
const GRACE_DEADLINES = deadlineAssignmentsSql({ inboundMs: '$2', outboundMs: '$3', overdueMs: '$4' });

/** The recovery of a flagged conversation, caused by (the first of) the events that healed it. */
function recovery(row: ConversationRow, cause: ProjectedEvent | undefined, now: number): ConversationRecovered {
  return {
    type: 'ConversationRecovered',
    eventId: uuidV5('conversation-recovered', row.conversationId, String(row.stallCount)),
    occurredAt: now,
    producer: 'liveness',
    correlationId: cause?.correlationId ?? row.conversationId,
    causationId: cause?.eventId ?? null,
    conversationId: row.conversationId,
    campaignId: row.campaignId,
    candidateKey: row.candidateKey,
    reason: row.stalledReason as StallReason,
    recoveredAt: now,
  };
}

export class ConversationsRepository {
  constructor(
    private readonly pool: Pool,
    private readonly livenessTopic: string,
    private readonly defaults: Graces,
  ) {}

  private async gracesFor(client: PoolClient, campaignIds: readonly string[]): Promise<Map<string, Graces>> {
    const { rows } = await client.query<{
      campaignId: string;
      inboundMs: string;
      outboundMs: string;
      overdueMs: string;
    }>(
      `SELECT campaign_id AS "campaignId", inbound_ms AS "inboundMs", outbound_ms AS "outboundMs", overdue_ms AS "overdueMs"
       FROM campaign_graces WHERE campaign_id = ANY($1::text[])`,
      [campaignIds],
    );
    const graces = new Map<string, Graces>();
    for (const r of rows)
      graces.set(r.campaignId, {
        inboundMs: Number(r.inboundMs),
        outboundMs: Number(r.outboundMs),
        overdueMs: Number(r.overdueMs),
      });
    return graces;
  }

  /**
   * Stores new events and re-folds the conversations they touch; returns the recoveries emitted.
   * Three steps in one transaction: store the events, load the touched conversations (locked) with
   * their stored events, fold each through the domain (`refold`), persist the results.
   */
  async project(events: readonly ProjectedEvent[]): Promise<ConversationRecovered[]> {
    if (events.length === 0) return [];
    return withTransaction(this.pool, async (client) => {
      const touched = await this.store(client, events);
      if (touched.length === 0) return [];
      const { conversations, now } = await this.load(client, touched);
      const folded = conversations.map(({ row, timeline, graces }) => ({
        row,
        ...refold(timeline, graces, now, row.stalledReason !== null),
      }));
      const recovered = folded
        .filter((c) => c.healed)
        .map((c) =>
          recovery(
            c.row,
            events.find((e) => e.conversationId === c.row.conversationId),
            now,
          ),
        );
      await this.persist(client, folded, recovered);
      return recovered;
    });
  }

  /** Stores the events not stored yet (by event id); returns the conversations they touch, sorted. */
  private async store(client: PoolClient, events: readonly ProjectedEvent[]): Promise<string[]> {
    const inserted = await client.query<{ conversationId: string }>(
      `INSERT INTO conversation_events (event_id, conversation_id, event_type, event_time, payload, source_topic, source_partition, source_offset)
       SELECT * FROM unnest($1::uuid[], $2::text[], $3::text[], $4::timestamptz[], $5::jsonb[], $6::text[], $7::int[], $8::bigint[])
       ON CONFLICT (event_id) DO NOTHING
       RETURNING conversation_id AS "conversationId"`,
      [
        events.map((e) => e.eventId),
        events.map((e) => e.conversationId),
        events.map((e) => e.input.type),
        events.map((e) => new Date(e.at)),
        events.map((e) => JSON.stringify(e.input)),
        events.map((e) => e.position[0]),
        events.map((e) => e.position[1]),
        events.map((e) => e.position[2]),
      ],
    );
    const touched = [...new Set(inserted.rows.map((r) => r.conversationId))].sort();
    if (touched.length === 0) return touched;
    const first = new Map<string, ProjectedEvent>();
    for (const e of events) if (!first.has(e.conversationId)) first.set(e.conversationId, e);
    // Rows exist before they are locked, so two projectors serialize on the same row.
    await client.query(
      `INSERT INTO conversations (conversation_id, campaign_id, candidate_key, status)
       SELECT *, 'open' FROM unnest($1::text[], $2::text[], $3::text[]) ON CONFLICT (conversation_id) DO NOTHING`,
      [touched, touched.map((id) => first.get(id)?.campaignId), touched.map((id) => first.get(id)?.candidateKey)],
    );
    return touched;
  }

  /** Locks the conversations (in id order) and reads what their fold needs: stored events, graces, the database clock. */
  private async load(
    client: PoolClient,
    conversationIds: readonly string[],
  ): Promise<{
    conversations: Array<{ row: ConversationRow; timeline: TimedInput[]; graces: Graces }>;
    now: number;
  }> {
    const current = await client.query<ConversationRow>(
      `SELECT ${COLUMNS} FROM conversations WHERE conversation_id = ANY($1::text[]) ORDER BY conversation_id FOR UPDATE`,
      [conversationIds],
    );
    const stored = await client.query<{
      conversationId: string;
      eventId: string;
      at: Date;
      payload: ConversationInput;
      topic: string;
      partition: number;
      offset: string;
    }>(
      `SELECT conversation_id AS "conversationId", event_id AS "eventId", event_time AS at, payload,
              source_topic AS topic, source_partition AS partition, source_offset AS offset
       FROM conversation_events WHERE conversation_id = ANY($1::text[])`,
      [conversationIds],
    );
    const now = ((await client.query<{ now: Date }>('SELECT now() AS now')).rows[0] as { now: Date }).now.getTime();
    const graces = await this.gracesFor(
      client,
      current.rows.map((r) => r.campaignId),
    );
    const timelines = new Map<string, TimedInput[]>();
    for (const e of stored.rows) {
      const timeline = timelines.get(e.conversationId) ?? [];
      timeline.push({
        eventId: e.eventId,
        at: e.at.getTime(),
        position: [e.topic, e.partition, Number(e.offset)] as const,
        input: e.payload,
      });
      timelines.set(e.conversationId, timeline);
    }
    return {
      conversations: current.rows.map((row) => ({
        row,
        timeline: timelines.get(row.conversationId) ?? [],
        graces: graces.get(row.campaignId) ?? this.defaults,
      })),
      now,
    };
  }

  /** Writes the folded states in one UPDATE (column by column) and enqueues the recoveries. */
  private async persist(
    client: PoolClient,
    folded: ReadonlyArray<Refolded & { row: ConversationRow }>,
    recovered: readonly ConversationRecovered[],
  ): Promise<void> {
    await client.query(
      `UPDATE conversations SET status = u.status, obligation_since = u.obligation_since,
              obligation_kind = u.obligation_kind, pending_step_id = u.pending_step_id, due_at = u.due_at,
              last_event_at = u.last_event_at, last_event_type = u.last_event_type,
              obligation_deadline = u.obligation_deadline, overdue_deadline = u.overdue_deadline,
              stall_deadline = u.stall_deadline,
              stalled_reason = CASE WHEN u.healed THEN NULL ELSE conversations.stalled_reason END,
              stalled_since = CASE WHEN u.healed THEN NULL ELSE conversations.stalled_since END,
              flagged_at = CASE WHEN u.healed THEN NULL ELSE conversations.flagged_at END,
              updated_at = now()
       FROM unnest($1::text[], $2::text[], $3::timestamptz[], $4::text[], $5::text[], $6::timestamptz[],
                   $7::timestamptz[], $8::text[], $9::timestamptz[], $10::timestamptz[], $11::timestamptz[], $12::bool[])
         AS u(conversation_id, status, obligation_since, obligation_kind, pending_step_id, due_at, last_event_at,
              last_event_type, obligation_deadline, overdue_deadline, stall_deadline, healed)
       WHERE conversations.conversation_id = u.conversation_id`,
      [
        folded.map((c) => c.row.conversationId),
        folded.map((c) => c.state.status),
        folded.map((c) => date(c.state.obligationSince)),
        folded.map((c) => c.state.obligationKind),
        folded.map((c) => c.state.pendingStepId),
        folded.map((c) => date(c.state.dueAt)),
        folded.map((c) => date(c.state.lastEventAt)),
        folded.map((c) => c.state.lastEventType),
        folded.map((c) => date(c.deadlines.obligation)),
        folded.map((c) => date(c.deadlines.overdue)),
        folded.map((c) => date(c.stallDeadline)),
        folded.map((c) => c.healed),
      ],
    );
    await enqueueEvents(
      client,
      recovered.map((event) => ({ topic: this.livenessTopic, event })),
    );
  }

  /** Flags every conversation whose stall deadline passed (database clock), each exactly once. */
  async sweep(limit: number): Promise<ConversationStalled[]> {
    return withTransaction(this.pool, async (client) => {
      const { rows } = await client.query<ConversationRow>(
        `WITH due AS (
           SELECT conversation_id FROM conversations
           WHERE status = 'open' AND stalled_reason IS NULL AND stall_deadline <= now()
           ORDER BY stall_deadline LIMIT $1 FOR UPDATE SKIP LOCKED)
         UPDATE conversations c SET
           stalled_reason = ${SWEPT_REASON}, stalled_since = ${SWEPT_SINCE},
           -- Millisecond precision, so the API's keyset cursor (a JSON date) is exact.
           flagged_at = date_trunc('milliseconds', now()), stall_count = c.stall_count + 1, updated_at = now()
         FROM due WHERE c.conversation_id = due.conversation_id
         RETURNING ${columns('c.')}`,
        [limit],
      );
      const events: OutgoingEvent[] = rows.map((row) => {
        const event: ConversationStalled = {
          type: 'ConversationStalled',
          eventId: uuidV5('conversation-stalled', row.conversationId, String(row.stallCount)),
          occurredAt: (row.flaggedAt as Date).getTime(),
          producer: 'liveness',
          correlationId: row.conversationId,
          causationId: null,
          conversationId: row.conversationId,
          campaignId: row.campaignId,
          candidateKey: row.candidateKey,
          reason: row.stalledReason as StallReason,
          since: (row.stalledSince as Date).getTime(),
          detectedAt: (row.flaggedAt as Date).getTime(),
        };
        return { topic: this.livenessTopic, event };
      });
      await enqueueEvents(client, events);
      return events.map((e) => e.event as ConversationStalled);
    });
  }

  /**
   * Synthetic conversations for load tests (cli/seed.ts): each template's `count` conversations
   * `<campaignId>:seed-<i>` (numbered on across templates) get its one event and the state folded
   * from it. A campaign that has conversations is refused, so synthetic rows never mix with real ones.
   */
  async seedSynthetic(
    campaignId: string,
    templates: readonly SyntheticTemplate[],
  ): Promise<{ kind: 'seeded'; count: number } | { kind: 'campaign-in-use' }> {
    return withTransaction(this.pool, async (client) => {
      const inUse = await client.query('SELECT 1 FROM conversations WHERE campaign_id = $1 LIMIT 1', [campaignId]);
      if (inUse.rows.length > 0) return { kind: 'campaign-in-use' };
      let next = 1;
      const ranges = templates.map((t) => {
        const range = { first: next, last: next + t.count - 1 };
        next += t.count;
        return range;
      });
      const inserted = await client.query(
        `INSERT INTO conversations (conversation_id, campaign_id, candidate_key, status, obligation_since, obligation_kind,
                                    pending_step_id, due_at, last_event_at, last_event_type, obligation_deadline,
                                    overdue_deadline, stall_deadline)
         SELECT $1 || ':seed-' || i, $1, 'seed-' || i, t.status, t.obligation_since, t.obligation_kind, t.pending_step_id,
                t.due_at, t.last_event_at, t.last_event_type, t.obligation_deadline, t.overdue_deadline, t.stall_deadline
         FROM unnest($2::int[], $3::int[], $4::text[], $5::timestamptz[], $6::text[], $7::text[], $8::timestamptz[],
                     $9::timestamptz[], $10::text[], $11::timestamptz[], $12::timestamptz[], $13::timestamptz[])
                AS t(first, last, status, obligation_since, obligation_kind, pending_step_id, due_at, last_event_at,
                     last_event_type, obligation_deadline, overdue_deadline, stall_deadline),
              generate_series(t.first, t.last) AS i`,
        [
          campaignId,
          ranges.map((r) => r.first),
          ranges.map((r) => r.last),
          templates.map((t) => t.folded.state.status),
          templates.map((t) => date(t.folded.state.obligationSince)),
          templates.map((t) => t.folded.state.obligationKind),
          templates.map((t) => t.folded.state.pendingStepId),
          templates.map((t) => date(t.folded.state.dueAt)),
          templates.map((t) => date(t.folded.state.lastEventAt)),
          templates.map((t) => t.folded.state.lastEventType),
          templates.map((t) => date(t.folded.deadlines.obligation)),
          templates.map((t) => date(t.folded.deadlines.overdue)),
          templates.map((t) => date(t.folded.stallDeadline)),
        ],
      );
      // The events are stored too, so a later event re-folds these conversations as it would real ones.
      // Ids are derived (md5 of campaign and number): no clash with real, uuidV5 event ids.
      await client.query(
        `INSERT INTO conversation_events (event_id, conversation_id, event_type, event_time, payload, source_topic,
                                          source_partition, source_offset)
         SELECT md5('liveness-seed:' || $1 || ':' || i)::uuid, $1 || ':seed-' || i, t.type, t.at, t.payload,
                'liveness-seed', 0, i
         FROM unnest($2::int[], $3::int[], $4::text[], $5::timestamptz[], $6::jsonb[]) AS t(first, last, type, at, payload),
              generate_series(t.first, t.last) AS i`,
        [
          campaignId,
          ranges.map((r) => r.first),
          ranges.map((r) => r.last),
          templates.map((t) => t.event.input.type),
          templates.map((t) => new Date(t.event.at)),
          templates.map((t) => JSON.stringify(t.event.input)),
        ],
      );
      return { kind: 'seeded', count: inserted.rowCount ?? 0 };
    });
  }

  /** Fresh planner statistics after a bulk load, so the sweep's plan is the one it gets in production. */
  async analyze(): Promise<void> {
    await this.pool.query('ANALYZE conversations, conversation_events');
  }

  /** The database clock (epoch ms): every deadline is compared with it. */
  async now(): Promise<number> {
    const { rows } = await this.pool.query<{ now: Date }>('SELECT now() AS now');
    return (rows[0] as { now: Date }).now.getTime();
  }

  /** `campaignId` in its canonical form (canonicalCampaignId): the form conversations are stored under. */
  async setGraces(campaignId: string, graces: Graces): Promise<number> {
    return withTransaction(this.pool, async (client) => {
      await client.query(
        `INSERT INTO campaign_graces (campaign_id, inbound_ms, outbound_ms, overdue_ms) VALUES ($1, $2, $3, $4)
         ON CONFLICT (campaign_id) DO UPDATE SET inbound_ms = $2, outbound_ms = $3, overdue_ms = $4, updated_at = now()`,
        [campaignId, graces.inboundMs, graces.outboundMs, graces.overdueMs],
      );
      const updated = await client.query(
        `UPDATE conversations SET ${GRACE_DEADLINES}, updated_at = now() WHERE campaign_id = $1 AND status = 'open'`,
        [campaignId, graces.inboundMs, graces.outboundMs, graces.overdueMs],
      );
      return updated.rowCount ?? 0;
    });
  }

  async graces(campaignId: string): Promise<Graces & { source: 'campaign' | 'default' }> {
    const client = await this.pool.connect();
    try {
      const found = (await this.gracesFor(client, [campaignId])).get(campaignId);
      return found ? { ...found, source: 'campaign' } : { ...this.defaults, source: 'default' };
    } finally {
      client.release();
    }
  }

  async find(conversationId: string): Promise<ConversationRow | undefined> {
    const { rows } = await this.pool.query<ConversationRow>(
      `SELECT ${COLUMNS} FROM conversations WHERE conversation_id = $1`,
      [conversationId],
    );
    return rows[0];
  }

  async timeline(
    conversationId: string,
  ): Promise<Array<{ eventId: string; type: string; at: Date; payload: unknown }>> {
    const { rows } = await this.pool.query<{ eventId: string; type: string; at: Date; payload: unknown }>(
      `SELECT event_id AS "eventId", event_type AS type, event_time AS at, payload FROM conversation_events
       WHERE conversation_id = $1 ORDER BY event_time, source_topic, source_partition, source_offset`,
      [conversationId],
    );
    return rows;
  }

  /** Stalled conversations, newest flags last, keyset-paged by (flagged_at, conversation_id). */
  async stalled(filter: {
    campaignId?: string;
    reason?: StallReason;
    limit: number;
    after?: { flaggedAt: Date; conversationId: string };
  }) {
    const { rows } = await this.pool.query<ConversationRow>(
      `SELECT ${COLUMNS} FROM conversations
       WHERE stalled_reason IS NOT NULL
         AND ($1::text IS NULL OR campaign_id = $1) AND ($2::text IS NULL OR stalled_reason = $2)
         AND ($3::timestamptz IS NULL OR (flagged_at, conversation_id) > ($3, $4))
       ORDER BY flagged_at, conversation_id LIMIT $5`,
      [
        filter.campaignId ?? null,
        filter.reason ?? null,
        filter.after?.flaggedAt ?? null,
        filter.after?.conversationId ?? null,
        filter.limit,
      ],
    );
    return rows;
  }

  async stalledCounts(): Promise<Record<StallReason, number>> {
    const { rows } = await this.pool.query<{ reason: StallReason; n: number }>(
      `SELECT stalled_reason AS reason, count(*)::int AS n FROM conversations WHERE stalled_reason IS NOT NULL GROUP BY stalled_reason`,
    );
    const counts: Record<StallReason, number> = { no_next_step: 0, next_step_overdue: 0 };
    for (const row of rows) counts[row.reason] = row.n;
    return counts;
  }

  async oldestObligationAgeSeconds(): Promise<number> {
    const { rows } = await this.pool.query<{ age: number | null }>(
      `SELECT extract(epoch FROM now() - min(obligation_since))::float8 AS age FROM conversations WHERE status = 'open' AND obligation_since IS NOT NULL`,
    );
    return rows[0]?.age ?? 0;
  }

  /** The projection's state columns (not the flags, which depend on when sweeps ran): what a rebuild must reproduce. */
  async snapshot(): Promise<unknown[]> {
    const { rows } = await this.pool.query(
      `SELECT conversation_id, campaign_id, candidate_key, status, obligation_since, obligation_kind, pending_step_id, due_at,
              last_event_at, last_event_type, obligation_deadline, overdue_deadline, stall_deadline
       FROM conversations ORDER BY conversation_id`,
    );
    return rows;
  }
}
