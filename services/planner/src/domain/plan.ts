/**
 * What the planner does with a request, and with the send of a sequence's step: the events to emit
 * and the rows to keep, decided here; the repository stores and enqueues them as they are. The
 * request's rules, in their one order, are the request's decider (`requestDecider`), which the HTTP
 * ingress and the consumer both run (workflow/outreach-requests.ts). Pure: the stored step, the
 * experiment's answer and the database clock (`now`, read once per transaction) come in as values.
 */
import {
  sendIdFor,
  uuidV5,
  type Decider,
  type NextStepScheduled,
  type OutreachRejected,
  type SendRequested,
  type SequencePlanned,
} from '@outreach/contracts';
import {
  contentMissing,
  experimentRefused,
  stepTaken,
  unknownExperiment,
  type RefusedRequest,
  type RequestRejection,
} from './rejection.js';
import {
  chooseContent,
  UNKNOWN_EXPERIMENT,
  variantCoverage,
  type Content,
  type ContentProblem,
  type PlannedRequest,
  type VariantDecision,
} from './request.js';
import {
  arrivalOf,
  evolveStep,
  nextStepScheduled,
  sendRequested,
  stepRefKey,
  unstoredStep,
  type PlannedSend,
  type StepEvent,
  type StoredStep,
} from './step.js';

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
  return {
    requestId: request.requestId,
    requestEventId: request.requestEventId,
    correlationId: request.correlationId,
    campaignId: request.campaignId,
    candidateId: request.candidateId,
    candidateKey: request.candidateKey,
    conversationId: request.conversationId,
    email: request.email,
    emailNorm: request.emailNorm,
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

// ------------------------------------------------------------------------ the request's decider

/** What the experiment service answered about a request's experiment, as its ingress asked it. */
export type ExperimentAnswer =
  /** The request names no experiment. */
  | { readonly kind: 'none' }
  /** The service did not answer (the HTTP ingress): the request is taken unchecked, the consumer waits for it. */
  | { readonly kind: 'unavailable' }
  /** No such experiment. */
  | { readonly kind: 'unknown' }
  /** The service refused the ids it was given (a 400). */
  | { readonly kind: 'refused' }
  /** The experiment's variants (the HTTP ingress checks that each finds content). */
  | { readonly kind: 'variants'; readonly variants: readonly string[] }
  /** The candidate's sticky variant, or why it has none (the consumer plans with it). */
  | { readonly kind: 'assigned'; readonly decision: VariantDecision };

/**
 * What a request meets is the step it asks for, as stored (locked by the consumer): the request's
 * decider is keyed by that step (`stepRefKey`), so two requests for one step in a batch see each other.
 */
export type RequestState = StoredStep;

export type RequestCommand =
  /** The HTTP ingress: take the request (it goes to the requests topic, for the consumer to plan) or refuse it. */
  | {
      readonly type: 'AcceptRequest';
      readonly request: PlannedRequest;
      /** To whom a refusal is addressed. */
      readonly refused: RefusedRequest;
      readonly experiment: ExperimentAnswer;
    }
  /** The consumer: plan the request, at the database's `now`, or refuse it. */
  | {
      readonly type: 'PlanRequest';
      readonly request: PlannedRequest;
      readonly refused: RefusedRequest;
      readonly experiment: ExperimentAnswer;
      readonly now: number;
    }
  /** A request refused before it could be decided (it breaks the request rules, or failed for good). */
  | {
      readonly type: 'RefuseRequest';
      readonly refused: RefusedRequest;
      readonly rejection: RequestRejection;
      readonly reason: string;
    };

export type RequestEvent =
  | { readonly type: 'RequestAccepted'; readonly request: PlannedRequest; readonly experimentChecked: boolean }
  | { readonly type: 'RequestPlanned'; readonly request: PlannedRequest; readonly plan: Plan }
  | {
      readonly type: 'RequestRejected';
      readonly refused: RefusedRequest;
      /** What its publisher is told (OutreachRejected, the request's record). */
      readonly rejection: RequestRejection;
      /** For logs, the DLQ and the HTTP answer: the platform's words and field names only. */
      readonly reason: string;
      /** A re-request of a step already emitted or cancelled: counted and answered, never dead-lettered. */
      readonly rerequested: 'emitted' | 'cancelled' | null;
    };

/** The aggregate a command is about: the step it asks for, or (refused before any) the request itself. */
export function requestKeyOf(command: RequestCommand): string {
  return command.type === 'RefuseRequest' ? `request\u0000${command.refused.requestId}` : stepRefKey(command.request);
}

const rejected = (
  refused: RefusedRequest,
  rejection: RequestRejection,
  reason: string,
  rerequested: 'emitted' | 'cancelled' | null = null,
): RequestEvent => ({ type: 'RequestRejected', refused, rejection, reason, rerequested });

/**
 * The request's rules, in their one order, for both ingresses:
 * 1. a step already emitted or cancelled plans nothing: another request for it is a re-request
 *    (refused, `step_already_*`); the same request again is a quiet repeat for the consumer, and
 *    taken again over HTTP (the consumer then repeats it quietly);
 * 2. an unknown experiment, or ids the experiment service refused, are refused;
 * 3. over HTTP, every variant of the experiment must find content (`variantCoverage`); the request
 *    is taken, checked or (the service did not answer) not;
 * 4. for the consumer, the content for the candidate's variant decision (`planRequest`): planned, or
 *    refused for the content it lacks.
 */
export function decideRequest(state: RequestState, command: RequestCommand): RequestEvent[] {
  if (command.type === 'RefuseRequest') return [rejected(command.refused, command.rejection, command.reason)];
  const { request, refused, experiment } = command;
  const arrival = arrivalOf(state, request.requestId);
  if (arrival.kind === 'rerequested')
    return [
      rejected(
        refused,
        stepTaken(arrival.state, request.sendId),
        `the step was already ${arrival.state}: nothing was planned`,
        arrival.state,
      ),
    ];
  if (arrival.kind === 'repeated' && command.type === 'PlanRequest') return [];
  if (experiment.kind === 'unknown') return [rejected(refused, unknownExperiment, UNKNOWN_EXPERIMENT)];
  if (experiment.kind === 'refused')
    return [
      rejected(refused, experimentRefused, 'the experiment service refused the experimentId or candidateId (400)'),
    ];
  if (command.type === 'AcceptRequest') {
    if (experiment.kind === 'variants') {
      const coverage = variantCoverage(request.contents, experiment.variants);
      if (!coverage.ok)
        return [
          rejected(
            refused,
            coverage.code === 'unknown_experiment' ? unknownExperiment : contentMissing(coverage.code),
            coverage.reason,
          ),
        ];
    }
    return [{ type: 'RequestAccepted', request, experimentChecked: experiment.kind === 'variants' }];
  }
  if (experiment.kind !== 'none' && experiment.kind !== 'assigned')
    throw new Error(`a request is planned with the candidate's assignment, not ${experiment.kind}`);
  const result = planRequest(request, experiment.kind === 'assigned' ? experiment.decision : null, command.now);
  return result.ok
    ? [{ type: 'RequestPlanned', request, plan: result.plan }]
    : [rejected(refused, contentMissing(result.code, result.at), `invalid OutreachRequested: ${result.reason}`)];
}

/**
 * Whether the experiment's answer can matter to the decision: the request names an experiment and
 * its step is not another request's already (a re-request is refused before the experiment is
 * considered, so the HTTP ingress does not ask the service about it).
 */
export function asksExperiment(state: RequestState, request: PlannedRequest): boolean {
  return Boolean(request.experimentId) && arrivalOf(state, request.requestId).kind !== 'rerequested';
}

/** A plan that schedules its step moves the step as the repository's upsert does: only while it is open. */
export function evolveRequest(state: RequestState, event: RequestEvent): RequestState {
  if (event.type !== 'RequestPlanned' || event.plan.schedule === null) return state;
  const next = evolveStep(state.state, event.plan.schedule.event);
  return next === state.state ? state : { state: next, requestId: event.request.requestId };
}

export const requestDecider: Decider<RequestState, RequestCommand, RequestEvent> = {
  initialState: unstoredStep,
  decide: decideRequest,
  evolve: evolveRequest,
};
