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
  deadlines,
  project,
  stallAt,
  type ConversationInput,
  type Graces,
  type StallReason,
  type TimedInput,
} from '../domain/conversation.js';

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

  /** Stores new events and re-folds the conversations they touch; returns the recoveries emitted. */
  async project(events: readonly ProjectedEvent[]): Promise<ConversationRecovered[]> {
    if (events.length === 0) return [];
    return withTransaction(this.pool, async (client) => {
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
      if (touched.length === 0) return [];
      const first = new Map<string, ProjectedEvent>();
      for (const e of events) if (!first.has(e.conversationId)) first.set(e.conversationId, e);
      // Rows exist before they are locked, so two projectors serialize on the same row.
      await client.query(
        `INSERT INTO conversations (conversation_id, campaign_id, candidate_key, status)
         SELECT *, 'open' FROM unnest($1::text[], $2::text[], $3::text[]) ON CONFLICT (conversation_id) DO NOTHING`,
        [touched, touched.map((id) => first.get(id)?.campaignId), touched.map((id) => first.get(id)?.candidateKey)],
      );
      const current = await client.query<ConversationRow>(
        `SELECT ${COLUMNS} FROM conversations WHERE conversation_id = ANY($1::text[]) ORDER BY conversation_id FOR UPDATE`,
        [touched],
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
        [touched],
      );
      const now = ((await client.query<{ now: Date }>('SELECT now() AS now')).rows[0] as { now: Date }).now.getTime();
      const graces = await this.gracesFor(
        client,
        current.rows.map((r) => r.campaignId),
      );
      const recovered: ConversationRecovered[] = [];
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
      // One UPDATE for every touched conversation: the new states, column by column.
      const updates = {
        id: [] as string[],
        status: [] as string[],
        obligationSince: [] as Array<Date | null>,
        obligationKind: [] as Array<string | null>,
        pendingStepId: [] as Array<string | null>,
        dueAt: [] as Array<Date | null>,
        lastEventAt: [] as Array<Date | null>,
        lastEventType: [] as Array<string | null>,
        obligation: [] as Array<Date | null>,
        overdue: [] as Array<Date | null>,
        stall: [] as Array<Date | null>,
        healed: [] as boolean[],
      };
      for (const row of current.rows) {
        const state = project(timelines.get(row.conversationId) ?? []);
        const grace = graces.get(row.campaignId) ?? this.defaults;
        const due = deadlines(state, grace);
        const stallDeadline =
          [due.obligation, due.overdue].filter((d): d is number => d !== null).sort((a, b) => a - b)[0] ?? null;
        const healed = row.stalledReason !== null && stallAt(state, grace, now) === null;
        updates.id.push(row.conversationId);
        updates.status.push(state.status);
        updates.obligationSince.push(date(state.obligationSince));
        updates.obligationKind.push(state.obligationKind);
        updates.pendingStepId.push(state.pendingStepId);
        updates.dueAt.push(date(state.dueAt));
        updates.lastEventAt.push(date(state.lastEventAt));
        updates.lastEventType.push(state.lastEventType);
        updates.obligation.push(date(due.obligation));
        updates.overdue.push(date(due.overdue));
        updates.stall.push(date(stallDeadline));
        updates.healed.push(healed);
        if (healed) {
          const cause = events.find((e) => e.conversationId === row.conversationId);
          recovered.push({
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
          });
        }
      }
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
          updates.id,
          updates.status,
          updates.obligationSince,
          updates.obligationKind,
          updates.pendingStepId,
          updates.dueAt,
          updates.lastEventAt,
          updates.lastEventType,
          updates.obligation,
          updates.overdue,
          updates.stall,
          updates.healed,
        ],
      );
      await enqueueEvents(
        client,
        recovered.map((event) => ({ topic: this.livenessTopic, event })),
      );
      return recovered;
    });
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
           stalled_reason = CASE WHEN c.obligation_deadline <= now() THEN 'no_next_step' ELSE 'next_step_overdue' END,
           stalled_since = CASE WHEN c.obligation_deadline <= now() THEN c.obligation_since ELSE c.due_at END,
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

  /** `campaignId` in its canonical form (canonicalCampaignId): the form conversations are stored under. */
  async setGraces(campaignId: string, graces: Graces): Promise<number> {
    return withTransaction(this.pool, async (client) => {
      await client.query(
        `INSERT INTO campaign_graces (campaign_id, inbound_ms, outbound_ms, overdue_ms) VALUES ($1, $2, $3, $4)
         ON CONFLICT (campaign_id) DO UPDATE SET inbound_ms = $2, outbound_ms = $3, overdue_ms = $4, updated_at = now()`,
        [campaignId, graces.inboundMs, graces.outboundMs, graces.overdueMs],
      );
      const updated = await client.query(
        `UPDATE conversations SET
           obligation_deadline = obligation_since + make_interval(secs => (CASE obligation_kind WHEN 'inbound' THEN $2 ELSE $3 END)::float8 / 1000),
           overdue_deadline = due_at + make_interval(secs => $4::float8 / 1000),
           updated_at = now()
         WHERE campaign_id = $1 AND status = 'open'`,
        [campaignId, graces.inboundMs, graces.outboundMs, graces.overdueMs],
      );
      await client.query(
        `UPDATE conversations SET stall_deadline = least(obligation_deadline, overdue_deadline) WHERE campaign_id = $1 AND status = 'open'`,
        [campaignId],
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
