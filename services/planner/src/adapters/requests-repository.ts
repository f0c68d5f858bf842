/**
 * The SQL of request statuses: the planner's record of each request, the sends each plan may lead
 * to, and the sends' outcomes projected from SendRecorded. It stores what the domain decided
 * (domain/request-status.ts); a record moves only along REQUEST_TRANSITIONS, which the upsert's
 * condition is generated from, so concurrent ingresses (HTTP and the consumer) keep to it.
 */
import { TransientError, type Queryable } from '@outreach/shared';
import type { Pool } from 'pg';
import type { RejectionReason } from '../domain/rejection.js';
import {
  RECORD_STATUSES,
  REQUEST_TRANSITIONS,
  SAME_EVENT_ONLY,
  type Outcome,
  type PlannedStep,
  type RecordStatus,
  type RequestDecision,
  type RequestRecord,
  type SendOutcome,
  type StoredRecord,
  type StoredSend,
} from '../domain/request-status.js';

/**
 * `ON CONFLICT` for an upsert to `to`: from the statuses REQUEST_TRANSITIONS allows, those in
 * SAME_EVENT_ONLY only for the record's own event (or a record from before event ids); never from input.
 */
export function requestUpsertConflict(to: RecordStatus): string {
  const from = REQUEST_TRANSITIONS[to].filter((status): status is RecordStatus => status !== 'none');
  if (from.some((status) => !RECORD_STATUSES.includes(status))) throw new Error(`unknown statuses ${from.join(', ')}`);
  if (from.length === 0) return 'ON CONFLICT (request_id) DO NOTHING';
  const list = (statuses: readonly RecordStatus[]) => statuses.map((status) => `'${status}'`).join(', ');
  const sameEvent = from.filter((status) => SAME_EVENT_ONLY[to]?.includes(status));
  const anyEvent = from.filter((status) => !sameEvent.includes(status));
  const conditions = [
    ...(anyEvent.length > 0 ? [`requests.status IN (${list(anyEvent)})`] : []),
    ...(sameEvent.length > 0
      ? [
          `(requests.status IN (${list(sameEvent)}) AND (requests.event_id IS NULL OR requests.event_id = excluded.event_id))`,
        ]
      : []),
  ];
  return `ON CONFLICT (request_id) DO UPDATE SET status = excluded.status, reason = excluded.reason,
         detail = excluded.detail, send_id = excluded.send_id, event_id = excluded.event_id, updated_at = now()
       WHERE ${conditions.join(' OR ')}`;
}

export interface PlannedSends {
  readonly requestId: string;
  readonly campaignId: string;
  readonly candidateKey: string;
  readonly headStep: string;
  readonly steps: readonly PlannedStep[];
}

export class RequestsRepository {
  constructor(private readonly pool: Pool) {}

  /**
   * The HTTP ingress took the request (202) as event `eventId`: recorded unless the consumer decided
   * it already.
   */
  async accepted(requestId: string, eventId: string): Promise<void> {
    await this.pool.query(
      `INSERT INTO requests (request_id, status, event_id) VALUES ($1, 'accepted', $2) ${requestUpsertConflict('accepted')}`,
      [requestId, eventId],
    );
  }

  /** The stored records of these requests, locked until the caller's transaction ends. */
  async storedRecords(client: Queryable, requestIds: readonly string[]): Promise<Map<string, StoredRecord>> {
    if (requestIds.length === 0) return new Map();
    const { rows } = await client.query<StoredRecord & { requestId: string }>(
      `SELECT request_id AS "requestId", status, event_id AS "eventId" FROM requests
       WHERE request_id = ANY($1::text[]) ORDER BY request_id FOR UPDATE`,
      [[...new Set(requestIds)]],
    );
    return new Map(rows.map(({ requestId, ...record }) => [requestId, record]));
  }

  /**
   * Records decisions (one per request id: domain `foldDecisions`), each only where its transition
   * is allowed from the stored record; in the caller's transaction.
   */
  async recordDecisions(client: Queryable, decisions: readonly RequestDecision[]): Promise<void> {
    for (const to of ['planned', 'rejected'] as const) {
      const mine = decisions.filter((d) => d.to === to);
      if (mine.length === 0) continue;
      const rejection = (d: RequestDecision) => (d.to === 'rejected' ? d.rejection : null);
      await client.query(
        `INSERT INTO requests (request_id, status, reason, detail, send_id, event_id)
         SELECT r.request_id, $2, r.reason, r.detail, r.send_id, r.event_id
         FROM unnest($1::text[], $3::text[], $4::text[], $5::uuid[], $6::text[])
           AS r(request_id, reason, detail, send_id, event_id)
         ${requestUpsertConflict(to)}`,
        [
          mine.map((d) => d.requestId),
          to,
          mine.map((d) => rejection(d)?.reason ?? null),
          mine.map((d) => rejection(d)?.detail ?? null),
          mine.map((d) => rejection(d)?.sendId ?? null),
          mine.map((d) => d.eventId),
        ],
      );
    }
  }

  /** The sends plans may lead to (kept once per request and position: a redelivery adds nothing). */
  async plannedSends(client: Queryable, plans: readonly PlannedSends[]): Promise<void> {
    const rows = plans.flatMap((plan) => plan.steps.map((step) => ({ plan, step })));
    if (rows.length === 0) return;
    // The records first (those that exist): the retention purge skips a locked record, and one it is
    // deleting right now is gone, sends and all, before these sends are written (purgeOlderThan).
    // One key lookup per id, in one order (docs/design.md, "Keyed batch statements").
    await client.query(
      `SELECT 1 FROM unnest($1::text[]) AS ids(id)
       CROSS JOIN LATERAL (SELECT 1 FROM requests WHERE request_id = ids.id FOR KEY SHARE) r`,
      [[...new Set(plans.map((plan) => plan.requestId))].sort()],
    );
    await client.query(
      `INSERT INTO request_sends (request_id, ord, send_id, campaign_id, candidate_key, step, head_step)
       SELECT * FROM unnest($1::text[], $2::int[], $3::uuid[], $4::text[], $5::text[], $6::text[], $7::text[])
       ON CONFLICT DO NOTHING`,
      [
        rows.map((r) => r.plan.requestId),
        rows.map((r) => r.step.ord),
        rows.map((r) => r.step.sendId),
        rows.map((r) => r.plan.campaignId),
        rows.map((r) => r.plan.candidateKey),
        rows.map((r) => r.step.step),
        rows.map((r) => r.plan.headStep),
      ],
    );
  }

  /** The stored outcomes of these sends, locked until the caller's transaction ends. */
  async outcomes(client: Queryable, sendIds: readonly string[]): Promise<Map<string, SendOutcome>> {
    const { rows } = await client.query<Omit<SendOutcome, 'recordedAt'> & { recordedAt: Date }>(
      `SELECT send_id::text AS "sendId", outcome, reason, recorded_at AS "recordedAt", request_id AS "requestId",
              event_id::text AS "eventId"
       FROM send_outcomes WHERE send_id = ANY($1::uuid[]) ORDER BY send_id FOR UPDATE`,
      [[...new Set(sendIds)]],
    );
    return new Map(rows.map((row) => [row.sendId, { ...row, recordedAt: row.recordedAt.getTime() }]));
  }

  /**
   * Stores the outcomes the domain chose (latestOutcomes), each over the record it was chosen
   * against: `stored` is what `outcomes` read. A send recorded meanwhile by another consumer (a
   * rebalance) fails the condition, and the chunk is retried on what is stored then.
   */
  async storeOutcomes(
    client: Queryable,
    outcomes: readonly SendOutcome[],
    stored: ReadonlyMap<string, SendOutcome>,
  ): Promise<void> {
    if (outcomes.length === 0) return;
    const { rowCount } = await client.query(
      `INSERT INTO send_outcomes (send_id, request_id, outcome, reason, recorded_at, event_id)
       SELECT * FROM unnest($1::uuid[], $2::text[], $3::text[], $4::text[], $5::timestamptz[], $6::uuid[])
       ON CONFLICT (send_id) DO UPDATE SET request_id = excluded.request_id, outcome = excluded.outcome,
         reason = excluded.reason, recorded_at = excluded.recorded_at, event_id = excluded.event_id, updated_at = now()
       WHERE send_outcomes.event_id = (
         SELECT e.expected FROM unnest($1::uuid[], $7::uuid[]) AS e(send_id, expected) WHERE e.send_id = excluded.send_id)`,
      [
        outcomes.map((o) => o.sendId),
        outcomes.map((o) => o.requestId),
        outcomes.map((o) => o.outcome),
        outcomes.map((o) => o.reason),
        outcomes.map((o) => new Date(o.recordedAt)),
        outcomes.map((o) => o.eventId),
        outcomes.map((o) => stored.get(o.sendId)?.eventId ?? null),
      ],
    );
    if ((rowCount ?? 0) !== outcomes.length)
      throw new TransientError('a send outcome changed while it was being recorded: retrying on the stored one');
  }

  /**
   * Forgets request statuses past `retentionDays`: a request is purged, with its planned sends, once
   * nothing about it is open and nothing changed for that long. Open: a send of its plan still
   * scheduled (a follow-up due in 40 days), its sequence still active, or an outcome still held or
   * ambiguous. Changed: its record, any outcome or scheduled step of its sends, its sequence. Then
   * outcomes as old that no request lists. At most `batch` rows a statement.
   *
   * Rows being written are skipped (SKIP LOCKED), and the age is checked again on the row deleted: a
   * record the consumer touched meanwhile stays. plannedSends locks a request's record before it
   * writes the sends, so a request planned again while it is purged gets its record and sends anew
   * once the purge commits, never one without the other.
   */
  async purgeOlderThan(retentionDays: number, batch: number): Promise<{ requests: number; outcomes: number }> {
    const requests = await this.pool.query<{ requests: number }>(
      `WITH cutoff AS (SELECT now() - make_interval(days => $1) AS at),
       candidates AS (
         SELECT r.request_id FROM requests r, cutoff
         WHERE r.updated_at < cutoff.at
           AND NOT EXISTS (
             SELECT 1 FROM request_sends rs
             LEFT JOIN send_outcomes o ON o.send_id = rs.send_id
             LEFT JOIN scheduled_steps ss
               ON ss.campaign_id = rs.campaign_id AND ss.candidate_key = rs.candidate_key AND ss.step = rs.step
             WHERE rs.request_id = r.request_id
               AND (o.updated_at >= cutoff.at OR o.outcome IN ('held', 'ambiguous')
                    OR ss.status = 'scheduled' OR ss.updated_at >= cutoff.at))
           AND NOT EXISTS (
             SELECT 1 FROM request_sends rs
             JOIN sequences q
               ON q.campaign_id = rs.campaign_id AND q.candidate_key = rs.candidate_key AND q.head_step = rs.head_step
             WHERE rs.request_id = r.request_id AND (q.status = 'active' OR q.updated_at >= cutoff.at))
         LIMIT $2
         FOR UPDATE OF r SKIP LOCKED),
       gone AS (
         DELETE FROM requests USING candidates, cutoff
         WHERE requests.request_id = candidates.request_id AND requests.updated_at < cutoff.at
         RETURNING requests.request_id),
       sends AS (DELETE FROM request_sends rs USING gone WHERE rs.request_id = gone.request_id RETURNING 1)
       SELECT (SELECT count(*) FROM gone)::int AS requests, (SELECT count(*) FROM sends)::int AS sends`,
      [retentionDays, batch],
    );
    const outcomes = await this.pool.query(
      `WITH cutoff AS (SELECT now() - make_interval(days => $1) AS at),
       candidates AS (
         SELECT o.send_id FROM send_outcomes o, cutoff
         WHERE o.updated_at < cutoff.at AND NOT EXISTS (SELECT 1 FROM request_sends rs WHERE rs.send_id = o.send_id)
         LIMIT $2
         FOR UPDATE OF o SKIP LOCKED)
       DELETE FROM send_outcomes USING candidates, cutoff
       WHERE send_outcomes.send_id = candidates.send_id AND send_outcomes.updated_at < cutoff.at`,
      [retentionDays, batch],
    );
    return { requests: requests.rows[0]?.requests ?? 0, outcomes: outcomes.rowCount ?? 0 };
  }

  /** The request's record, or undefined when the planner has none. */
  async record(requestId: string): Promise<RequestRecord | undefined> {
    const { rows } = await this.pool.query<{
      requestId: string;
      status: RecordStatus;
      reason: RejectionReason | null;
      detail: string | null;
      sendId: string | null;
      updatedAt: Date;
    }>(
      `SELECT request_id AS "requestId", status, reason, detail, send_id::text AS "sendId", updated_at AS "updatedAt"
       FROM requests WHERE request_id = $1`,
      [requestId],
    );
    const row = rows[0];
    return row && { ...row, updatedAt: row.updatedAt.getTime() };
  }

  /** What the planner knows of each send the request planned: its outcome, its step's row, its sequence. */
  async sends(requestId: string): Promise<StoredSend[]> {
    const { rows } = await this.pool.query<{
      ord: number;
      sendId: string;
      step: string;
      plannedAt: Date;
      outcome: Outcome | null;
      outcomeReason: string | null;
      recordedAt: Date | null;
      outcomeRequestId: string | null;
      outcomeEventId: string | null;
      stepStatus: 'scheduled' | 'emitted' | 'cancelled' | null;
      dueAt: Date | null;
      emittedAt: Date | null;
      stepUpdatedAt: Date | null;
      stepRequestId: string | null;
      sequenceStopped: boolean;
    }>(
      `SELECT r.ord, r.send_id::text AS "sendId", r.step, r.planned_at AS "plannedAt",
              o.outcome, o.reason AS "outcomeReason", o.recorded_at AS "recordedAt",
              o.request_id AS "outcomeRequestId", o.event_id::text AS "outcomeEventId",
              s.status AS "stepStatus", s.due_at AS "dueAt", s.emitted_at AS "emittedAt",
              s.updated_at AS "stepUpdatedAt", s.send ->> 'requestId' AS "stepRequestId",
              coalesce(q.status = 'stopped', false) AS "sequenceStopped"
       FROM request_sends r
       LEFT JOIN send_outcomes o ON o.send_id = r.send_id
       LEFT JOIN scheduled_steps s
         ON (s.campaign_id, s.candidate_key, s.step) = (r.campaign_id, r.candidate_key, r.step)
       LEFT JOIN sequences q
         ON (q.campaign_id, q.candidate_key, q.head_step) = (r.campaign_id, r.candidate_key, r.head_step)
       WHERE r.request_id = $1
       ORDER BY r.ord`,
      [requestId],
    );
    const ms = (date: Date | null) => (date === null ? null : date.getTime());
    return rows.map((row) => ({
      ord: row.ord,
      sendId: row.sendId,
      step: row.step,
      plannedAt: row.plannedAt.getTime(),
      outcome:
        row.outcome === null
          ? null
          : {
              sendId: row.sendId,
              outcome: row.outcome,
              reason: row.outcomeReason,
              recordedAt: (row.recordedAt as Date).getTime(),
              requestId: row.outcomeRequestId,
              eventId: row.outcomeEventId as string,
            },
      scheduled:
        row.stepStatus === null
          ? null
          : {
              status: row.stepStatus,
              dueAt: (row.dueAt as Date).getTime(),
              emittedAt: ms(row.emittedAt),
              updatedAt: (row.stepUpdatedAt as Date).getTime(),
              requestId: row.stepRequestId,
            },
      sequenceStopped: row.sequenceStopped,
    }));
  }
}
