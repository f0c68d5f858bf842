/**
 * What the planner does with a request, and with the send of a sequence's step: the events to emit
 * and the rows to keep, decided here; the repository stores and enqueues them as they are. Pure:
 * the sticky variant and the database clock (`now`, read once per transaction) come in as values.
 */
import {
  sendIdFor,
  uuidV5,
  type NextStepScheduled,
  type OutreachRejected,
  type SendRequested,
  type SequencePlanned,
} from '@outreach/shared';
import {
  chooseContent,
  type Content,
  type ContentProblem,
  type PlannedRequest,
  type VariantDecision,
} from './request.js';
import { nextStepScheduled, sendRequested, type PlannedSend, type StepEvent } from './step.js';

/** Every event the planner publishes (OutreachRejected: domain/rejection.ts). */
export type PlannerEvent = StepEvent | SequencePlanned | OutreachRejected;

export interface StoredFollowUp {
  readonly step: string;
  readonly delayMs: number;
  readonly content: Content;
  readonly variant: string | null;
}

/**
 * A step to schedule (or reschedule) and its NextStepScheduled. The repository keeps both only
 * while the step is still open: one already emitted or cancelled stays as it is.
 */
export interface Scheduling {
  readonly send: PlannedSend;
  readonly dueAt: number;
  readonly event: NextStepScheduled;
}

/** Follow-ups waiting for the head step's send; the head is the template they are made from. */
export interface Sequence {
  readonly head: PlannedSend;
  readonly followUps: readonly StoredFollowUp[];
}

/** A sequence that has just advanced past a sent step: `nextIndex` is the follow-up now due. */
export interface AdvancedSequence {
  readonly template: PlannedSend;
  readonly followUps: readonly StoredFollowUp[];
  readonly nextIndex: number;
}

/**
 * What one request leads to: a send now or a scheduled step, the sequence of its follow-ups, and
 * the SequencePlanned that tells the conversation's watchers which steps are coming and which is last.
 */
export interface Plan {
  readonly send: SendRequested | null;
  readonly schedule: Scheduling | null;
  readonly sequence: Sequence | null;
  readonly planned: SequencePlanned;
}

/**
 * The steps a request plans, in order: its step, then its follow-ups. Once the last is sent the
 * conversation owes the candidate nothing more and awaits a reply (the liveness service closes it
 * when none comes); a send of any of them that does not name its conversation belongs to this one.
 * Named by the conversation and the request: a redelivery or an HTTP retry is the same event.
 */
export function sequencePlanned(request: PlannedRequest, now: number): SequencePlanned {
  return {
    type: 'SequencePlanned',
    eventId: uuidV5('sequence-planned', request.conversationId, request.requestId, request.sendId),
    occurredAt: now,
    producer: 'planner',
    correlationId: request.correlationId,
    causationId: request.requestEventId,
    conversationId: request.conversationId,
    campaignId: request.campaignId,
    candidateKey: request.candidateKey,
    steps: [request.step, ...request.followUps.map((followUp) => followUp.step)],
  };
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

export function schedule(send: PlannedSend, dueAt: number, now: number): Scheduling {
  return { send, dueAt, event: nextStepScheduled(send, dueAt, now) };
}

/**
 * Chooses the content of the head step and of every follow-up for the candidate's variant decision,
 * then plans the head: a SendRequested when due (no `sendAt`, or one not after `now`), else a
 * scheduled step. Refused, with a reason, when a step has no content for the decision (`code` says
 * which, `at` where: `contents` or `followUps[i].contents`). The caller asks only for a step that is
 * still open (step.ts `arrivalOf`).
 */
export function planRequest(
  request: PlannedRequest,
  decision: VariantDecision | null,
  now: number,
): { ok: true; plan: Plan } | { ok: false; reason: string; code: ContentProblem; at: string } {
  const head = chooseContent(request.contents, decision);
  if (!head.ok) return { ok: false, reason: head.reason, code: head.code, at: 'contents' };
  const followUps: StoredFollowUp[] = [];
  for (const [i, followUp] of request.followUps.entries()) {
    const chosen = chooseContent(followUp.contents, decision);
    // Reasons name fields, never the caller's values: they go to logs and DLQ headers.
    if (!chosen.ok)
      return {
        ok: false,
        reason: `followUps[${i}]: ${chosen.reason}`,
        code: chosen.code,
        at: `followUps[${i}].contents`,
      };
    followUps.push({
      step: followUp.step,
      delayMs: followUp.delayMs,
      content: chosen.content,
      variant: chosen.variant,
    });
  }
  const send = plannedSend(request, request.step, request.sendId, head.content, head.variant);
  const later = request.sendAt !== null && request.sendAt > now ? request.sendAt : null;
  return {
    ok: true,
    plan: {
      send: later === null ? sendRequested(send, null, now) : null,
      schedule: later === null ? null : schedule(send, later, now),
      sequence: followUps.length > 0 ? { head: send, followUps } : null,
      planned: sequencePlanned(request, now),
    },
  };
}

/**
 * The follow-up a sequence schedules once the step it waited for was sent (at `sentAt`, the
 * sender's record): due `delayMs` after that send, with the head's candidate and experiment and the
 * follow-up's own content. Null when the sequence has no follow-up left.
 */
export function planFollowUp(sequence: AdvancedSequence, sentAt: number, now: number): Scheduling | null {
  const followUp = sequence.followUps[sequence.nextIndex];
  if (!followUp) return null;
  const { template } = sequence;
  const send: PlannedSend = {
    ...template,
    step: followUp.step,
    sendId: sendIdFor(template.campaignId, template.candidateKey, followUp.step),
    variant: followUp.variant,
    experimentId: followUp.variant === null ? null : template.experimentId,
    subject: followUp.content.subject,
    body: followUp.content.body,
  };
  return schedule(send, sentAt + followUp.delayMs, now);
}
