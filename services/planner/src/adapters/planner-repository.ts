/**
 * The planner's SQL and its events. Every event goes through the planner's outbox in the same
 * transaction as the state it reflects, with an id derived from what it means, so the same request
 * planned three times is one SendRequested.
 */
import {
  enqueueEvents,
  sendIdFor,
  uuidV5,
  withTransaction,
  type NextStepScheduled,
  type OutgoingEvent,
  type Queryable,
  type SendRequested,
  type StepCancelled,
} from '@outreach/shared';
import type { Pool } from 'pg';
import type { Content, PlannedRequest } from '../domain/request.js';

/** One send, fully decided (variant and content chosen), as stored for later or emitted now. */
export type PlannedSend = Pick<
  PlannedRequest,
  | 'requestId'
  | 'requestEventId'
  | 'correlationId'
  | 'campaignId'
  | 'candidateId'
  | 'candidateKey'
  | 'conversationId'
  | 'email'
  | 'emailNorm'
  | 'experimentId'
> & {
  readonly sendId: string;
  readonly step: string;
  readonly variant: string | null;
  readonly subject: string;
  readonly body: string;
};

export interface StoredFollowUp {
  readonly step: string;
  readonly delayMs: number;
  readonly content: Content;
  readonly variant: string | null;
}

export function plannedSend(
  request: PlannedRequest,
  step: string,
  sendId: string,
  content: Content,
  variant: string | null,
): PlannedSend {
  const {
    requestId,
    requestEventId,
    correlationId,
    campaignId,
    candidateId,
    candidateKey,
    conversationId,
    email,
    emailNorm,
  } = request;
  return {
    requestId,
    requestEventId,
    correlationId,
    campaignId,
    candidateId,
    candidateKey,
    conversationId,
    email,
    emailNorm,
    sendId,
    step,
    experimentId: variant === null ? null : request.experimentId,
    variant,
    subject: content.subject,
    body: content.body,
  };
}

export class PlannerRepository {
  constructor(
    private readonly pool: Pool,
    private readonly topics: { readonly sendRequested: string; readonly conversationEvents: string },
  ) {}

  private sendRequested(send: PlannedSend, scheduledFor: Date | null, at: Date): OutgoingEvent {
    const event: SendRequested = {
      type: 'SendRequested',
      eventId: uuidV5('send-requested', send.sendId),
      occurredAt: at.getTime(),
      producer: 'planner',
      correlationId: send.correlationId,
      causationId: send.requestEventId,
      sendId: send.sendId,
      requestId: send.requestId,
      campaignId: send.campaignId,
      candidateId: send.candidateId,
      candidateKey: send.candidateKey,
      email: send.email,
      emailNorm: send.emailNorm,
      step: send.step,
      experimentId: send.experimentId,
      variant: send.variant,
      subject: send.subject,
      body: send.body,
      scheduledFor: scheduledFor?.getTime() ?? null,
    };
    return { topic: this.topics.sendRequested, event };
  }

  /** Emits SendRequested now (idempotent: the event id is the send's). */
  async sendNow(client: Queryable, sends: readonly PlannedSend[]): Promise<void> {
    const now = await this.now(client);
    await enqueueEvents(
      client,
      sends.map((send) => this.sendRequested(send, null, now)),
    );
  }

  private async now(client: Queryable): Promise<Date> {
    return ((await client.query<{ now: Date }>('SELECT now() AS now')).rows[0] as { now: Date }).now;
  }

  /**
   * Schedules (or reschedules) a step: an upsert of its row while it is still scheduled, and a
   * NextStepScheduled for the conversation. A step already emitted or cancelled stays as it is.
   */
  async schedule(client: Queryable, send: PlannedSend, dueAt: Date): Promise<boolean> {
    const { rows } = await client.query<{ dueAt: Date }>(
      `INSERT INTO scheduled_steps (campaign_id, candidate_key, step, conversation_id, send_id, send, due_at, status)
       VALUES ($1, $2, $3, $4, $5, $6, $7, 'scheduled')
       ON CONFLICT (campaign_id, candidate_key, step) DO UPDATE
         SET due_at = excluded.due_at, send = excluded.send, reschedules = scheduled_steps.reschedules + 1, updated_at = now()
         WHERE scheduled_steps.status = 'scheduled'
       RETURNING due_at AS "dueAt"`,
      [send.campaignId, send.candidateKey, send.step, send.conversationId, send.sendId, JSON.stringify(send), dueAt],
    );
    const row = rows[0];
    if (!row) return false;
    const event: NextStepScheduled = {
      type: 'NextStepScheduled',
      eventId: uuidV5('next-step-scheduled', send.conversationId, send.step, String(row.dueAt.getTime())),
      occurredAt: Date.now(),
      producer: 'planner',
      correlationId: send.correlationId,
      causationId: send.requestEventId,
      conversationId: send.conversationId,
      campaignId: send.campaignId,
      candidateKey: send.candidateKey,
      stepId: send.step,
      dueAt: row.dueAt.getTime(),
    };
    await enqueueEvents(client, [{ topic: this.topics.conversationEvents, event }]);
    return true;
  }

  async startSequence(client: Queryable, head: PlannedSend, followUps: readonly StoredFollowUp[]): Promise<void> {
    if (followUps.length === 0) return;
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

  /**
   * The previous step of a sequence was sent: schedule its next follow-up, once (the row advances
   * only from the step it waits for).
   */
  async advanceSequences(
    sent: ReadonlyArray<{ campaignId: string; candidateKey: string; step: string; sentAt: Date }>,
  ): Promise<number> {
    if (sent.length === 0) return 0;
    let scheduled = 0;
    // One transaction for the batch, one UPDATE per round. A round holds at most one item per
    // (campaign, candidate), in arrival order, so a batch with two consecutive steps of one sequence
    // advances it twice, in order; most batches need a single round.
    const rounds: Array<Array<{ item: (typeof sent)[number]; ord: number }>> = [];
    const seen = new Map<string, number>();
    sent.forEach((item, ord) => {
      const key = `${item.campaignId}\u0000${item.candidateKey}`;
      const round = seen.get(key) ?? 0;
      seen.set(key, round + 1);
      (rounds[round] ??= []).push({ item, ord });
    });
    await withTransaction(this.pool, async (client) => {
      for (const round of rounds) {
        const { rows } = await client.query<{
          ord: number;
          followUps: StoredFollowUp[];
          nextIndex: number;
          template: PlannedSend;
        }>(
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
        for (const row of rows.sort((a, b) => a.ord - b.ord)) {
          const item = sent[row.ord] as (typeof sent)[number];
          const followUp = row.followUps[row.nextIndex];
          if (!followUp) continue;
          const send: PlannedSend = {
            ...row.template,
            step: followUp.step,
            sendId: sendIdFor(item.campaignId, item.candidateKey, followUp.step),
            variant: followUp.variant,
            experimentId: followUp.variant === null ? null : row.template.experimentId,
            subject: followUp.content.subject,
            body: followUp.content.body,
          };
          if (await this.schedule(client, send, new Date(item.sentAt.getTime() + followUp.delayMs))) scheduled++;
        }
      }
    });
    return scheduled;
  }

  /** A reply or a close: stop the conversation's sequences and cancel its scheduled steps, visibly. */
  async stopConversation(
    conversationId: string,
    reason: string,
    correlationId: string,
    causationId: string,
  ): Promise<number> {
    return withTransaction(this.pool, async (client) => {
      await client.query(
        `UPDATE sequences SET status = 'stopped', stop_reason = $2, updated_at = now() WHERE conversation_id = $1 AND status = 'active'`,
        [conversationId, reason],
      );
      const { rows } = await client.query<{ campaignId: string; candidateKey: string; step: string; updatedAt: Date }>(
        `UPDATE scheduled_steps SET status = 'cancelled', reason = $2, updated_at = now()
         WHERE conversation_id = $1 AND status = 'scheduled'
         RETURNING campaign_id AS "campaignId", candidate_key AS "candidateKey", step, updated_at AS "updatedAt"`,
        [conversationId, reason],
      );
      await enqueueEvents(
        client,
        rows.map((row) => {
          const event: StepCancelled = {
            type: 'StepCancelled',
            eventId: uuidV5('step-cancelled', conversationId, row.step, reason),
            occurredAt: row.updatedAt.getTime(),
            producer: 'planner',
            correlationId,
            causationId,
            conversationId,
            campaignId: row.campaignId,
            candidateKey: row.candidateKey,
            stepId: row.step,
            reason,
          };
          return { topic: this.topics.conversationEvents, event };
        }),
      );
      return rows.length;
    });
  }

  /** The scheduler: due steps (database clock) become SendRequested, each exactly once. */
  async emitDue(limit: number): Promise<number> {
    return withTransaction(this.pool, async (client) => {
      const { rows } = await client.query<{ send: PlannedSend; dueAt: Date; emittedAt: Date }>(
        `WITH due AS (
           SELECT campaign_id, candidate_key, step FROM scheduled_steps
           WHERE status = 'scheduled' AND due_at <= now() ORDER BY due_at LIMIT $1 FOR UPDATE SKIP LOCKED)
         UPDATE scheduled_steps s SET status = 'emitted', emitted_at = now(), updated_at = now()
         FROM due WHERE (s.campaign_id, s.candidate_key, s.step) = (due.campaign_id, due.candidate_key, due.step)
         RETURNING s.send, s.due_at AS "dueAt", s.emitted_at AS "emittedAt"`,
        [limit],
      );
      await enqueueEvents(
        client,
        rows.map((row) => this.sendRequested(row.send, row.dueAt, row.emittedAt)),
      );
      return rows.length;
    });
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
}
