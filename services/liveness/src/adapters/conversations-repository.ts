/**
 * The liveness projection's storage. Events are stored once (by event id) and each touched
 * conversation is re-folded from its stored events under a row lock (the projector workflow runs the
 * domain's decider, domain/conversation-decider.ts, through `runCommands` with `conversations`, the
 * aggregate store: it loads locked and applies), so redeliveries, out-of-order arrivals and two
 * projector instances (one per topic partition) all converge on the same state. A conversation the
 * batch creates (its events all stored now, none moved to it) is decided from the batch's events and
 * inserted as projected (`insertFresh`): nothing else can be stored under it, since every transaction
 * that stores an event under a conversation also creates its row or finds it; where the insert finds
 * the row after all, the conversation takes the locked path. The sweep flags
 * stalls and closes conversations whose reply window ended, with `FOR UPDATE SKIP LOCKED` and a
 * `status = 'open' AND stalled_reason IS NULL` guard: each exactly once.
 *
 * A send that names no conversation (SendRecorded before it carried one) is filed by its step: under
 * the conversation of the earliest plan (SequencePlanned, by log order) listing (campaign, candidate,
 * step), else under the default `<campaignId>:<candidateKey>`. A plan that arrives after such a send
 * moves it. Plans and such sends take a transaction-scoped advisory lock per (campaign, candidate),
 * so a plan and a send projected at once by two instances (one per topic) see each other.
 */
import {
  enqueueEvents,
  withTransaction,
  type AggregateStore,
  type Decided,
  type OutgoingEvent,
} from '@outreach/shared';
import {
  canonicalCorrelationId,
  uuidV5,
  type ConversationClosed,
  type ConversationRecovered,
  type ConversationStalled,
} from '@outreach/contracts';
import type { Pool, PoolClient } from 'pg';
import type {
  ConversationChange,
  ConversationProjected,
  ProjectConversation,
  StoredConversation,
} from '../domain/conversation-decider.js';
import {
  gracesOf,
  type CloseReason,
  type ConversationInput,
  type GraceSettings,
  type Graces,
  type Refolded,
  type StallReason,
  type TimedInput,
} from '../domain/conversation.js';
import { deadlineAssignmentsSql, sweepVerdictSql } from './stall-sql.js';

export interface ProjectedEvent {
  readonly eventId: string;
  /** For a send filed by its step (`routeStep`), the default conversation; the repository may file it elsewhere. */
  readonly conversationId: string;
  readonly campaignId: string;
  readonly candidateKey: string;
  /** The broker's append time (epoch ms). */
  readonly at: number;
  readonly position: readonly [topic: string, partition: number, offset: number];
  readonly input: ConversationInput;
  readonly correlationId: string;
  /** A send that names no conversation: filed by the plan listing (campaignId, candidateKey, this step). */
  readonly routeStep?: string;
}

export type { GraceSettings };

/** What one sweep did: the stalls it flagged and the conversations it closed. */
export interface SweepResult {
  readonly stalled: ConversationStalled[];
  readonly closed: ConversationClosed[];
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
  readonly awaitingReplySince: Date | null;
  readonly closedReason: string | null;
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
  ${p}due_at AS "dueAt", ${p}awaiting_reply_since AS "awaitingReplySince", ${p}closed_reason AS "closedReason",
  ${p}last_event_at AS "lastEventAt", ${p}last_event_type AS "lastEventType",
  ${p}stalled_reason AS "stalledReason", ${p}stalled_since AS "stalledSince", ${p}flagged_at AS "flaggedAt",
  ${p}stall_count AS "stallCount", ${p}stall_deadline AS "stallDeadline"`;
}
const COLUMNS = columns();

const date = (ms: number | null) => (ms === null ? null : new Date(ms));

/** A conversation the batch may have created: its events, all stored now, are its whole history. */
export interface FreshConversation {
  readonly conversationId: string;
  readonly campaignId: string;
  readonly candidateKey: string;
  readonly history: readonly TimedInput[];
}

function timedInputOf(e: ProjectedEvent): TimedInput {
  return { eventId: e.eventId, at: e.at, position: e.position, input: e.input };
}

/**
 * A projection's columns, as arrays in this order: conversation_id, status, obligation_since,
 * obligation_kind, pending_step_id, due_at, last_event_at, last_event_type, obligation_deadline,
 * overdue_deadline, stall_deadline, awaiting_reply_since, closed_reason, reply_deadline.
 */
function projectionColumns(projected: readonly ConversationProjected[]): unknown[][] {
  return [
    projected.map((c) => c.conversationId),
    projected.map((c) => c.state.status),
    projected.map((c) => date(c.state.obligationSince)),
    projected.map((c) => c.state.obligationKind),
    projected.map((c) => c.state.pendingStepId),
    projected.map((c) => date(c.state.dueAt)),
    projected.map((c) => date(c.state.lastEventAt)),
    projected.map((c) => c.state.lastEventType),
    projected.map((c) => date(c.deadlines.obligation)),
    projected.map((c) => date(c.deadlines.overdue)),
    projected.map((c) => date(c.stallDeadline)),
    projected.map((c) => date(c.state.awaitingReplySince)),
    projected.map((c) => c.state.closedReason),
    projected.map((c) => date(c.deadlines.reply)),
  ];
}

// The rules' SQL, generated from the domain's deadline rules (stall-sql.ts).
const VERDICT = sweepVerdictSql('c.');
const GRACE_DEADLINES = deadlineAssignmentsSql({
  inboundMs: '$2',
  outboundMs: '$3',
  overdueMs: '$4',
  replyWindowMs: '$5',
});

/** Orders plans as the fold orders events (append time, log position, event id), byte-wise as JavaScript does. */
const PLAN_ORDER = `planned_at, source_topic COLLATE "C", source_partition, source_offset, event_id`;

/** The key a send filed by its step is routed by. */
function routeKey(campaignId: string, candidateKey: string, step: string): string {
  return `${campaignId}\u0000${candidateKey}\u0000${step}`;
}

export class ConversationsRepository {
  /** The tuple ids of the rows `load` locked, per transaction (its client), until `apply` uses them. */
  private readonly lockedRows = new WeakMap<PoolClient, Map<string, string>>();

  constructor(
    readonly pool: Pool,
    /** Stalls and recoveries go to conversation.liveness.v1; closes are conversation events. */
    private readonly topics: { readonly liveness: string; readonly conversationEvents: string },
    /** The service's graces, for campaigns that have none stored. */
    readonly defaults: Graces,
  ) {}

  /** The campaigns' graces as stored (a campaign with none is absent). */
  async graceSettings(client: PoolClient, campaignIds: readonly string[]): Promise<Map<string, GraceSettings>> {
    const { rows } = await client.query<{
      campaignId: string;
      inboundMs: string;
      outboundMs: string;
      overdueMs: string;
      replyWindowMs: string | null;
    }>(
      `SELECT campaign_id AS "campaignId", inbound_ms AS "inboundMs", outbound_ms AS "outboundMs", overdue_ms AS "overdueMs",
              reply_window_ms AS "replyWindowMs"
       FROM campaign_graces WHERE campaign_id = ANY($1::text[])`,
      [campaignIds],
    );
    return new Map(
      rows.map((r) => [
        r.campaignId,
        {
          inboundMs: Number(r.inboundMs),
          outboundMs: Number(r.outboundMs),
          overdueMs: Number(r.overdueMs),
          replyWindowMs: r.replyWindowMs === null ? null : Number(r.replyWindowMs),
        },
      ]),
    );
  }

  /**
   * Stores the events not stored yet (by event id), filing each send that names no conversation by
   * its step; records the plans' steps and moves sends filed before their plan arrived. Returns the
   * conversations touched, sorted, and the events as filed. The first step of the projection, in its
   * transaction: the touched conversations' rows exist afterwards, so they can be locked.
   */
  async record(
    client: PoolClient,
    events: readonly ProjectedEvent[],
  ): Promise<{ touched: string[]; filed: ProjectedEvent[]; fresh: FreshConversation[] }> {
    const plans = events.flatMap((e) =>
      e.input.type === 'SequencePlanned' ? e.input.steps.map((step) => ({ event: e, step })) : [],
    );
    const unrouted = events.filter((e) => e.routeStep !== undefined);
    if (plans.length > 0 || unrouted.length > 0) {
      await this.lockCandidates(client, [...plans.map((p) => p.event), ...unrouted]);
    }
    if (plans.length > 0) await this.recordPlans(client, plans);
    const owners = await this.owners(client, unrouted);
    const filed = events.map((e) =>
      e.routeStep === undefined
        ? e
        : { ...e, conversationId: owners.get(routeKey(e.campaignId, e.candidateKey, e.routeStep)) ?? e.conversationId },
    );
    const inserted = await client.query<{ conversationId: string; eventId: string }>(
      `INSERT INTO conversation_events (event_id, conversation_id, event_type, event_time, payload, source_topic, source_partition,
                                        source_offset, route_campaign_id, route_candidate_key, route_step)
       SELECT * FROM unnest($1::uuid[], $2::text[], $3::text[], $4::timestamptz[], $5::jsonb[], $6::text[], $7::int[], $8::bigint[],
                            $9::text[], $10::text[], $11::text[])
       ON CONFLICT (event_id) DO NOTHING
       RETURNING conversation_id AS "conversationId", event_id AS "eventId"`,
      [
        filed.map((e) => e.eventId),
        filed.map((e) => e.conversationId),
        filed.map((e) => e.input.type),
        filed.map((e) => new Date(e.at)),
        filed.map((e) => JSON.stringify(e.input)),
        filed.map((e) => e.position[0]),
        filed.map((e) => e.position[1]),
        filed.map((e) => e.position[2]),
        filed.map((e) => (e.routeStep === undefined ? null : e.campaignId)),
        filed.map((e) => (e.routeStep === undefined ? null : e.candidateKey)),
        filed.map((e) => e.routeStep ?? null),
      ],
    );
    const moved = plans.length > 0 ? await this.reroute(client, plans) : [];
    const touched = [
      ...new Set([...inserted.rows.map((r) => r.conversationId), ...moved.flatMap((m) => [m.from, m.to])]),
    ].sort();
    if (touched.length === 0) return { touched, filed, fresh: [] };
    const owner = new Map<string, { campaignId: string; candidateKey: string }>();
    for (const e of [...filed, ...moved.map((m) => ({ conversationId: m.to, ...m }))])
      if (!owner.has(e.conversationId)) owner.set(e.conversationId, e);
    // A conversation may be new: every event of the batch filed under it was stored now, and no
    // stored event moved to it. The projector projects those from the batch alone and inserts the
    // projection (insertFresh); where the row exists after all, they take the locked path.
    const storedNow = new Set(inserted.rows.map((r) => r.eventId));
    const batchEvents = new Map<string, ProjectedEvent[]>();
    for (const e of filed) batchEvents.set(e.conversationId, [...(batchEvents.get(e.conversationId) ?? []), e]);
    // A conversation a move touched (either way) takes the locked path: its stored events are not the batch's.
    const touchedByMove = new Set(moved.flatMap((m) => [m.to, m.from]));
    const fresh: FreshConversation[] = [];
    for (const [conversationId, mine] of batchEvents) {
      if (touchedByMove.has(conversationId) || !mine.every((e) => storedNow.has(e.eventId))) continue;
      const { campaignId, candidateKey } = mine[0] as ProjectedEvent;
      fresh.push({ conversationId, campaignId, candidateKey, history: mine.map(timedInputOf) });
    }
    // The other rows exist before they are locked, so two projectors serialize on the same row. (A
    // send's former conversation, the only one not in this batch, has its row already.)
    const freshIds = new Set(fresh.map((f) => f.conversationId));
    const others = touched.filter((id) => owner.has(id) && !freshIds.has(id));
    await this.insertDefaults(client, others, owner);
    return { touched, filed, fresh };
  }

  /** Rows for conversations about to be locked: open, nothing projected yet. */
  async insertDefaults(
    client: PoolClient,
    ids: readonly string[],
    owner: ReadonlyMap<string, { readonly campaignId: string; readonly candidateKey: string }>,
  ): Promise<void> {
    if (ids.length === 0) return;
    await client.query(
      `INSERT INTO conversations (conversation_id, campaign_id, candidate_key, status)
       SELECT *, 'open' FROM unnest($1::text[], $2::text[], $3::text[]) ON CONFLICT (conversation_id) DO NOTHING`,
      [ids, ids.map((id) => owner.get(id)?.campaignId), ids.map((id) => owner.get(id)?.candidateKey)],
    );
  }

  /**
   * Inserts the projections of conversations projected from the batch alone, where no row exists
   * (ON CONFLICT DO NOTHING: a row another transaction created waits for it, then is left alone).
   * Returns the ids inserted; the rest take the locked path (a default row first, then `conversations`).
   */
  async insertFresh(
    client: PoolClient,
    projected: ReadonlyArray<{ readonly fresh: FreshConversation; readonly projection: ConversationProjected }>,
  ): Promise<Set<string>> {
    if (projected.length === 0) return new Set();
    const columns = projectionColumns(projected.map((p) => p.projection));
    const { rows } = await client.query<{ conversationId: string }>(
      `INSERT INTO conversations (conversation_id, status, obligation_since, obligation_kind, pending_step_id, due_at,
                                  last_event_at, last_event_type, obligation_deadline, overdue_deadline, stall_deadline,
                                  awaiting_reply_since, closed_reason, reply_deadline, campaign_id, candidate_key)
       SELECT * FROM unnest($1::text[], $2::text[], $3::timestamptz[], $4::text[], $5::text[], $6::timestamptz[],
                            $7::timestamptz[], $8::text[], $9::timestamptz[], $10::timestamptz[], $11::timestamptz[],
                            $12::timestamptz[], $13::text[], $14::timestamptz[], $15::text[], $16::text[])
       ON CONFLICT (conversation_id) DO NOTHING
       RETURNING conversation_id AS "conversationId"`,
      [...columns, projected.map((p) => p.fresh.campaignId), projected.map((p) => p.fresh.candidateKey)],
    );
    return new Set(rows.map((r) => r.conversationId));
  }

  /**
   * Serializes the plans and step-filed sends of each (campaign, candidate) across instances: a plan
   * projected with such a send in another transaction either sees it stored (and moves it) or is
   * seen by it. Locks in one order, so two batches never wait on each other in a cycle.
   */
  private async lockCandidates(client: PoolClient, events: readonly ProjectedEvent[]): Promise<void> {
    await client.query(
      `SELECT pg_advisory_xact_lock(key) FROM (
         SELECT DISTINCT hashtextextended(length(c) || ':' || c || k, 0) AS key FROM unnest($1::text[], $2::text[]) AS u(c, k)
         ORDER BY key) AS keys`,
      [events.map((e) => e.campaignId), events.map((e) => e.candidateKey)],
    );
  }

  /** Each planned step's conversation: the earliest plan that lists it (log order) owns it. */
  private async recordPlans(
    client: PoolClient,
    plans: ReadonlyArray<{ event: ProjectedEvent; step: string }>,
  ): Promise<void> {
    await client.query(
      `INSERT INTO planned_steps (campaign_id, candidate_key, step, conversation_id, planned_at, source_topic, source_partition,
                                  source_offset, event_id)
       SELECT DISTINCT ON (campaign_id, candidate_key, step) *
       FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::timestamptz[], $6::text[], $7::int[], $8::bigint[], $9::uuid[])
         AS p(campaign_id, candidate_key, step, conversation_id, planned_at, source_topic, source_partition, source_offset, event_id)
       ORDER BY campaign_id, candidate_key, step, ${PLAN_ORDER}
       ON CONFLICT (campaign_id, candidate_key, step) DO UPDATE
         SET conversation_id = excluded.conversation_id, planned_at = excluded.planned_at, source_topic = excluded.source_topic,
             source_partition = excluded.source_partition, source_offset = excluded.source_offset, event_id = excluded.event_id
         WHERE (excluded.planned_at, excluded.source_topic COLLATE "C", excluded.source_partition, excluded.source_offset,
                excluded.event_id)
             < (planned_steps.planned_at, planned_steps.source_topic COLLATE "C", planned_steps.source_partition,
                planned_steps.source_offset, planned_steps.event_id)`,
      [
        plans.map((p) => p.event.campaignId),
        plans.map((p) => p.event.candidateKey),
        plans.map((p) => p.step),
        plans.map((p) => p.event.conversationId),
        plans.map((p) => new Date(p.event.at)),
        plans.map((p) => p.event.position[0]),
        plans.map((p) => p.event.position[1]),
        plans.map((p) => p.event.position[2]),
        plans.map((p) => p.event.eventId),
      ],
    );
  }

  /** The conversations that planned these sends' steps, by routeKey (absent: no plan lists it). */
  private async owners(client: PoolClient, sends: readonly ProjectedEvent[]): Promise<Map<string, string>> {
    if (sends.length === 0) return new Map();
    const { rows } = await client.query<{
      campaignId: string;
      candidateKey: string;
      step: string;
      conversationId: string;
    }>(
      `SELECT DISTINCT p.campaign_id AS "campaignId", p.candidate_key AS "candidateKey", p.step, p.conversation_id AS "conversationId"
       FROM planned_steps p JOIN unnest($1::text[], $2::text[], $3::text[]) AS s(campaign_id, candidate_key, step)
         USING (campaign_id, candidate_key, step)`,
      [sends.map((e) => e.campaignId), sends.map((e) => e.candidateKey), sends.map((e) => e.routeStep)],
    );
    return new Map(rows.map((r) => [routeKey(r.campaignId, r.candidateKey, r.step), r.conversationId]));
  }

  /** Moves step-filed sends of these plans' steps to the conversation that owns the step now. */
  private async reroute(
    client: PoolClient,
    plans: ReadonlyArray<{ event: ProjectedEvent; step: string }>,
  ): Promise<Array<{ from: string; to: string; campaignId: string; candidateKey: string }>> {
    const { rows } = await client.query<{ from: string; to: string; campaignId: string; candidateKey: string }>(
      `WITH moved AS (
         SELECT e.event_id, e.conversation_id AS from_id, p.conversation_id AS to_id, p.campaign_id, p.candidate_key
         FROM (SELECT DISTINCT * FROM unnest($1::text[], $2::text[], $3::text[])) AS k(campaign_id, candidate_key, step)
         CROSS JOIN LATERAL (
           SELECT campaign_id, candidate_key, step, conversation_id FROM planned_steps
           WHERE campaign_id = k.campaign_id AND candidate_key = k.candidate_key AND step = k.step OFFSET 0) p
         CROSS JOIN LATERAL (
           SELECT event_id, conversation_id FROM conversation_events
           WHERE route_campaign_id = p.campaign_id AND route_candidate_key = p.candidate_key AND route_step = p.step
             AND conversation_id <> p.conversation_id
           FOR UPDATE) e)
       UPDATE conversation_events e SET conversation_id = moved.to_id FROM moved WHERE e.event_id = moved.event_id
       RETURNING moved.from_id AS "from", moved.to_id AS "to", moved.campaign_id AS "campaignId", moved.candidate_key AS "candidateKey"`,
      [plans.map((p) => p.event.campaignId), plans.map((p) => p.event.candidateKey), plans.map((p) => p.step)],
    );
    return rows;
  }

  /**
   * The conversations as the decider sees them (domain/conversation-decider.ts): `load` locks their
   * rows (in id order), then reads their stored events and their campaigns' graces (after the lock:
   * a grace change committed before it is seen, one committed after it waits for the lock and
   * re-applies itself to what this transaction wrote), `apply` writes the projections in one UPDATE
   * (column by column), removes the conversations left without events (their only send moved to the
   * conversation that planned it) unless ever flagged (its flags and recovery stay on record), and
   * enqueues the recoveries, which it returns.
   */
  readonly conversations: AggregateStore<
    string,
    StoredConversation,
    ProjectConversation,
    ConversationChange,
    ConversationRecovered[]
  > = {
    keyOf: (command) => command.conversationId,
    load: (client, conversationIds) => this.loadStored(client, conversationIds),
    apply: (client, decided) => this.applyProjections(client, decided),
  };

  private async loadStored(
    client: PoolClient,
    conversationIds: readonly string[],
  ): Promise<Map<string, StoredConversation>> {
    const current = await client.query<{
      conversationId: string;
      campaignId: string;
      candidateKey: string;
      stalledReason: StallReason | null;
      stallCount: number;
      tid: string;
    }>(
      // One key lookup per id, locked in the ids' order (sorted by the caller): a shape the planner
      // cannot turn into a scan of the table, whatever its statistics say (docs/design.md, "Keyed batch statements").
      `SELECT c.* FROM unnest($1::text[]) WITH ORDINALITY AS ids(id, n)
       CROSS JOIN LATERAL (
         SELECT conversation_id AS "conversationId", campaign_id AS "campaignId", candidate_key AS "candidateKey",
                stalled_reason AS "stalledReason", stall_count AS "stallCount", ctid::text AS tid
         FROM conversations WHERE conversation_id = ids.id FOR UPDATE) c
       ORDER BY ids.n`,
      [conversationIds],
    );
    this.lockedRows.set(client, new Map(current.rows.map((r) => [r.conversationId, r.tid])));
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
       FROM unnest($1::text[]) AS ids(id)
       CROSS JOIN LATERAL (SELECT * FROM conversation_events WHERE conversation_id = ids.id OFFSET 0) e`,
      [conversationIds],
    );
    const graces = await this.graceSettings(
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
    return new Map(
      current.rows.map((row) => [
        row.conversationId,
        {
          history: timelines.get(row.conversationId) ?? [],
          flag:
            row.stalledReason === null
              ? null
              : { reason: row.stalledReason, campaignId: row.campaignId, candidateKey: row.candidateKey },
          stallCount: row.stallCount,
          graces: graces.get(row.campaignId) ?? null,
        },
      ]),
    );
  }

  private async applyProjections(
    client: PoolClient,
    decided: readonly Decided<ProjectConversation, StoredConversation, ConversationChange>[],
  ): Promise<ConversationRecovered[]> {
    const projected = decided.flatMap(({ events }) => {
      const projection = events.find((e): e is ConversationProjected => e.type === 'ConversationProjected');
      return projection ? [{ ...projection, healed: events.some((e) => e.type === 'ConversationRecovered') }] : [];
    });
    const recovered = decided.flatMap(({ events }) =>
      events.filter((e): e is ConversationRecovered => e.type === 'ConversationRecovered'),
    );
    // The rows `load` locked, by their tuple ids: a locked row cannot move before this UPDATE, which
    // then reaches each row directly (a TID scan), never through a scan of the table.
    const locked = this.lockedRows.get(client) ?? new Map<string, string>();
    this.lockedRows.delete(client);
    await client.query(
      `UPDATE conversations SET status = u.status, obligation_since = u.obligation_since,
              obligation_kind = u.obligation_kind, pending_step_id = u.pending_step_id, due_at = u.due_at,
              awaiting_reply_since = u.awaiting_reply_since, closed_reason = u.closed_reason,
              last_event_at = u.last_event_at, last_event_type = u.last_event_type,
              obligation_deadline = u.obligation_deadline, overdue_deadline = u.overdue_deadline,
              reply_deadline = u.reply_deadline, stall_deadline = u.stall_deadline,
              stalled_reason = CASE WHEN u.healed THEN NULL ELSE conversations.stalled_reason END,
              stalled_since = CASE WHEN u.healed THEN NULL ELSE conversations.stalled_since END,
              flagged_at = CASE WHEN u.healed THEN NULL ELSE conversations.flagged_at END,
              updated_at = now()
       FROM unnest($1::text[], $2::text[], $3::timestamptz[], $4::text[], $5::text[], $6::timestamptz[],
                   $7::timestamptz[], $8::text[], $9::timestamptz[], $10::timestamptz[], $11::timestamptz[],
                   $12::timestamptz[], $13::text[], $14::timestamptz[], $15::bool[], $16::tid[])
         AS u(conversation_id, status, obligation_since, obligation_kind, pending_step_id, due_at, last_event_at,
              last_event_type, obligation_deadline, overdue_deadline, stall_deadline,
              awaiting_reply_since, closed_reason, reply_deadline, healed, tid)
       WHERE conversations.ctid = u.tid AND conversations.conversation_id = u.conversation_id`,
      [
        ...projectionColumns(projected),
        projected.map((c) => c.healed),
        projected.map((c) => {
          const tid = locked.get(c.conversationId);
          if (tid === undefined) throw new Error(`conversation ${c.conversationId} was projected without being loaded`);
          return tid;
        }),
      ],
    );
    const empty = projected.filter((c) => c.empty).map((c) => c.conversationId);
    if (empty.length > 0) {
      await client.query(`DELETE FROM conversations WHERE conversation_id = ANY($1::text[]) AND stall_count = 0`, [
        empty,
      ]);
    }
    await enqueueEvents(
      client,
      recovered.map((event) => ({ topic: this.topics.liveness, event })),
    );
    return recovered;
  }

  /**
   * Applies the verdict on every open conversation whose earliest deadline passed (database clock),
   * each exactly once: a stall is flagged (ConversationStalled, on conversation.liveness.v1); a reply
   * window that ended closes the conversation (ConversationClosed `sequence_completed`, a
   * conversation event, which the projection folds when it comes back).
   */
  async sweep(limit: number): Promise<SweepResult> {
    return withTransaction(this.pool, async (client) => {
      const { rows } = await client.query<
        ConversationRow & { outcome: 'stall' | 'close'; verdictReason: string; verdictSince: Date; sweptAt: Date }
      >(
        `WITH due AS (
           SELECT c.conversation_id, ${VERDICT.outcome} AS outcome, ${VERDICT.reason} AS reason, ${VERDICT.since} AS since
           FROM conversations c
           WHERE c.status = 'open' AND c.stalled_reason IS NULL AND c.stall_deadline <= now()
           ORDER BY c.stall_deadline LIMIT $1 FOR UPDATE SKIP LOCKED)
         UPDATE conversations c SET
           stalled_reason = CASE WHEN due.outcome = 'stall' THEN due.reason END,
           stalled_since = CASE WHEN due.outcome = 'stall' THEN due.since END,
           -- Millisecond precision, so the API's keyset cursor (a JSON date) is exact.
           flagged_at = CASE WHEN due.outcome = 'stall' THEN date_trunc('milliseconds', now()) END,
           stall_count = c.stall_count + CASE WHEN due.outcome = 'stall' THEN 1 ELSE 0 END,
           -- Closed now, so no sweep takes it again; the ConversationClosed it publishes is folded later.
           status = CASE WHEN due.outcome = 'close' THEN 'closed' ELSE c.status END,
           closed_reason = CASE WHEN due.outcome = 'close' THEN due.reason ELSE c.closed_reason END,
           updated_at = now()
         FROM due WHERE c.conversation_id = due.conversation_id
         RETURNING ${columns('c.')}, due.outcome, due.reason AS "verdictReason", due.since AS "verdictSince",
                   date_trunc('milliseconds', now()) AS "sweptAt"`,
        [limit],
      );
      const stalled: ConversationStalled[] = [];
      const closed: ConversationClosed[] = [];
      for (const row of rows) {
        if (row.outcome === 'stall') {
          stalled.push({
            type: 'ConversationStalled',
            eventId: uuidV5('conversation-stalled', row.conversationId, String(row.stallCount)),
            occurredAt: row.sweptAt.getTime(),
            producer: 'liveness',
            correlationId: row.conversationId,
            causationId: null,
            conversationId: row.conversationId,
            campaignId: row.campaignId,
            candidateKey: row.candidateKey,
            reason: row.verdictReason as StallReason,
            since: row.verdictSince.getTime(),
            detectedAt: row.sweptAt.getTime(),
          });
        } else {
          // Named by the wait it ends: the same close decided again (after a re-fold reopened the row
          // before this event came back) is the same event, which the outbox keeps once.
          const eventId = uuidV5(
            'conversation-closed',
            row.conversationId,
            row.verdictReason,
            String(row.verdictSince.getTime()),
          );
          closed.push({
            type: 'ConversationClosed',
            eventId,
            occurredAt: row.sweptAt.getTime(),
            producer: 'liveness',
            correlationId: canonicalCorrelationId(row.conversationId, eventId),
            causationId: null,
            conversationId: row.conversationId,
            campaignId: row.campaignId,
            candidateKey: row.candidateKey,
            reason: row.verdictReason as CloseReason,
          });
        }
      }
      const events: OutgoingEvent[] = [
        ...stalled.map((event) => ({ topic: this.topics.liveness, event })),
        ...closed.map((event) => ({ topic: this.topics.conversationEvents, event })),
      ];
      await enqueueEvents(client, events);
      return { stalled, closed };
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
                                    overdue_deadline, stall_deadline, awaiting_reply_since, closed_reason, reply_deadline)
         SELECT $1 || ':seed-' || i, $1, 'seed-' || i, t.status, t.obligation_since, t.obligation_kind, t.pending_step_id,
                t.due_at, t.last_event_at, t.last_event_type, t.obligation_deadline, t.overdue_deadline, t.stall_deadline,
                t.awaiting_reply_since, t.closed_reason, t.reply_deadline
         FROM unnest($2::int[], $3::int[], $4::text[], $5::timestamptz[], $6::text[], $7::text[], $8::timestamptz[],
                     $9::timestamptz[], $10::text[], $11::timestamptz[], $12::timestamptz[], $13::timestamptz[],
                     $14::timestamptz[], $15::text[], $16::timestamptz[])
                AS t(first, last, status, obligation_since, obligation_kind, pending_step_id, due_at, last_event_at,
                     last_event_type, obligation_deadline, overdue_deadline, stall_deadline, awaiting_reply_since,
                     closed_reason, reply_deadline),
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
          templates.map((t) => date(t.folded.state.awaitingReplySince)),
          templates.map((t) => t.folded.state.closedReason),
          templates.map((t) => date(t.folded.deadlines.reply)),
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

  /**
   * Forgets closed conversations unchanged for `retentionDays` (ADR 014, retention): at most `batch`
   * of them, the longest unchanged first through the partial index on closed conversations'
   * `updated_at` (at or after the close, so a conversation that closed and then changed within the
   * retention stays), each with its events and its planned steps, in one statement. One the
   * projector holds locked is skipped (the next run takes it). An event arriving after the purge
   * starts the conversation afresh, as for an id never seen.
   */
  async purgeClosed(
    retentionDays: number,
    batch: number,
  ): Promise<{ conversations: number; events: number; plannedSteps: number }> {
    const { rows } = await this.pool.query<{ conversations: number; events: number; planned: number }>(
      `WITH cutoff AS (SELECT now() - make_interval(days => $1) AS at),
       victims AS (
         SELECT c.conversation_id, c.campaign_id, c.candidate_key FROM conversations c, cutoff
         WHERE c.status = 'closed' AND c.updated_at < cutoff.at
         ORDER BY c.updated_at LIMIT $2
         FOR UPDATE OF c SKIP LOCKED),
       events AS (
         DELETE FROM conversation_events e USING victims v WHERE e.conversation_id = v.conversation_id RETURNING 1),
       planned AS (
         DELETE FROM planned_steps p USING victims v
         WHERE p.campaign_id = v.campaign_id AND p.candidate_key = v.candidate_key
           AND p.conversation_id = v.conversation_id
         RETURNING 1),
       gone AS (
         DELETE FROM conversations c USING victims v WHERE c.conversation_id = v.conversation_id RETURNING 1)
       SELECT (SELECT count(*) FROM gone)::int AS conversations, (SELECT count(*) FROM events)::int AS events,
              (SELECT count(*) FROM planned)::int AS planned`,
      [retentionDays, batch],
    );
    const row = rows[0];
    return { conversations: row?.conversations ?? 0, events: row?.events ?? 0, plannedSteps: row?.planned ?? 0 };
  }

  /** Fresh planner statistics after a bulk load, so the sweep's plan is the one it gets in production. */
  async analyze(): Promise<void> {
    await this.pool.query('ANALYZE conversations, conversation_events');
  }

  /** The database clock (epoch ms): every deadline is compared with it. In a transaction: its time. */
  async now(on: Pool | PoolClient = this.pool): Promise<number> {
    const { rows } = await on.query<{ now: Date }>('SELECT now() AS now');
    return (rows[0] as { now: Date }).now.getTime();
  }

  /**
   * `campaignId` in its canonical form (canonicalCampaignId): the form conversations are stored
   * under. A null reply window stores none: the service's default applies, now and after it changes.
   */
  async setGraces(campaignId: string, graces: GraceSettings): Promise<number> {
    const { replyWindowMs } = gracesOf(graces, this.defaults);
    return withTransaction(this.pool, async (client) => {
      await client.query(
        `INSERT INTO campaign_graces (campaign_id, inbound_ms, outbound_ms, overdue_ms, reply_window_ms) VALUES ($1, $2, $3, $4, $5)
         ON CONFLICT (campaign_id) DO UPDATE
           SET inbound_ms = $2, outbound_ms = $3, overdue_ms = $4, reply_window_ms = $5, updated_at = now()`,
        [campaignId, graces.inboundMs, graces.outboundMs, graces.overdueMs, graces.replyWindowMs],
      );
      const updated = await client.query(
        `UPDATE conversations SET ${GRACE_DEADLINES}, updated_at = now() WHERE campaign_id = $1 AND status = 'open'`,
        [campaignId, graces.inboundMs, graces.outboundMs, graces.overdueMs, replyWindowMs],
      );
      return updated.rowCount ?? 0;
    });
  }

  async graces(campaignId: string): Promise<Graces & { source: 'campaign' | 'default' }> {
    const client = await this.pool.connect();
    try {
      const found = (await this.graceSettings(client, [campaignId])).get(campaignId);
      return found
        ? { ...gracesOf(found, this.defaults), source: 'campaign' }
        : { ...this.defaults, source: 'default' };
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
              awaiting_reply_since, closed_reason, last_event_at, last_event_type, obligation_deadline, overdue_deadline,
              reply_deadline, stall_deadline
       FROM conversations ORDER BY conversation_id`,
    );
    return rows;
  }
}
