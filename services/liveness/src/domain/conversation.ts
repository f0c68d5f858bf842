/**
 * The liveness rules, as a fold over a conversation's events in event-time order (the broker's
 * append time). Pure: no clock, no IO. The projection stores every event and re-folds, so
 * redeliveries and events arriving out of order give the same state as the ordered stream.
 *
 * - ConversationStarted, a send (SendRecorded `sent`), MessageReceived and StepCompleted create an
 *   obligation: someone owes the candidate a next step, since that event (since the first of several
 *   unanswered messages).
 * - NextStepScheduled discharges the obligation and sets a deadline (its dueAt).
 * - Executing that step (its StepCompleted, or a send of that step) clears the deadline.
 * - StepCancelled (the planner's, on a reply or a close) removes that step's deadline; an open
 *   conversation then owes a next step again.
 * - ConversationClosed ends all of it; a later event reopens the conversation (a cancellation does not).
 */

export type ObligationKind = 'inbound' | 'outbound';

export type ConversationInput =
  | { readonly type: 'ConversationStarted' }
  | { readonly type: 'MessageReceived' }
  | { readonly type: 'NextStepScheduled'; readonly stepId: string; readonly dueAt: number }
  | { readonly type: 'StepCompleted'; readonly stepId: string }
  | { readonly type: 'SendRecorded'; readonly step: string }
  | { readonly type: 'StepCancelled'; readonly stepId: string }
  | { readonly type: 'ConversationClosed' };

export interface TimedInput {
  readonly eventId: string;
  readonly at: number;
  /**
   * Where the event sits in the log (topic, partition, offset). Records of one producer batch share
   * their broker append time, so equal times are ordered by log position, which is exact within a
   * partition (a conversation's events share its candidate's partition).
   */
  readonly position?: readonly [topic: string, partition: number, offset: number];
  readonly input: ConversationInput;
}

function compare(a: TimedInput, b: TimedInput): number {
  if (a.at !== b.at) return a.at - b.at;
  const [ta = '', pa = 0, oa = 0] = a.position ?? [];
  const [tb = '', pb = 0, ob = 0] = b.position ?? [];
  if (ta !== tb) return ta < tb ? -1 : 1;
  if (pa !== pb) return pa - pb;
  if (oa !== ob) return oa - ob;
  return a.eventId < b.eventId ? -1 : a.eventId > b.eventId ? 1 : 0;
}

export interface ConversationState {
  readonly status: 'open' | 'closed';
  /** Since when a next step is owed; null when none is. */
  readonly obligationSince: number | null;
  /** An inbound message deserves a much shorter grace than an idle outbound thread. */
  readonly obligationKind: ObligationKind | null;
  readonly pendingStepId: string | null;
  readonly dueAt: number | null;
  readonly lastEventAt: number | null;
  readonly lastEventType: ConversationInput['type'] | null;
}

export const initialState: ConversationState = {
  status: 'open',
  obligationSince: null,
  obligationKind: null,
  pendingStepId: null,
  dueAt: null,
  lastEventAt: null,
  lastEventType: null,
};

function executes(state: ConversationState, stepId: string): Pick<ConversationState, 'pendingStepId' | 'dueAt'> {
  return state.pendingStepId === stepId
    ? { pendingStepId: null, dueAt: null }
    : { pendingStepId: state.pendingStepId, dueAt: state.dueAt };
}

export function evolve(state: ConversationState, { at, input }: TimedInput): ConversationState {
  const seen = { lastEventAt: at, lastEventType: input.type };
  switch (input.type) {
    case 'ConversationStarted':
      return {
        ...state,
        ...seen,
        status: 'open',
        obligationSince: state.obligationSince ?? at,
        obligationKind: state.obligationKind ?? 'outbound',
      };
    case 'MessageReceived':
      // A second unanswered message does not make the debt younger: the oldest one is still waiting.
      return {
        ...state,
        ...seen,
        status: 'open',
        obligationSince:
          state.obligationKind === 'inbound' && state.obligationSince !== null ? state.obligationSince : at,
        obligationKind: 'inbound',
      };
    case 'StepCompleted':
      return {
        ...state,
        ...seen,
        ...executes(state, input.stepId),
        status: 'open',
        obligationSince: at,
        obligationKind: 'outbound',
      };
    case 'SendRecorded':
      return {
        ...state,
        ...seen,
        ...executes(state, input.step),
        status: 'open',
        obligationSince: at,
        obligationKind: 'outbound',
      };
    case 'NextStepScheduled':
      return {
        ...state,
        ...seen,
        status: 'open',
        obligationSince: null,
        obligationKind: null,
        pendingStepId: input.stepId,
        dueAt: input.dueAt,
      };
    case 'StepCancelled': {
      // A cancelled step is not a next step: unless the conversation is closed, one is owed again.
      if (state.status === 'closed' || state.pendingStepId !== input.stepId) return { ...state, ...seen };
      return {
        ...state,
        ...seen,
        pendingStepId: null,
        dueAt: null,
        obligationSince: state.obligationSince ?? at,
        obligationKind: state.obligationKind ?? 'outbound',
      };
    }
    case 'ConversationClosed':
      return { ...initialState, ...seen, status: 'closed' };
    default: {
      const exhaustive: never = input;
      throw new Error(`unknown conversation input ${JSON.stringify(exhaustive)}`);
    }
  }
}

/** Folds events in event-time order, ties by log position: the result never depends on arrival order. */
export function project(events: readonly TimedInput[]): ConversationState {
  return [...events].sort(compare).reduce(evolve, initialState);
}

export interface Graces {
  readonly inboundMs: number;
  readonly outboundMs: number;
  readonly overdueMs: number;
}

export type StallReason = 'no_next_step' | 'next_step_overdue';

export const obligationKinds: readonly ObligationKind[] = ['inbound', 'outbound'];

/** A stall rule: a deadline at a state's time plus a grace; past it, the conversation is stalled. */
export interface StallRule {
  readonly reason: StallReason;
  readonly deadline: 'obligation' | 'overdue';
  /** The state's time the grace counts from (and the stall's `since`); no deadline while it is null. */
  readonly anchor: 'obligationSince' | 'dueAt';
  /** Which grace applies, by the obligation's kind. */
  readonly grace: (kind: ObligationKind | null) => keyof Graces;
}

/**
 * The stall rules, in priority order: an unmet obligation first (someone is waiting), then an
 * overdue step. The one definition: `deadlines` and `stallAt` read it, and the repository generates
 * the SQL of its sweep and of a grace change from it (adapters/stall-sql.ts), so the sweep cannot
 * drift from the fold (test/stall-rules.int.test.ts checks them against each other).
 */
export const stallRules: readonly StallRule[] = [
  {
    reason: 'no_next_step',
    deadline: 'obligation',
    anchor: 'obligationSince',
    grace: (kind) => (kind === 'inbound' ? 'inboundMs' : 'outboundMs'),
  },
  { reason: 'next_step_overdue', deadline: 'overdue', anchor: 'dueAt', grace: () => 'overdueMs' },
];

export type Deadlines = Record<StallRule['deadline'], number | null>;

/** When each rule would flag the conversation (epoch ms), if nothing happens before. */
export function deadlines(state: ConversationState, graces: Graces): Deadlines {
  const due: Deadlines = { obligation: null, overdue: null };
  if (state.status === 'closed') return due;
  for (const rule of stallRules) {
    const anchor = state[rule.anchor];
    if (anchor !== null) due[rule.deadline] = anchor + graces[rule.grace(state.obligationKind)];
  }
  return due;
}

/** The earliest deadline: when the sweep must look at the conversation next. */
export function stallDeadline(due: Deadlines): number | null {
  return (
    stallRules
      .map((rule) => due[rule.deadline])
      .filter((d): d is number => d !== null)
      .sort((a, b) => a - b)[0] ?? null
  );
}

/** The stall at `now`, if any: the first rule in priority order whose deadline has passed. */
export function stallAt(
  state: ConversationState,
  graces: Graces,
  now: number,
): { reason: StallReason; since: number } | null {
  const due = deadlines(state, graces);
  for (const rule of stallRules) {
    const deadline = due[rule.deadline];
    if (deadline !== null && now >= deadline) return { reason: rule.reason, since: state[rule.anchor] as number };
  }
  return null;
}

/** A conversation re-folded from its stored events: what the projection persists. */
export interface Refolded {
  readonly state: ConversationState;
  readonly deadlines: Deadlines;
  readonly stallDeadline: number | null;
  /** It was flagged and is no longer stalled at `now`: its flag is lifted and a recovery published. */
  readonly healed: boolean;
}

export function refold(events: readonly TimedInput[], graces: Graces, now: number, flagged: boolean): Refolded {
  const state = project(events);
  const due = deadlines(state, graces);
  return {
    state,
    deadlines: due,
    stallDeadline: stallDeadline(due),
    healed: flagged && stallAt(state, graces, now) === null,
  };
}
