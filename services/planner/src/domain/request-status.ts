/**
 * What became of a request, as `GET /v1/outreach-requests/:requestId` tells its publisher. Three
 * sources, each folded by a rule here:
 *
 * - the request's record, which the planner keeps as it decides (`REQUEST_TRANSITIONS`): accepted
 *   by the HTTP ingress, then planned or rejected when the consumer reads it. A plan is final. A
 *   rejection is not: the same requestId sent again, fixed, may still be planned. An accepted
 *   request is rejected only for its own event (the consumer refusing what the HTTP ingress took:
 *   `SAME_EVENT_ONLY`). A refusal that cannot move the record (`refusalTold`: the requestId is
 *   another event's, accepted or planned) is not told: any publish token could otherwise put an
 *   OutreachRejected on another publisher's request by reusing its id in a bad body;
 * - each send's outcome, projected from `SendRecorded` (the sender's events; the planner never reads
 *   the sender's tables). `supersedes` keeps the latest by the sender's database time, so a
 *   duplicated or replayed event, or one that arrives late, never moves a send back; a send that
 *   went out stays `sent`;
 * - the planner's own steps (scheduled, emitted, cancelled) and sequences, for sends that have no
 *   outcome yet.
 *
 * Pure: rows come in as values; the repository applies `REQUEST_TRANSITIONS` as the condition of
 * its upsert (`requestUpsertCondition`), so the SQL and this table cannot disagree.
 */
import { sendIdFor, type SendRecorded } from '@outreach/contracts';
import type { RejectionReason, RequestRejection } from './rejection.js';
import type { PlannedRequest } from './request.js';

export type Outcome = SendRecorded['outcome'];

/** The request's record, as the planner decides it. */
export type RecordStatus = 'accepted' | 'planned' | 'rejected';
export const RECORD_STATUSES: readonly RecordStatus[] = ['accepted', 'planned', 'rejected'];

/** For each status a record can move to, the statuses it may come from (`none`: no record yet). */
export const REQUEST_TRANSITIONS: Readonly<Record<RecordStatus, readonly (RecordStatus | 'none')[]>> = {
  // The HTTP ingress's 202: only a request the consumer has not decided yet.
  accepted: ['none'],
  // A plan is final; it follows acceptance, or a rejection the publisher fixed and sent again.
  planned: ['none', 'accepted', 'rejected'],
  // The latest refusal wins, but never over a plan.
  rejected: ['none', 'accepted', 'rejected'],
};

/**
 * For each status a record can move to, the statuses it may come from only for the event that is
 * stored with the record: the consumer may reject the request the HTTP ingress accepted (its own
 * event, say an experiment that turned out unknown), not another event that reuses its requestId.
 */
export const SAME_EVENT_ONLY: Readonly<Partial<Record<RecordStatus, readonly RecordStatus[]>>> = {
  rejected: ['accepted'],
};

/** `sameEvent`: the decision is about the event stored with the record (or the record has none). */
export function recordMoves(from: RecordStatus | 'none', to: RecordStatus, sameEvent = true): boolean {
  if (!REQUEST_TRANSITIONS[to].includes(from)) return false;
  return sameEvent || !(from !== 'none' && SAME_EVENT_ONLY[to]?.includes(from));
}

/** A request's record as stored: its status and the event it was decided on (null before #31). */
export interface StoredRecord {
  readonly status: RecordStatus;
  readonly eventId: string | null;
}

/**
 * Whether the refusal of request event `eventId` (null: refused over HTTP, before any event) is told
 * to the requestId's publisher (an OutreachRejected, the record): only where it moves the record.
 * Not over a plan, whether stored or made in the same batch; not over an acceptance of another
 * event. Such a refusal is still answered (HTTP 4xx) or dead-lettered (Kafka), never published: the
 * topic is keyed by requestId, and its readers take a rejection there as their own request's.
 */
export function refusalTold(
  stored: StoredRecord | undefined,
  eventId: string | null,
  plannedInBatch: boolean,
): boolean {
  if (plannedInBatch) return false;
  const sameEvent = stored?.eventId === null || (eventId !== null && stored?.eventId === eventId);
  return recordMoves(stored?.status ?? 'none', 'rejected', sameEvent);
}

/** One decision about a request event: planned (its sends), or rejected (why). `eventId` null: over HTTP. */
export type RequestDecision =
  | { readonly requestId: string; readonly eventId: string | null; readonly to: 'planned' }
  | {
      readonly requestId: string;
      readonly eventId: string | null;
      readonly to: 'rejected';
      readonly rejection: RequestRejection;
    };

/**
 * The decisions of one batch, one per request id, as applying them in order to a request without a
 * record would leave it; the upsert's condition then applies the result to the stored record. For
 * this table that equals applying each in turn to the stored record (a plan absorbs what follows;
 * the last refusal replaces the earlier ones), which request-status.unit.test.ts checks for every
 * stored status and every sequence of up to three decisions.
 */
export function foldDecisions(decisions: readonly RequestDecision[]): RequestDecision[] {
  const folded = new Map<string, RequestDecision>();
  for (const decision of decisions) {
    const current = folded.get(decision.requestId);
    if (recordMoves(current?.to ?? 'none', decision.to)) folded.set(decision.requestId, decision);
  }
  return [...folded.values()];
}

/** The sends a plan may lead to, in sequence order: the step (ord 0), then each follow-up. */
export interface PlannedStep {
  readonly ord: number;
  readonly sendId: string;
  readonly step: string;
}

export function plannedSteps(request: PlannedRequest): PlannedStep[] {
  return [
    { ord: 0, sendId: request.sendId, step: request.step },
    ...request.followUps.map((followUp, i) => ({
      ord: i + 1,
      sendId: sendIdFor(request.campaignId, request.candidateKey, followUp.step),
      step: followUp.step,
    })),
  ];
}

// ------------------------------------------------------------------------ send outcomes

/** A send's outcome, as its SendRecorded says (requestId null: a sender before schema v4). */
export interface SendOutcome {
  readonly sendId: string;
  readonly outcome: Outcome;
  readonly reason: string | null;
  readonly recordedAt: number;
  readonly requestId: string | null;
  readonly eventId: string;
}

export function outcomeOf(event: SendRecorded): SendOutcome {
  return {
    sendId: event.sendId,
    outcome: event.outcome,
    reason: event.reason,
    recordedAt: event.recordedAt,
    requestId: event.requestId,
    eventId: event.eventId,
  };
}

/** Between two records of one send at the same database time, the more settled one wins. */
const SETTLED: Readonly<Record<Outcome, number>> = {
  held: 0,
  ambiguous: 1,
  failed: 2,
  skipped_duplicate: 2,
  suppressed: 2,
  sent: 3,
};

/**
 * Whether `next` replaces `current` as the send's outcome: the later record (the sender's database
 * clock) wins, so a held send that is later sent reads `sent`, and a redelivered or replayed older
 * record changes nothing. Nothing replaces `sent`: the email went out.
 */
export function supersedes(current: SendOutcome | undefined, next: SendOutcome): boolean {
  if (current === undefined) return true;
  if (current.outcome === 'sent') return false;
  if (next.recordedAt !== current.recordedAt) return next.recordedAt > current.recordedAt;
  return SETTLED[next.outcome] > SETTLED[current.outcome];
}

/** The outcomes that change what is stored, one per send, after folding `incoming` in arrival order. */
export function latestOutcomes(
  stored: ReadonlyMap<string, SendOutcome>,
  incoming: readonly SendOutcome[],
): SendOutcome[] {
  const latest = new Map(stored);
  const changed = new Map<string, SendOutcome>();
  for (const outcome of incoming) {
    if (!supersedes(latest.get(outcome.sendId), outcome)) continue;
    latest.set(outcome.sendId, outcome);
    changed.set(outcome.sendId, outcome);
  }
  return [...changed.values()];
}

// ------------------------------------------------------------------------ the status a publisher reads

/**
 * A send as the publisher sees it: an outcome; `superseded` when its outcome was recorded for
 * another request (one that asked for the same campaign, candidate and step: a reschedule took it
 * over, or it had already been made); or, before any outcome, where the planner has it.
 */
export type SendStatus = Outcome | 'superseded' | 'pending' | 'scheduled' | 'requested' | 'cancelled';

/** The request's status: its record's, or once planned, the outcome of its latest recorded send. */
export type RequestStatus = 'accepted' | 'rejected' | 'planned' | 'cancelled' | Outcome | 'superseded';

/** A send's recorded outcomes, in the order both status lists give them. */
const OUTCOMES: readonly Outcome[] = ['sent', 'skipped_duplicate', 'suppressed', 'failed', 'ambiguous', 'held'];
export const REQUEST_STATUSES: readonly RequestStatus[] = [
  'accepted',
  'rejected',
  'planned',
  'cancelled',
  ...OUTCOMES,
  'superseded',
];
export const SEND_STATUSES: readonly SendStatus[] = [
  'pending',
  'scheduled',
  'requested',
  'cancelled',
  ...OUTCOMES,
  'superseded',
];

/** What the planner knows of one planned send, as the repository reads it. */
export interface StoredSend {
  readonly ord: number;
  readonly sendId: string;
  readonly step: string;
  readonly plannedAt: number;
  readonly outcome: SendOutcome | null;
  /** Its row in `scheduled_steps`, if it was scheduled; `requestId` is the request that last scheduled it. */
  readonly scheduled: {
    readonly status: 'scheduled' | 'emitted' | 'cancelled';
    readonly dueAt: number;
    readonly emittedAt: number | null;
    readonly updatedAt: number;
    readonly requestId: string | null;
  } | null;
  /** The request's sequence of follow-ups stopped (a reply, a close) before this one was scheduled. */
  readonly sequenceStopped: boolean;
}

export interface SendView {
  readonly sendId: string;
  readonly step: string;
  readonly status: SendStatus;
  /** When it reached that status (due time, for a scheduled send); null for one still pending. */
  readonly at: number | null;
  /** The sender's reason for an outcome other than sent. */
  readonly reason: string | null;
}

export interface RequestRecord {
  readonly requestId: string;
  readonly status: RecordStatus;
  readonly reason: RejectionReason | null;
  readonly detail: string | null;
  readonly sendId: string | null;
  readonly updatedAt: number;
}

export interface RequestView {
  readonly requestId: string;
  readonly status: RequestStatus;
  readonly rejection: {
    readonly reason: RejectionReason;
    readonly detail: string;
    readonly sendId: string | null;
  } | null;
  readonly updatedAt: number;
  readonly sends: readonly SendView[];
}

export function sendView(requestId: string, send: StoredSend): SendView {
  const view = (status: SendStatus, at: number | null, reason: string | null = null): SendView => ({
    sendId: send.sendId,
    step: send.step,
    status,
    at,
    reason,
  });
  const { outcome, scheduled } = send;
  if (outcome !== null) {
    return outcome.requestId !== null && outcome.requestId !== requestId
      ? view('superseded', outcome.recordedAt)
      : view(outcome.outcome, outcome.recordedAt, outcome.reason);
  }
  if (scheduled !== null) {
    // Another request rescheduled the step: it goes out for that request.
    if (scheduled.requestId !== null && scheduled.requestId !== requestId)
      return view('superseded', scheduled.updatedAt);
    switch (scheduled.status) {
      case 'scheduled':
        return view('scheduled', scheduled.dueAt);
      case 'emitted':
        return view('requested', scheduled.emittedAt ?? scheduled.updatedAt);
      case 'cancelled':
        return view('cancelled', scheduled.updatedAt);
      default: {
        const exhaustive: never = scheduled.status;
        throw new Error(`unknown step status ${String(exhaustive)}`);
      }
    }
  }
  // The step itself, due at once, went to the sender when it was planned; a follow-up waits for
  // the step before it, unless its sequence stopped.
  if (send.ord === 0) return view('requested', send.plannedAt);
  return send.sequenceStopped ? view('cancelled', null) : view('pending', null);
}

const OUTCOME_LIKE = new Set<SendStatus>([
  'sent',
  'skipped_duplicate',
  'suppressed',
  'failed',
  'ambiguous',
  'held',
  'superseded',
]);

/**
 * The request's status: `accepted` or `rejected` as its record says; once planned, the status of its
 * latest send (in sequence order) that has an outcome, so a request reads `sent` once its step went
 * out and `held` if a follow-up is held; `cancelled` when its step was cancelled before any send;
 * else `planned`.
 */
export function requestView(record: RequestRecord, sends: readonly StoredSend[]): RequestView {
  const views = [...sends].sort((a, b) => a.ord - b.ord).map((send) => sendView(record.requestId, send));
  const rejection =
    record.status === 'rejected' && record.reason !== null
      ? { reason: record.reason, detail: record.detail ?? '', sendId: record.sendId }
      : null;
  const settled = views.filter((send) => OUTCOME_LIKE.has(send.status)).at(-1);
  const status: RequestStatus =
    record.status !== 'planned'
      ? record.status
      : ((settled?.status as RequestStatus | undefined) ??
        (views[0]?.status === 'cancelled' ? 'cancelled' : 'planned'));
  return { requestId: record.requestId, status, rejection, updatedAt: record.updatedAt, sends: views };
}
