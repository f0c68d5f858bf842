/**
 * One step of a conversation (campaign, candidate key, step) and the planner's events about it.
 * A step planned for later is scheduled (NextStepScheduled; again, to reschedule it while it waits),
 * then either emitted once, when due, as a SendRequested, or cancelled by a reply or a close
 * (StepCancelled). Pure: the stored send and the database clock (`now`) come in as values.
 *
 * The repository applies these transitions as conditional updates of the step's row in
 * `scheduled_steps` (WHERE status = 'scheduled'), which is what keeps concurrent planners to them;
 * the workflow then asks the step's decider (`stepDecider`) for the events of each row such an update
 * moved, from the state that row was in. Event ids derive from what the event means, so a redelivery that decides
 * again enqueues nothing new.
 */
import {
  uuidV5,
  type Decider,
  type NextStepScheduled,
  type SendRequested,
  type StepCancelled,
} from '@outreach/contracts';
import type { PlannedRequest } from './request.js';

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

export type StepEvent = NextStepScheduled | SendRequested | StepCancelled;

/** A step's row in `scheduled_steps`, as its events leave it; `none` while it has no row. */
export type StepState =
  | { readonly status: 'none' }
  | { readonly status: 'scheduled'; readonly dueAt: number }
  | { readonly status: 'emitted' }
  | { readonly status: 'cancelled' };

/** A step's identity: its row's key in `scheduled_steps`. */
export interface StepRef {
  readonly campaignId: string;
  readonly candidateKey: string;
  readonly step: string;
}

/** The key a step is filed under (the repository's `storedSteps`, the deciders' batches). */
export function stepRefKey(ref: StepRef): string {
  return `${ref.campaignId}\u0000${ref.candidateKey}\u0000${ref.step}`;
}

export interface StepKey {
  readonly conversationId: string;
  readonly campaignId: string;
  readonly candidateKey: string;
  readonly step: string;
}

export type StepCommand =
  | { readonly type: 'EmitStep'; readonly send: PlannedSend; readonly now: number }
  | {
      readonly type: 'CancelStep';
      readonly step: StepKey;
      readonly reason: string;
      readonly correlationId: string;
      readonly causationId: string;
      readonly now: number;
    };

export const initialStep: StepState = { status: 'none' };

/** A step as stored: its state, and the request that last scheduled it (null while it has no row). */
export interface StoredStep {
  readonly state: StepState;
  readonly requestId: string | null;
}

export const unstoredStep: StoredStep = { state: initialStep, requestId: null };

/**
 * What a request for a step meets. A step still open (no row yet, or scheduled) is planned: sent
 * now, scheduled, or rescheduled. A step already emitted or cancelled stays as it is, and the
 * request plans nothing: the same request again (a redelivery, an HTTP retry: the same requestId)
 * is `repeated`, quietly; any other request for it is `rerequested`, which the caller answers,
 * counts and logs, never drops in silence (seed 003's silent drop, one level up).
 */
export type Arrival =
  { readonly kind: 'open' } | { readonly kind: 'repeated' | 'rerequested'; readonly state: 'emitted' | 'cancelled' };

export function arrivalOf(stored: StoredStep, requestId: string): Arrival {
  const { state } = stored;
  switch (state.status) {
    case 'none':
    case 'scheduled':
      return { kind: 'open' };
    case 'emitted':
    case 'cancelled':
      return { kind: stored.requestId === requestId ? 'repeated' : 'rerequested', state: state.status };
    default: {
      const exhaustive: never = state;
      throw new Error(`unknown step state ${JSON.stringify(exhaustive)}`);
    }
  }
}

/** SendRequested: `scheduledFor` is the due time of a scheduled step, null for a send due at once. */
export function sendRequested(send: PlannedSend, scheduledFor: number | null, now: number): SendRequested {
  return {
    type: 'SendRequested',
    // The send's own id: however often it is planned or emitted, the sender sees one request.
    eventId: uuidV5('send-requested', send.sendId),
    occurredAt: now,
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
    scheduledFor,
    // The sender copies it to its SendRecorded, so the send is filed under this conversation.
    conversationId: send.conversationId,
  };
}

export function nextStepScheduled(send: PlannedSend, dueAt: number, now: number): NextStepScheduled {
  return {
    type: 'NextStepScheduled',
    // A reschedule to another time is a new event; the same schedule planned again is not.
    eventId: uuidV5('next-step-scheduled', send.conversationId, send.step, String(dueAt)),
    occurredAt: now,
    producer: 'planner',
    correlationId: send.correlationId,
    causationId: send.requestEventId,
    conversationId: send.conversationId,
    campaignId: send.campaignId,
    candidateKey: send.candidateKey,
    stepId: send.step,
    dueAt,
  };
}

export function evolveStep(state: StepState, event: StepEvent): StepState {
  switch (event.type) {
    case 'NextStepScheduled':
      // A reschedule moves the due time; a step already emitted or cancelled stays as it is.
      return state.status === 'none' || state.status === 'scheduled'
        ? { status: 'scheduled', dueAt: event.dueAt }
        : state;
    case 'SendRequested':
      // Only the scheduler's SendRequested (scheduledFor set) emits the row. A send due at once does
      // not touch a scheduled row: it fires later with the same sendId, and the sender sends once.
      return state.status === 'scheduled' && event.scheduledFor !== null ? { status: 'emitted' } : state;
    case 'StepCancelled':
      return state.status === 'scheduled' ? { status: 'cancelled' } : state;
    default: {
      const exhaustive: never = event;
      throw new Error(`unknown step event ${JSON.stringify(exhaustive)}`);
    }
  }
}

/**
 * Emitting is legal once, for a scheduled step that is due; anything else is a bug in the caller
 * (the scheduler only takes due, scheduled rows). Cancelling a step that is no longer scheduled
 * (already sent, or already cancelled) has nothing to do.
 */
export function decideStep(state: StepState, command: StepCommand): StepEvent[] {
  switch (command.type) {
    case 'EmitStep':
      if (state.status !== 'scheduled') throw new Error(`cannot emit a step that is ${state.status}, not scheduled`);
      if (state.dueAt > command.now) throw new Error('cannot emit a step before it is due');
      return [sendRequested(command.send, state.dueAt, command.now)];
    case 'CancelStep': {
      if (state.status !== 'scheduled') return [];
      const { conversationId, campaignId, candidateKey, step } = command.step;
      return [
        {
          type: 'StepCancelled',
          eventId: uuidV5('step-cancelled', conversationId, step, command.reason),
          occurredAt: command.now,
          producer: 'planner',
          correlationId: command.correlationId,
          causationId: command.causationId,
          conversationId,
          campaignId,
          candidateKey,
          stepId: step,
          reason: command.reason,
        },
      ];
    }
    default: {
      const exhaustive: never = command;
      throw new Error(`unknown step command ${JSON.stringify(exhaustive)}`);
    }
  }
}

/** The step's rules as one decider (docs/style.md, "deciders"): the scheduler and the conversations run it. */
export const stepDecider: Decider<StepState, StepCommand, StepEvent> = {
  initialState: initialStep,
  decide: decideStep,
  evolve: evolveStep,
};
