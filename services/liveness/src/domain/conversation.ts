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
 * - SequencePlanned (the planner's, per request) names the steps it will send, in order. A step
 *   that ends a plan and that no plan continues after is the last: once it is taken (sent, or
 *   completed) with no other step pending, nothing more is owed and the conversation awaits the
 *   candidate's reply until the reply window ends, when the sweep closes it (`sequence_completed`).
 *   A reply before that is an inbound obligation like any other.
 * - A send that ended without going out for good (SendRecorded `suppressed` or `failed`) ends the
 *   sequence too: the planner plans nothing after it. Its step is no longer pending and, unless
 *   another step is or the candidate is owed an answer, the reply is awaited as after the last step
 *   (the candidate who unsubscribed mid-sequence is not a stall for ever).
 * - ConversationClosed ends all of it; a later event reopens the conversation (a cancellation, a
 *   plan or a send that did not go out does not). The sweep's own `sequence_completed` close applies only while the reply is
 *   still awaited: one that arrives after the conversation moved on (a reply, a new step) is stale.
 */

export type ObligationKind = 'inbound' | 'outbound';

/** A send's terminal outcome that did not go out and ends its sequence (the planner does not go on after it). */
export type UndeliveredOutcome = 'suppressed' | 'failed';

export type ConversationInput =
  | { readonly type: 'ConversationStarted' }
  | { readonly type: 'MessageReceived' }
  | { readonly type: 'NextStepScheduled'; readonly stepId: string; readonly dueAt: number }
  | { readonly type: 'StepCompleted'; readonly stepId: string }
  /** `outcome` absent: sent (the only outcome kept before the others were). */
  | { readonly type: 'SendRecorded'; readonly step: string; readonly outcome?: UndeliveredOutcome }
  | { readonly type: 'StepCancelled'; readonly stepId: string }
  /** `reason` is absent in events stored before it was kept: an unconditional close. */
  | { readonly type: 'ConversationClosed'; readonly reason?: string | null }
  | { readonly type: 'SequencePlanned'; readonly steps: readonly string[] };

/** Why the sweep closes a conversation: its planned sequence was sent in full and no reply came. */
export const SEQUENCE_COMPLETED = 'sequence_completed';
export type CloseReason = typeof SEQUENCE_COMPLETED;

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

/** The fold's event order: append time, then log position, then event id. */
export function logOrder(a: TimedInput, b: TimedInput): number {
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
  /**
   * Since when the candidate's reply is awaited: the last planned step was taken and nothing more
   * is owed. Null otherwise; never set together with an obligation or a pending step.
   */
  readonly awaitingReplySince: number | null;
  /** Steps that end a plan, and steps some plan continues after (each sorted, distinct). */
  readonly finalSteps: readonly string[];
  readonly continuedSteps: readonly string[];
  /** Why it was closed, if it is and a reason was given. */
  readonly closedReason: string | null;
  readonly lastEventAt: number | null;
  readonly lastEventType: ConversationInput['type'] | null;
}

export const initialState: ConversationState = {
  status: 'open',
  obligationSince: null,
  obligationKind: null,
  pendingStepId: null,
  dueAt: null,
  awaitingReplySince: null,
  finalSteps: [],
  continuedSteps: [],
  closedReason: null,
  lastEventAt: null,
  lastEventType: null,
};

const reopened = { status: 'open', closedReason: null } as const;

function executes(state: ConversationState, stepId: string): Pick<ConversationState, 'pendingStepId' | 'dueAt'> {
  return state.pendingStepId === stepId
    ? { pendingStepId: null, dueAt: null }
    : { pendingStepId: state.pendingStepId, dueAt: state.dueAt };
}

/** Sorted and distinct, so a state does not depend on how often or in which order plans arrived. */
function union(a: readonly string[], b: readonly string[]): readonly string[] {
  return [...new Set([...a, ...b])].sort();
}

/** The last step of every plan that holds it: once it is taken, nothing more is planned. */
export function isFinalStep(state: ConversationState, step: string): boolean {
  return state.finalSteps.includes(step) && !state.continuedSteps.includes(step);
}

/**
 * A step taken (sent or completed) at `at`: it executes the pending step if it is that one, and
 * owes the next step, unless it was the last planned one and nothing else is pending: then the
 * candidate's reply is awaited.
 */
function stepTaken(
  state: ConversationState,
  seen: Pick<ConversationState, 'lastEventAt' | 'lastEventType'>,
  at: number,
  step: string,
): ConversationState {
  const pending = executes(state, step);
  const last = isFinalStep(state, step) && pending.pendingStepId === null;
  return {
    ...state,
    ...seen,
    ...pending,
    ...reopened,
    obligationSince: last ? null : at,
    obligationKind: last ? null : 'outbound',
    awaitingReplySince: last ? at : null,
  };
}

/**
 * A step whose send ended without going out (suppressed, failed) at `at`: nothing follows it, so it
 * is no longer pending, and unless another step is pending or an inbound message waits for an answer,
 * nothing more is owed: the candidate's reply is awaited, as after the last step. A closed
 * conversation stays closed: nothing happened in it.
 */
function stepUndelivered(
  state: ConversationState,
  seen: Pick<ConversationState, 'lastEventAt' | 'lastEventType'>,
  at: number,
  step: string,
): ConversationState {
  if (state.status === 'closed') return { ...state, ...seen };
  const pending = executes(state, step);
  if (pending.pendingStepId !== null || state.obligationKind === 'inbound') return { ...state, ...seen, ...pending };
  return { ...state, ...seen, ...pending, obligationSince: null, obligationKind: null, awaitingReplySince: at };
}

export function evolve(state: ConversationState, { at, input }: TimedInput): ConversationState {
  const seen = { lastEventAt: at, lastEventType: input.type };
  switch (input.type) {
    case 'ConversationStarted':
      return {
        ...state,
        ...seen,
        ...reopened,
        obligationSince: state.obligationSince ?? at,
        obligationKind: state.obligationKind ?? 'outbound',
        awaitingReplySince: null,
      };
    case 'MessageReceived':
      // A second unanswered message does not make the debt younger: the oldest one is still waiting.
      // A reply to a finished sequence is owed an answer like any other message.
      return {
        ...state,
        ...seen,
        ...reopened,
        obligationSince:
          state.obligationKind === 'inbound' && state.obligationSince !== null ? state.obligationSince : at,
        obligationKind: 'inbound',
        awaitingReplySince: null,
      };
    case 'StepCompleted':
      return stepTaken(state, seen, at, input.stepId);
    case 'SendRecorded':
      return input.outcome === undefined
        ? stepTaken(state, seen, at, input.step)
        : stepUndelivered(state, seen, at, input.step);
    case 'NextStepScheduled':
      return {
        ...state,
        ...seen,
        ...reopened,
        obligationSince: null,
        obligationKind: null,
        pendingStepId: input.stepId,
        dueAt: input.dueAt,
        awaitingReplySince: null,
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
      // The sweep's close of a sequence nobody answered, arriving after the conversation moved on.
      if (input.reason === SEQUENCE_COMPLETED && state.awaitingReplySince === null) return state;
      // What was planned stays known: a step sent after a reopening may still be the last.
      return {
        ...initialState,
        ...seen,
        status: 'closed',
        closedReason: input.reason ?? null,
        finalSteps: state.finalSteps,
        continuedSteps: state.continuedSteps,
      };
    case 'SequencePlanned': {
      // A plan owes nothing by itself: its steps do, once scheduled or sent.
      const last = input.steps.at(-1);
      return {
        ...state,
        ...seen,
        finalSteps: last === undefined ? state.finalSteps : union(state.finalSteps, [last]),
        continuedSteps: union(state.continuedSteps, input.steps.slice(0, -1)),
      };
    }
    default: {
      const exhaustive: never = input;
      throw new Error(`unknown conversation input ${JSON.stringify(exhaustive)}`);
    }
  }
}

/** Folds events in event-time order, ties by log position: the result never depends on arrival order. */
export function project(events: readonly TimedInput[]): ConversationState {
  return [...events].sort(logOrder).reduce(evolve, initialState);
}

export interface Graces {
  readonly inboundMs: number;
  readonly outboundMs: number;
  readonly overdueMs: number;
  /** How long the candidate's reply is awaited after the last planned step before the conversation closes. */
  readonly replyWindowMs: number;
}

/** A campaign's graces as stored: a reply window not set (null) is the service's default. */
export type GraceSettings = Omit<Graces, 'replyWindowMs'> & { readonly replyWindowMs: number | null };

/** The graces that apply to a campaign's conversations: its own (none stored: the service's defaults). */
export function gracesOf(settings: GraceSettings | null, defaults: Graces): Graces {
  if (settings === null) return defaults;
  return {
    inboundMs: settings.inboundMs,
    outboundMs: settings.outboundMs,
    overdueMs: settings.overdueMs,
    replyWindowMs: settings.replyWindowMs ?? defaults.replyWindowMs,
  };
}

export type StallReason = 'no_next_step' | 'next_step_overdue';

export const obligationKinds: readonly ObligationKind[] = ['inbound', 'outbound'];

interface RuleShape {
  readonly deadline: 'obligation' | 'overdue' | 'reply';
  /** The state's time the grace counts from (and the verdict's `since`); no deadline while it is null. */
  readonly anchor: 'obligationSince' | 'dueAt' | 'awaitingReplySince';
  /** Which grace applies, by the obligation's kind. */
  readonly grace: (kind: ObligationKind | null) => keyof Graces;
}

/**
 * A deadline rule: a deadline at a state's time plus a grace; past it, the conversation is stalled
 * (flagged, and it stays open) or, for a sequence nobody answered, closed.
 */
export type DeadlineRule = RuleShape &
  (
    | { readonly outcome: 'stall'; readonly reason: StallReason }
    | { readonly outcome: 'close'; readonly reason: CloseReason }
  );

/**
 * The deadline rules, in priority order: an unmet obligation first (someone is waiting), then an
 * overdue step, then the end of the reply window (which never meets the other two: a conversation
 * awaiting a reply owes nothing and has no step pending). The one definition: `deadlines` and
 * `verdictAt` read it, and the repository generates the SQL of its sweep and of a grace change
 * from it (adapters/stall-sql.ts), so the sweep cannot drift from the fold
 * (test/stall-rules.int.test.ts checks them against each other).
 */
export const deadlineRules: readonly DeadlineRule[] = [
  {
    outcome: 'stall',
    reason: 'no_next_step',
    deadline: 'obligation',
    anchor: 'obligationSince',
    grace: (kind) => (kind === 'inbound' ? 'inboundMs' : 'outboundMs'),
  },
  { outcome: 'stall', reason: 'next_step_overdue', deadline: 'overdue', anchor: 'dueAt', grace: () => 'overdueMs' },
  {
    outcome: 'close',
    reason: SEQUENCE_COMPLETED,
    deadline: 'reply',
    anchor: 'awaitingReplySince',
    grace: () => 'replyWindowMs',
  },
];

export type Deadlines = Record<DeadlineRule['deadline'], number | null>;

/** When each rule would apply to the conversation (epoch ms), if nothing happens before. */
export function deadlines(state: ConversationState, graces: Graces): Deadlines {
  const due: Deadlines = { obligation: null, overdue: null, reply: null };
  if (state.status === 'closed') return due;
  for (const rule of deadlineRules) {
    const anchor = state[rule.anchor];
    if (anchor !== null) due[rule.deadline] = anchor + graces[rule.grace(state.obligationKind)];
  }
  return due;
}

/** The earliest deadline: when the sweep must look at the conversation next. */
export function stallDeadline(due: Deadlines): number | null {
  return (
    deadlineRules
      .map((rule) => due[rule.deadline])
      .filter((d): d is number => d !== null)
      .sort((a, b) => a - b)[0] ?? null
  );
}

/** What the sweep does with a conversation at `now`: flag a stall, or close it. */
export type Verdict =
  | { readonly outcome: 'stall'; readonly reason: StallReason; readonly since: number }
  | { readonly outcome: 'close'; readonly reason: CloseReason; readonly since: number };

/** The verdict at `now`, if any: the first rule in priority order whose deadline has passed. */
export function verdictAt(state: ConversationState, graces: Graces, now: number): Verdict | null {
  const due = deadlines(state, graces);
  for (const rule of deadlineRules) {
    const deadline = due[rule.deadline];
    if (deadline === null || now < deadline) continue;
    const since = state[rule.anchor] as number;
    return rule.outcome === 'stall'
      ? { outcome: 'stall', reason: rule.reason, since }
      : { outcome: 'close', reason: rule.reason, since };
  }
  return null;
}

/** The stall at `now`, if any (a conversation due to close is not stalled). */
export function stallAt(
  state: ConversationState,
  graces: Graces,
  now: number,
): { reason: StallReason; since: number } | null {
  const verdict = verdictAt(state, graces, now);
  return verdict?.outcome === 'stall' ? { reason: verdict.reason, since: verdict.since } : null;
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
