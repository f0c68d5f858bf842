/**
 * The planner's SQL. It stores and enqueues what the domain decided (src/domain/plan.ts, step.ts),
 * in the caller's transaction, every event through the planner's outbox with the state it reflects.
 * A step's row changes only while it is still scheduled: the condition on each write is what keeps
 * concurrent planners to the step's rules. It is also where the database clock is read, once per
 * transaction.
 */
import { enqueueEvents, type Queryable } from '@outreach/shared';
import type { Pool } from 'pg';
import type { IngestedEvent } from '../domain/conversation-event.js';
import type { AdvancedSequence, PlannerEvent, Scheduling, Sequence } from '../domain/plan.js';
import { stepRefKey, type PlannedSend, type StepEvent, type StepRef, type StoredStep } from '../domain/step.js';

export class PlannerRepository {
  constructor(
    private readonly pool: Pool,
    private readonly topics: {
      readonly sendRequested: string;
      readonly conversationEvents: string;
      readonly outreachRejected: string;
    },
  ) {}

  /**
   * The database clock. now() is the start of the transaction, so this is also the now() of every
   * statement in it (the scheduler's "due", the rows' updated_at).
   */
  async now(client: Queryable): Promise<number> {
    return ((await client.query<{ now: Date }>('SELECT now() AS now')).rows[0] as { now: Date }).now.getTime();
  }

  /**
   * The stored steps among `refs` (absent: no row), by stepRefKey, each with the request that last
   * scheduled it. With `lock`, in the caller's transaction, the rows stay as read until it ends:
   * the scheduler skips locked rows, so a step cannot be emitted between this read and a write.
   */
  async storedSteps(
    client: Queryable,
    refs: readonly StepRef[],
    options: { lock: boolean },
  ): Promise<Map<string, StoredStep>> {
    if (refs.length === 0) return new Map();
    const { rows } = await client.query<StepRef & { status: string; dueAt: Date; requestId: string | null }>(
      `SELECT s.campaign_id AS "campaignId", s.candidate_key AS "candidateKey", s.step, s.status, s.due_at AS "dueAt",
              s.send ->> 'requestId' AS "requestId"
       FROM scheduled_steps s
       JOIN unnest($1::text[], $2::text[], $3::text[]) AS r(campaign_id, candidate_key, step)
         USING (campaign_id, candidate_key, step)
       ORDER BY s.campaign_id, s.candidate_key, s.step
       ${options.lock ? 'FOR UPDATE OF s' : ''}`,
      [refs.map((r) => r.campaignId), refs.map((r) => r.candidateKey), refs.map((r) => r.step)],
    );
    const stored = new Map<string, StoredStep>();
    for (const row of rows) {
      const state =
        row.status === 'scheduled'
          ? ({ status: 'scheduled', dueAt: row.dueAt.getTime() } as const)
          : ({ status: row.status as 'emitted' | 'cancelled' } as const);
      stored.set(stepRefKey(row), { state, requestId: row.requestId });
    }
    return stored;
  }

  /** The stored steps among `refs` as they are now, outside any transaction (the HTTP ingress's check). */
  async currentSteps(refs: readonly StepRef[]): Promise<Map<string, StoredStep>> {
    return this.storedSteps(this.pool, refs, { lock: false });
  }

  /** Enqueues events, each to its topic (idempotent: event ids derive from what they mean). */
  async enqueue(client: Queryable, events: readonly PlannerEvent[]): Promise<void> {
    const topicOf = (event: PlannerEvent) =>
      event.type === 'SendRequested'
        ? this.topics.sendRequested
        : event.type === 'OutreachRejected'
          ? this.topics.outreachRejected
          : this.topics.conversationEvents;
    await enqueueEvents(
      client,
      events.map((event) => ({ topic: topicOf(event), event })),
    );
  }

  /**
   * Enqueues conversation events a caller sent (the HTTP ingress) to the conversation topic. Returns
   * how many were new: an event id still in the outbox (published rows stay there for the relay's
   * retention) is the same event again.
   */
  async enqueueConversationEvents(client: Queryable, events: readonly IngestedEvent[]): Promise<number> {
    return enqueueEvents(
      client,
      events.map((event) => ({ topic: this.topics.conversationEvents, event })),
    );
  }

  /**
   * Schedules (or reschedules) steps: an upsert of each row while it is still scheduled, and its
   * NextStepScheduled only when the row took it. A step already emitted or cancelled stays as it is.
   * Returns how many were scheduled.
   */
  async schedule(client: Queryable, schedulings: readonly Scheduling[]): Promise<number> {
    const taken: StepEvent[] = [];
    // One statement per step: a batch may hold the same step twice (a request redelivered), and
    // one INSERT … ON CONFLICT DO UPDATE cannot touch a row twice.
    for (const { send, dueAt, event } of schedulings) {
      const { rowCount } = await client.query(
        `INSERT INTO scheduled_steps (campaign_id, candidate_key, step, conversation_id, send_id, send, due_at, status)
         VALUES ($1, $2, $3, $4, $5, $6, $7, 'scheduled')
         ON CONFLICT (campaign_id, candidate_key, step) DO UPDATE
           SET due_at = excluded.due_at, send = excluded.send, reschedules = scheduled_steps.reschedules + 1, updated_at = now()
           WHERE scheduled_steps.status = 'scheduled'`,
        [
          send.campaignId,
          send.candidateKey,
          send.step,
          send.conversationId,
          send.sendId,
          JSON.stringify(send),
          new Date(dueAt),
        ],
      );
      if ((rowCount ?? 0) > 0) taken.push(event);
    }
    await this.enqueue(client, taken);
    return taken.length;
  }

  async startSequences(client: Queryable, sequences: readonly Sequence[]): Promise<void> {
    for (const { head, followUps } of sequences) {
      await client.query(
        `INSERT INTO sequences (campaign_id, candidate_key, head_step, conversation_id, template, follow_ups, previous_step, status)
         VALUES ($1, $2, $3, $4, $5, $6, $3, 'active') ON CONFLICT DO NOTHING`,
        [
          head.campaignId,
          head.candidateKey,
          head.step,
          head.conversationId,
          JSON.stringify(head),
          JSON.stringify(followUps),
        ],
      );
    }
  }

  /**
   * Sent steps advance the sequences waiting for them, each once (a row advances only from the step
   * it waits for). Returns the sequences that advanced, with `ord` the sent step's index, in the
   * order they advanced.
   */
  async advanceSequences(
    client: Queryable,
    sent: ReadonlyArray<{ campaignId: string; candidateKey: string; step: string }>,
  ): Promise<Array<AdvancedSequence & { ord: number }>> {
    // One UPDATE per round. A round holds at most one item per (campaign, candidate), in arrival
    // order, so a batch with two consecutive steps of one sequence advances it twice, in order; most
    // batches need a single round.
    const rounds: Array<Array<{ item: (typeof sent)[number]; ord: number }>> = [];
    const seen = new Map<string, number>();
    sent.forEach((item, ord) => {
      const key = `${item.campaignId}\u0000${item.candidateKey}`;
      const round = seen.get(key) ?? 0;
      seen.set(key, round + 1);
      (rounds[round] ??= []).push({ item, ord });
    });
    const advanced: Array<AdvancedSequence & { ord: number }> = [];
    for (const round of rounds) {
      const { rows } = await client.query<AdvancedSequence & { ord: number }>(
        `UPDATE sequences SET next_index = next_index + 1,
                previous_step = (follow_ups -> next_index ->> 'step'),
                status = CASE WHEN next_index + 1 >= jsonb_array_length(follow_ups) THEN 'finished' ELSE 'active' END,
                updated_at = now()
         FROM unnest($1::text[], $2::text[], $3::text[], $4::int[]) AS s(campaign_id, candidate_key, step, ord)
         WHERE sequences.campaign_id = s.campaign_id AND sequences.candidate_key = s.candidate_key
           AND sequences.previous_step = s.step AND sequences.status = 'active'
         RETURNING s.ord, follow_ups AS "followUps", next_index - 1 AS "nextIndex", template`,
        [
          round.map((r) => r.item.campaignId),
          round.map((r) => r.item.candidateKey),
          round.map((r) => r.item.step),
          round.map((r) => r.ord),
        ],
      );
      advanced.push(...rows.sort((a, b) => a.ord - b.ord));
    }
    return advanced;
  }

  /**
   * A reply or a close: stops the conversation's sequences and cancels its scheduled steps. Returns
   * the steps it cancelled, as they were (scheduled, due at `dueAt`).
   */
  async stopConversation(
    client: Queryable,
    conversationId: string,
    reason: string,
  ): Promise<Array<{ campaignId: string; candidateKey: string; step: string; dueAt: number }>> {
    await client.query(
      `UPDATE sequences SET status = 'stopped', stop_reason = $2, updated_at = now() WHERE conversation_id = $1 AND status = 'active'`,
      [conversationId, reason],
    );
    const { rows } = await client.query<{ campaignId: string; candidateKey: string; step: string; dueAt: Date }>(
      `UPDATE scheduled_steps SET status = 'cancelled', reason = $2, updated_at = now()
       WHERE conversation_id = $1 AND status = 'scheduled'
       RETURNING campaign_id AS "campaignId", candidate_key AS "candidateKey", step, due_at AS "dueAt"`,
      [conversationId, reason],
    );
    return rows.map((row) => ({ ...row, dueAt: row.dueAt.getTime() }));
  }

  /**
   * Takes up to `limit` due steps (database clock) and marks them emitted, each exactly once however
   * many planners run (FOR UPDATE SKIP LOCKED). Returns them as they were: scheduled, due at `dueAt`.
   */
  async takeDue(client: Queryable, limit: number): Promise<Array<{ send: PlannedSend; dueAt: number }>> {
    const { rows } = await client.query<{ send: PlannedSend; dueAt: Date }>(
      `WITH due AS (
         SELECT campaign_id, candidate_key, step FROM scheduled_steps
         WHERE status = 'scheduled' AND due_at <= now() ORDER BY due_at LIMIT $1 FOR UPDATE SKIP LOCKED)
       UPDATE scheduled_steps s SET status = 'emitted', emitted_at = now(), updated_at = now()
       FROM due WHERE (s.campaign_id, s.candidate_key, s.step) = (due.campaign_id, due.candidate_key, due.step)
       RETURNING s.send, s.due_at AS "dueAt"`,
      [limit],
    );
    return rows.map((row) => ({ send: row.send, dueAt: row.dueAt.getTime() }));
  }

  /** Scheduled steps by status, per campaign: how much is still to come. */
  async summary(): Promise<Array<{ campaignId: string; status: string; steps: number }>> {
    const { rows } = await this.pool.query<{ campaignId: string; status: string; steps: number }>(
      `SELECT campaign_id AS "campaignId", status, count(*)::int AS steps FROM scheduled_steps GROUP BY 1, 2 ORDER BY 1, 2`,
    );
    return rows;
  }

  async steps(conversationId: string) {
    const { rows } = await this.pool.query(
      `SELECT campaign_id AS "campaignId", candidate_key AS "candidateKey", step, send_id AS "sendId", due_at AS "dueAt",
              status, reason, reschedules, emitted_at AS "emittedAt"
       FROM scheduled_steps WHERE conversation_id = $1 ORDER BY due_at, step`,
      [conversationId],
    );
    return rows;
  }

  /**
   * What waits behind each send: the candidate's other steps still scheduled in that campaign (the
   * primary key's (campaign_id, candidate_key) prefix), and the follow-ups of its active sequences
   * whose next step waits for this one's outcome (sequences_previous_step_idx).
   */
  async waitingBehind(
    sends: ReadonlyArray<{ campaignId: string; candidateKey: string; step: string }>,
  ): Promise<Array<{ campaignId: string; candidateKey: string; step: string; scheduled: number; followUps: number }>> {
    if (sends.length === 0) return [];
    const { rows } = await this.pool.query<{ i: number; scheduled: number; followUps: number }>(
      `SELECT s.i::int AS i,
              (SELECT count(*)::int FROM scheduled_steps t
                WHERE t.campaign_id = s.campaign_id AND t.candidate_key = s.candidate_key
                  AND t.step <> s.step AND t.status = 'scheduled') AS scheduled,
              (SELECT coalesce(sum(GREATEST(jsonb_array_length(q.follow_ups) - q.next_index, 0)), 0)::int FROM sequences q
                WHERE q.campaign_id = s.campaign_id AND q.candidate_key = s.candidate_key
                  AND q.previous_step = s.step AND q.status = 'active') AS "followUps"
       FROM unnest($1::text[], $2::text[], $3::text[]) WITH ORDINALITY AS s(campaign_id, candidate_key, step, i)
       ORDER BY s.i`,
      [sends.map((x) => x.campaignId), sends.map((x) => x.candidateKey), sends.map((x) => x.step)],
    );
    return rows.map((r) => ({
      ...(sends[r.i - 1] as (typeof sends)[number]),
      scheduled: r.scheduled,
      followUps: r.followUps,
    }));
  }
}
