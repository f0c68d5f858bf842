/**
 * The send state machine, in one place. Pure: no IO, no clock, no randomness.
 *
 * - `SEND_STATUSES` is the only list of the statuses a `sender.sends` row can have (the migration's
 *   check constraint is tested against it, and so are the routes' and the repository's uses).
 * - `TRANSITIONS` is every legal transition: which command, from which statuses, with which event,
 *   to which status. The repository applies a transition as a conditional update derived from its
 *   row (`WHERE status IN (from) AND claim_token = token`), so changing a row here changes the SQL
 *   that applies it, and `send.unit.test.ts` names every cell of the status × command matrix it moves.
 * - `decide(state, command)` returns the event the command leads to, nothing (a check that passed),
 *   or `Refused` with the reason; `evolve` folds events into state. Facts that only the database can
 *   know at that moment (a lapsed lease, a paused campaign or kill switch, a suppression, the slot's
 *   holder) come in with the state or the command, and so do new claim tokens.
 * - `outcomeOf` turns a provider's verdict into an event, with the retry and backoff arithmetic.
 * - `recordedOf` says which transitions publish a SendRecorded, and `sendRecorded` builds it.
 */
import { uuidV5, type Decider, type SendRecorded } from '@outreach/contracts';

export const SEND_STATUSES = ['claimed', 'sending', 'sent', 'suppressed', 'failed', 'ambiguous', 'held'] as const;
export type SendStatus = (typeof SEND_STATUSES)[number];
/** A request without a row: not claimed yet, or never (another send holds its slot). */
export type Status = 'none' | SendStatus;

/** The lease as the database clock sees it: `none` when nobody works on the row or waits for a verdict. */
export type Lease = 'none' | 'running' | 'lapsed';

export interface SendState {
  readonly status: Status;
  /** The claim the row is held under: a command under any other token is refused (the fence). */
  readonly token: string | null;
  readonly lease: Lease;
  /** Provider calls made, counted at the fence. */
  readonly attempts: number;
}

export const initialState: SendState = { status: 'none', token: null, lease: 'none', attempts: 0 };

/** Another send that holds the request's slot: the same candidate, or the same address, at this campaign step. */
export interface SlotHolder {
  readonly sendId: string;
  readonly sameCandidate: boolean;
}

/**
 * What a provider call established (the port's `SendResult`, without its promise): `late` is
 * present when the provider may still answer, `lateWithinMs` how long that may take.
 */
export type ProviderVerdict =
  | { readonly kind: 'sent'; readonly providerMessageId: string }
  | {
      readonly kind: 'rejected';
      readonly reason: string;
      /**
       * Set when the server refused the recipient itself (a 5xx reply to RCPT TO), with the reply's
       * RFC 3463 enhanced code if it had one: the domain decides whether that is a hard bounce.
       */
      readonly recipient?: { readonly status: string | null };
    }
  | { readonly kind: 'not_sent'; readonly reason: string }
  | { readonly kind: 'unknown'; readonly reason: string; readonly late?: unknown; readonly lateWithinMs?: number };

/** What holds a send back: its campaign's pause, or the global kill switch (`sending_control`). */
export type Hold = 'campaign' | 'sending';

/** Facts about a send that only the database knows at the moment of a check or the fence. */
export interface SendFacts {
  /** The suppression list's reason for the address, if it is on it. */
  readonly suppression: string | null;
  /** The send's campaign is paused. */
  readonly paused: boolean;
  /** Sending as a whole is paused (the kill switch): no send of any campaign goes out. */
  readonly sendingPaused: boolean;
}

export interface OutcomePolicy {
  /** Provider calls after which a send the provider did not take fails instead of being retried. */
  readonly maxAttempts: number;
  /** The first retry's delay; each further one doubles it. */
  readonly retryBackoffMs: number;
  /** How long a late verdict is awaited when the provider does not say. */
  readonly leaseMs: number;
}

/**
 * What a delivery lookup (ADR 009) established about a send in flight, once its timing rule has
 * been applied: the provider holds it (`sent`); it has no copy although one would show by now
 * (`not_sent`); not yet decidable, ask again in `withinMs` (`pending`: not found too early, or the
 * lookup failed); or it cannot tell, and will not (`unknown`: no lookup, or it gave up).
 */
export type LeaseLookup =
  | { readonly kind: 'sent'; readonly providerMessageId: string }
  | { readonly kind: 'not_sent' }
  | { readonly kind: 'pending'; readonly withinMs: number; readonly reason: string }
  /** `reason`: why a lookup gave up (a code, `lookup unavailable: mailpit http 503`); none without a lookup. */
  | { readonly kind: 'unknown'; readonly reason?: string };

/** Commands that carry `token` act under that claim; `newToken` is the claim a command hands out. */
export type SendCommand =
  | { readonly type: 'Claim'; readonly newToken: string; readonly heldBy: SlotHolder | null }
  | { readonly type: 'RenewLease'; readonly token: string }
  | { readonly type: 'ReleaseClaim'; readonly token: string }
  /** Lease expiry before the fence: the provider was never called, so another worker may send. */
  | { readonly type: 'TakeOverClaim'; readonly newToken: string }
  /** Before a batch waits for rate tokens. */
  | ({ readonly type: 'Check'; readonly token: string } & SendFacts)
  /** The same facts again, read in the fence's own statement: a suppression or a pause written meanwhile holds. */
  | ({ readonly type: 'Fence'; readonly token: string } & SendFacts)
  | {
      readonly type: 'CheckExposure';
      readonly token: string;
      readonly experimentId: string;
      readonly variant: string;
      /** The variant the candidate was first sent in this experiment (this one, if it is the first). */
      readonly exposedVariant: string;
    }
  | {
      readonly type: 'RecordResult';
      readonly token: string;
      readonly result: ProviderVerdict;
      readonly policy: OutcomePolicy;
    }
  /** A late verdict that is itself still pending (`withinMs` > 0) or will not come (0). */
  | { readonly type: 'AwaitVerdict'; readonly token: string; readonly withinMs: number }
  /** Lease expiry during the provider call: the provider may hold the message. */
  | {
      readonly type: 'ExpireSendingLease';
      readonly token: string;
      readonly lookup: LeaseLookup;
      readonly policy: OutcomePolicy;
    }
  /**
   * Delivery evidence (ADR 009): a provider's or relay's own report, naming this send by an
   * identifier whose MAC verified, that the message went out. Carries no token: evidence is about
   * the message, whichever attempt sent it (they all carry the same Message-ID).
   */
  | {
      readonly type: 'SettleByEvidence';
      readonly source: EvidenceSource;
      readonly providerMessageId: string | null;
      /**
       * The send's last attempt became ambiguous: it may have handed the message over. A retry
       * waiting for its fence after an attempt the server refused before the body has nothing
       * evidence could be about (the repository also only offers evidence received after the last
       * attempt started).
       */
      readonly lastAttemptInDoubt: boolean;
    }
  /** The reconciler's (or the backfill's) delivery lookup for an ambiguous send. */
  | { readonly type: 'LookUp'; readonly token: string; readonly lookup: LeaseLookup; readonly policy: OutcomePolicy }
  /** A held send is released only when nothing holds it any more (`paused`: its campaign's). */
  | { readonly type: 'Resume'; readonly newToken: string; readonly paused: boolean; readonly sendingPaused: boolean }
  | { readonly type: 'Resolve'; readonly resolution: 'sent' }
  | {
      readonly type: 'Resolve';
      readonly resolution: 'retry';
      readonly newToken: string;
      /**
       * How much longer the provider's delivery evidence may still arrive for the last attempt
       * (DELIVERY_EVIDENCE_WINDOW_MS after it started, on the database clock); 0 or absent: none due.
       */
      readonly evidenceDueMs?: number;
    };

export type CommandType = SendCommand['type'];

export type Refusal =
  /** The command does not apply to a send in this status. */
  | 'illegal'
  /** Another claim holds the send: the worker that asks lost it (taken over, or resolved elsewhere). */
  | 'claim_lost'
  /** The lease still runs: its holder may be working on it. */
  | 'lease_running'
  /** The provider may still answer for an ambiguous send: a retry could mail a second copy. */
  | 'verdict_pending'
  /** Evidence for a send never attempted: no message of it can have gone out, so it proves nothing. */
  | 'never_attempted'
  /** Evidence for a retry whose last attempt certainly handed nothing over: it proves nothing. */
  | 'not_in_doubt'
  /** The provider's delivery evidence may still arrive: a retry now could mail a second copy. */
  | 'evidence_pending';

export interface Refused {
  readonly type: 'Refused';
  readonly command: CommandType;
  readonly why: Refusal;
}

/** The events that move a send along TRANSITIONS. */
export type TransitionEvent =
  | { readonly type: 'Claimed'; readonly token: string }
  | { readonly type: 'SkippedAsDuplicate'; readonly duplicateOf: string; readonly reason: string }
  | { readonly type: 'LeaseRenewed' }
  | { readonly type: 'ClaimReleased' }
  | { readonly type: 'ClaimTakenOver'; readonly token: string }
  | { readonly type: 'Suppressed'; readonly suppression: string }
  | { readonly type: 'Held'; readonly by: Hold }
  | { readonly type: 'Fenced' }
  | { readonly type: 'ExposureConflicted'; readonly exposedVariant: string; readonly reason: string }
  | { readonly type: 'Sent'; readonly providerMessageId: string }
  | { readonly type: 'SettledByEvidence'; readonly source: EvidenceSource; readonly providerMessageId: string | null }
  /** `suppress`: the suppression reason the address gets with it (a hard bounce), in the same transaction. */
  | { readonly type: 'Failed'; readonly reason: string; readonly suppress?: typeof HARD_BOUNCE_SUPPRESSION }
  /** `verdictWithinMs` > 0: a late verdict is awaited that long (the lease marks the wait). */
  | { readonly type: 'Ambiguous'; readonly reason: string; readonly verdictWithinMs: number }
  | { readonly type: 'RetryScheduled'; readonly reason: string; readonly retryInMs: number }
  | { readonly type: 'VerdictAwaited'; readonly withinMs: number }
  /** A lapsed `sending` lease the lookup cannot decide yet: the lease is pushed `withinMs`, so no sweep asks before. */
  | { readonly type: 'LookupDeferred'; readonly withinMs: number; readonly reason: string }
  | { readonly type: 'Resumed'; readonly token: string }
  | { readonly type: 'ResolvedAsSent' }
  | { readonly type: 'ResolvedForRetry'; readonly token: string };

export type EventType = TransitionEvent['type'];

/** Where delivery evidence comes from (domain/feedback: the sources that can name a send). */
export type EvidenceSource = 'ses' | 'sendgrid' | 'mailgun' | 'dsn';

export type SendEvent =
  | TransitionEvent
  /** The database clock passed the lease. Nothing decides it; it is what makes lease expiry legal. */
  | { readonly type: 'LeaseLapsed' }
  | Refused;

/** What `decide` returns: a transition's event, or why the command was refused. */
export type Decision = TransitionEvent | Refused;

/** A provider verdict's event: what `outcomeOf` returns. */
export type ResultEvent = Extract<TransitionEvent, { type: 'Sent' | 'Failed' | 'Ambiguous' | 'RetryScheduled' }>;

export interface Transition {
  readonly command: CommandType;
  readonly from: readonly Status[];
  readonly event: EventType;
  readonly to: Status;
}

const CLAIMED: readonly Status[] = ['claimed'];
const IN_FLIGHT: readonly Status[] = ['sending', 'ambiguous'];

// prettier-ignore
const TABLE: ReadonlyArray<readonly [CommandType, readonly Status[], EventType, Status]> = [
  // command              from            event                 to
  ['Claim',               ['none'],       'Claimed',            'claimed'],
  ['Claim',               ['none'],       'SkippedAsDuplicate', 'none'],
  ['RenewLease',          CLAIMED,        'LeaseRenewed',       'claimed'],
  ['ReleaseClaim',        CLAIMED,        'ClaimReleased',      'claimed'],
  ['TakeOverClaim',       CLAIMED,        'ClaimTakenOver',     'claimed'],
  ['Check',               CLAIMED,        'Suppressed',         'suppressed'],
  ['Check',               CLAIMED,        'Held',               'held'],
  ['Fence',               CLAIMED,        'Fenced',             'sending'],
  ['Fence',               CLAIMED,        'Suppressed',         'suppressed'],
  ['Fence',               CLAIMED,        'Held',               'held'],
  ['CheckExposure',       ['sending'],    'ExposureConflicted', 'failed'],
  // A known verdict also lands on a send the reconciler made ambiguous meanwhile, under the same token.
  ['RecordResult',        IN_FLIGHT,      'Sent',               'sent'],
  ['RecordResult',        IN_FLIGHT,      'Failed',             'failed'],
  ['RecordResult',        IN_FLIGHT,      'Ambiguous',          'ambiguous'],
  ['RecordResult',        IN_FLIGHT,      'RetryScheduled',     'claimed'],
  ['AwaitVerdict',        ['ambiguous'],  'VerdictAwaited',     'ambiguous'],
  ['ExpireSendingLease',  ['sending'],    'Sent',               'sent'],
  ['ExpireSendingLease',  ['sending'],    'RetryScheduled',     'claimed'],
  ['ExpireSendingLease',  ['sending'],    'Failed',             'failed'],
  ['ExpireSendingLease',  ['sending'],    'LookupDeferred',     'sending'],
  ['ExpireSendingLease',  ['sending'],    'Ambiguous',          'ambiguous'],
  // An ambiguous send the provider can be asked about (ADR 009): found, or certainly not there.
  ['LookUp',              ['ambiguous'],  'Sent',               'sent'],
  ['LookUp',              ['ambiguous'],  'RetryScheduled',     'claimed'],
  ['LookUp',              ['ambiguous'],  'Failed',             'failed'],
  ['LookUp',              ['ambiguous'],  'VerdictAwaited',     'ambiguous'],
  // Delivery evidence settles a send in doubt: a retry waiting for its fence (an operator's, or one
  // a lookup scheduled) or held by a pause, a lapsed attempt, an ambiguous one. A send whose worker
  // is still in the provider call keeps its evidence until it records (lease_running; the
  // repository applies it when the send becomes ambiguous).
  ['SettleByEvidence',    ['claimed', 'sending', 'ambiguous', 'held'], 'SettledByEvidence', 'sent'],
  ['Resume',              ['held'],       'Resumed',            'claimed'],
  ['Resolve',             ['ambiguous'],  'ResolvedAsSent',     'sent'],
  ['Resolve',             ['ambiguous'],  'ResolvedForRetry',   'claimed'],
];

export const TRANSITIONS: readonly Transition[] = TABLE.map(([command, from, event, to]) => ({
  command,
  from,
  event,
  to,
}));

/** The transition `command` makes with `event`: the statuses it applies in, and the one it leads to. */
export function transition(command: CommandType, event: EventType): Transition {
  const found = TRANSITIONS.find((t) => t.command === command && t.event === event);
  if (!found) throw new Error(`no transition ${command} → ${event}`);
  return found;
}

/** Whether `command` applies to a send in `status` (with any of its events). */
export function appliesIn(command: CommandType, status: Status): boolean {
  return TRANSITIONS.some((t) => t.command === command && t.from.includes(status));
}

/** The statuses `command` applies in (with any of its events), without `none`. */
export function statusesFor(command: CommandType): readonly SendStatus[] {
  const from = new Set(TRANSITIONS.filter((t) => t.command === command).flatMap((t) => t.from));
  return SEND_STATUSES.filter((s) => from.has(s));
}

/** The facts a gate rule reads: the suppression list's reason, the campaign's pause, the kill switch. */
export type GateFact = keyof SendFacts;
/** The facts that hold a send (rather than end it). */
export type HoldFact = Exclude<GateFact, 'suppression'>;

/** One rule of the gate: when its fact holds, the send is stopped with this event. */
export type GateRule =
  | { readonly fact: 'suppression'; readonly stop: 'Suppressed' }
  | { readonly fact: HoldFact; readonly stop: 'Held'; readonly by: Hold };

/**
 * The rule of the checks and of the fence, as a table in priority order: the first rule whose fact
 * holds stops the send. A suppressed address is never mailed, paused or not; a held send waits (its
 * campaign's pause first: it outlasts the switch); when no fact holds nothing stops it. `gateOf`
 * and `holdOf` read it, and the set-based SQL of the fence and of a resume is generated from it
 * (adapters/gate-sql.ts).
 */
// prettier-ignore
export const GATE: readonly GateRule[] = [
  // fact               stop           by
  { fact: 'suppression',   stop: 'Suppressed' },
  { fact: 'paused',        stop: 'Held',       by: 'campaign' },
  { fact: 'sendingPaused', stop: 'Held',       by: 'sending' },
];

/** Whether a gate fact holds: a suppression reason is there, a pause is on. */
export function factHolds(facts: Partial<SendFacts>, fact: GateFact): boolean {
  const value = facts[fact];
  return typeof value === 'boolean' ? value : value !== null && value !== undefined;
}

/** What holds a send: the first Held rule of GATE whose fact holds; null when nothing does. */
export function holdOf(facts: Pick<SendFacts, HoldFact>): Hold | null {
  for (const rule of GATE) if (rule.stop === 'Held' && factHolds(facts, rule.fact)) return rule.by;
  return null;
}

/**
 * The gate (GATE) on `facts`: Suppressed or Held by the first rule whose fact holds, or null when
 * nothing stops the send. The fence applies it again because a suppression or a pause may come
 * while a claim waits for its rate token.
 */
export function gateOf(facts: SendFacts): Extract<TransitionEvent, { type: 'Suppressed' | 'Held' }> | null {
  const rule = GATE.find((r) => factHolds(facts, r.fact));
  if (rule === undefined) return null;
  return rule.stop === 'Suppressed'
    ? { type: 'Suppressed', suppression: facts.suppression as string }
    : { type: 'Held', by: rule.by };
}

/** The suppression-list reason a hard bounce writes (the list's own category for bounces). */
export const HARD_BOUNCE_SUPPRESSION = 'bounce' as const;

/**
 * Whether a provider's permanent refusal is a hard bounce of the address: the server refused the
 * recipient itself (a 5xx to RCPT TO), with no enhanced code (a bare 550 is "mailbox unavailable")
 * or one about the destination address or mailbox (RFC 3463: X.1.X except the sender's own 5.1.7
 * and 5.1.8, and 5.2.1 mailbox disabled). A policy or system refusal (5.7.1 relaying denied, 5.3.4
 * too big, 5.2.2 mailbox full) says nothing lasting about the address: suppressing on it would let
 * one misconfigured relay empty the list of every address it refused.
 */
export function isHardBounce(result: ProviderVerdict): boolean {
  if (result.kind !== 'rejected' || result.recipient === undefined) return false;
  const { status } = result.recipient;
  if (status === null) return true;
  const address = /^5\.1\.(\d{1,3})$/.exec(status);
  if (address) return address[1] !== '7' && address[1] !== '8';
  return status === '5.2.1';
}

/** The delay before retry number `attempts` (1-based): RETRY_BACKOFF_MS, doubled each time. */
export function backoffMs(attempts: number, policy: OutcomePolicy): number {
  return policy.retryBackoffMs * 2 ** (attempts - 1);
}

/** How long a late verdict is awaited after `result`: 0 when none can come. */
export function verdictWaitMs(result: ProviderVerdict, policy: OutcomePolicy): number {
  if (result.kind !== 'unknown' || result.late === undefined) return 0;
  return result.lateWithinMs ?? policy.leaseMs;
}

/**
 * A provider's verdict on a send that has had `attempts` provider calls: accepted is `sent`,
 * refused for good is `failed`, unknown is `ambiguous` (never retried automatically), and
 * certainly not taken is retried with backoff until MAX_ATTEMPTS, then `failed`.
 */
export function outcomeOf(result: ProviderVerdict, attempts: number, policy: OutcomePolicy): ResultEvent {
  switch (result.kind) {
    case 'sent':
      return { type: 'Sent', providerMessageId: result.providerMessageId };
    case 'rejected':
      return {
        type: 'Failed',
        reason: `provider rejected: ${result.reason}`,
        ...(isHardBounce(result) ? { suppress: HARD_BOUNCE_SUPPRESSION } : {}),
      };
    case 'unknown':
      return { type: 'Ambiguous', reason: result.reason, verdictWithinMs: verdictWaitMs(result, policy) };
    case 'not_sent':
      return attempts >= policy.maxAttempts
        ? { type: 'Failed', reason: `gave up after ${attempts} attempts: ${result.reason}` }
        : { type: 'RetryScheduled', reason: result.reason, retryInMs: backoffMs(attempts, policy) };
    default: {
      const exhaustive: never = result;
      throw new Error(`unknown provider verdict ${JSON.stringify(exhaustive)}`);
    }
  }
}

/**
 * A send the provider certainly does not hold (its lookup said so, late enough to be sure): as a
 * `not_sent` verdict, retried with backoff until MAX_ATTEMPTS, so a provider that cuts every
 * attempt mid-body does not loop forever.
 */
function notAtProvider(reason: string, state: SendState, policy: OutcomePolicy): ResultEvent {
  return outcomeOf({ kind: 'not_sent', reason }, state.attempts, policy);
}

function choose(state: SendState, command: SendCommand): TransitionEvent | Refused | null {
  const refused = (why: Refusal): Refused => ({ type: 'Refused', command: command.type, why });
  switch (command.type) {
    case 'Claim': {
      const holder = command.heldBy;
      if (holder === null) return { type: 'Claimed', token: command.newToken };
      const by = holder.sameCandidate ? 'candidate' : 'address';
      return {
        type: 'SkippedAsDuplicate',
        duplicateOf: holder.sendId,
        reason: `${by} already has send ${holder.sendId} for this campaign step`,
      };
    }
    case 'RenewLease':
      return { type: 'LeaseRenewed' };
    case 'ReleaseClaim':
      return { type: 'ClaimReleased' };
    case 'TakeOverClaim':
      return state.lease === 'lapsed' ? { type: 'ClaimTakenOver', token: command.newToken } : refused('lease_running');
    case 'Check':
      return gateOf(command);
    case 'Fence':
      return gateOf(command) ?? { type: 'Fenced' };
    case 'CheckExposure':
      if (command.exposedVariant === command.variant) return null;
      return {
        type: 'ExposureConflicted',
        exposedVariant: command.exposedVariant,
        reason: `exposure_conflict: candidate was already sent variant ${command.exposedVariant} of experiment ${command.experimentId}`,
      };
    case 'RecordResult':
      return outcomeOf(command.result, state.attempts, command.policy);
    case 'AwaitVerdict':
      return { type: 'VerdictAwaited', withinMs: command.withinMs };
    case 'ExpireSendingLease':
      if (state.lease !== 'lapsed') return refused('lease_running');
      switch (command.lookup.kind) {
        case 'sent':
          return { type: 'Sent', providerMessageId: command.lookup.providerMessageId };
        case 'not_sent':
          return notAtProvider('lease expired; the provider has no record of it', state, command.policy);
        case 'pending':
          // Still `sending`, with a lease until the lookup may decide: no event is published meanwhile.
          return { type: 'LookupDeferred', withinMs: command.lookup.withinMs, reason: command.lookup.reason };
        case 'unknown':
          // Without a lookup (SMTP), or after it gave up: whether it went out is for an operator to find.
          return {
            type: 'Ambiguous',
            reason: `lease expired while sending: the provider may or may not have accepted it${
              command.lookup.reason === undefined ? '' : ` (${command.lookup.reason})`
            }`,
            verdictWithinMs: 0,
          };
        default: {
          const exhaustive: never = command.lookup;
          throw new Error(`unknown lookup ${JSON.stringify(exhaustive)}`);
        }
      }
    case 'SettleByEvidence':
      if (state.attempts === 0) return refused('never_attempted');
      if ((state.status === 'claimed' || state.status === 'held') && !command.lastAttemptInDoubt)
        return refused('not_in_doubt');
      if (state.status === 'sending' && state.lease === 'running') return refused('lease_running');
      return { type: 'SettledByEvidence', source: command.source, providerMessageId: command.providerMessageId };
    case 'LookUp':
      // Found is found, whatever else is awaited (as an operator's "sent" is).
      if (command.lookup.kind === 'sent') return { type: 'Sent', providerMessageId: command.lookup.providerMessageId };
      // A late reply may still come: only it, or a lookup once the wait is over, decides.
      if (state.lease === 'running') return refused('verdict_pending');
      switch (command.lookup.kind) {
        case 'not_sent':
          return notAtProvider(
            'ambiguous; the provider has no record of it after the settle time',
            state,
            command.policy,
          );
        case 'pending':
          // The lookup's answer is the verdict awaited: an operator's retry waits for it too.
          return { type: 'VerdictAwaited', withinMs: command.lookup.withinMs };
        case 'unknown':
          return null;
        default: {
          const exhaustive: never = command.lookup;
          throw new Error(`unknown lookup ${JSON.stringify(exhaustive)}`);
        }
      }
    case 'Resume':
      // Still held by the other pause: it stays held, and that pause's release sends it.
      return holdOf(command) === null ? { type: 'Resumed', token: command.newToken } : null;
    case 'Resolve':
      if (command.resolution === 'sent') return { type: 'ResolvedAsSent' };
      if (state.lease === 'running') return refused('verdict_pending');
      if ((command.evidenceDueMs ?? 0) > 0) return refused('evidence_pending');
      return { type: 'ResolvedForRetry', token: command.newToken };
    default: {
      const exhaustive: never = command;
      throw new Error(`unknown send command ${JSON.stringify(exhaustive)}`);
    }
  }
}

/**
 * The event `command` leads to from `state`: one event, none (a check that found nothing), or a
 * `Refused` saying why the command does not apply. Only what TRANSITIONS allows is ever returned.
 */
export function decide(state: SendState, command: SendCommand): readonly Decision[] {
  if (!appliesIn(command.type, state.status)) return [{ type: 'Refused', command: command.type, why: 'illegal' }];
  if ('token' in command && command.token !== state.token)
    return [{ type: 'Refused', command: command.type, why: 'claim_lost' }];
  const event = choose(state, command);
  if (event === null) return [];
  if (event.type !== 'Refused' && !transition(command.type, event.type).from.includes(state.status))
    throw new Error(`${command.type} chose ${event.type}, which TRANSITIONS does not allow from ${state.status}`);
  return [event];
}

function leaseFor(ms: number, otherwise: Lease): Lease {
  return ms > 0 ? 'running' : otherwise;
}

/** The state after `event`: its status is TRANSITIONS' `to`; the lease and claim follow the event. */
export function evolve(state: SendState, event: SendEvent): SendState {
  switch (event.type) {
    case 'Refused':
    case 'SkippedAsDuplicate':
      return state;
    case 'LeaseLapsed':
      return state.lease === 'running' ? { ...state, lease: 'lapsed' } : state;
    default:
  }
  const status = TRANSITIONS.find((t) => t.event === event.type)?.to ?? state.status;
  switch (event.type) {
    case 'Claimed':
      return { status, token: event.token, lease: 'running', attempts: 0 };
    case 'ClaimTakenOver':
      return { ...state, status, token: event.token, lease: 'running' };
    case 'LeaseRenewed':
      return { ...state, status, lease: 'running' };
    case 'ClaimReleased':
      return { ...state, status, lease: 'lapsed' };
    case 'Fenced':
      return { ...state, status, lease: 'running', attempts: state.attempts + 1 };
    case 'Suppressed':
    case 'Held':
    case 'ExposureConflicted':
    case 'Sent':
    case 'SettledByEvidence':
    case 'Failed':
      return { ...state, status, lease: 'none' };
    case 'Ambiguous':
      return { ...state, status, lease: leaseFor(event.verdictWithinMs, 'none') };
    case 'VerdictAwaited':
      return { ...state, status, lease: leaseFor(event.withinMs, 'none') };
    case 'LookupDeferred':
      return { ...state, status, lease: leaseFor(event.withinMs, 'lapsed') };
    case 'RetryScheduled':
      return { ...state, status, lease: leaseFor(event.retryInMs, 'lapsed') };
    case 'Resumed':
    case 'ResolvedForRetry':
      // Handed back as a lapsed claim: the reconciler's next sweep sends it, once.
      return { ...state, status, token: event.token, lease: 'lapsed' };
    case 'ResolvedAsSent':
      return { ...state, status };
    default: {
      const exhaustive: never = event;
      throw new Error(`unknown send event ${JSON.stringify(exhaustive)}`);
    }
  }
}

/** The reason a send settled by evidence carries, on its row and its SendRecorded. */
export function settledReason(source: EvidenceSource): string {
  return `settled by delivery evidence (${source})`;
}

function heldReason(by: Hold): string {
  return by === 'campaign' ? 'campaign is paused' : 'sending is paused';
}

/**
 * The row's `reason` after `event`; `undefined` where the transition leaves it as it was. (For a
 * duplicate, the reason of its `skipped_sends` row.)
 */
export function reasonOf(event: TransitionEvent): string | null | undefined {
  switch (event.type) {
    case 'Suppressed':
      return 'address is on the suppression list';
    case 'Held':
      return heldReason(event.by);
    case 'SkippedAsDuplicate':
    case 'ExposureConflicted':
    case 'Failed':
    case 'Ambiguous':
    case 'RetryScheduled':
      return event.reason;
    case 'Claimed':
    case 'Sent':
    case 'Resumed':
      return null;
    case 'ResolvedAsSent':
      return 'resolved by an operator: sent';
    case 'SettledByEvidence':
      return settledReason(event.source);
    case 'ResolvedForRetry':
      return 'resolved by an operator: retry';
    case 'LeaseRenewed':
    case 'ClaimReleased':
    case 'ClaimTakenOver':
    case 'Fenced':
    case 'VerdictAwaited':
    case 'LookupDeferred':
      return undefined;
    default: {
      const exhaustive: never = event;
      throw new Error(`unknown send event ${JSON.stringify(exhaustive)}`);
    }
  }
}

/** Every accepted request ends in exactly one of these (see the service README). */
export type Outcome = SendRecorded['outcome'];

export interface Recorded {
  readonly outcome: Outcome;
  readonly reason: string | null;
  readonly providerMessageId: string | null;
}

/** The SendRecorded a transition publishes (in the same transaction, through the outbox), if any. */
export function recordedOf(event: TransitionEvent): Recorded | null {
  const recorded = (outcome: Outcome, reason: string | null, providerMessageId: string | null = null) => ({
    outcome,
    reason,
    providerMessageId,
  });
  switch (event.type) {
    case 'SkippedAsDuplicate':
      return recorded('skipped_duplicate', event.reason);
    case 'Suppressed':
      return recorded('suppressed', `suppressed (${event.suppression})`);
    case 'Held':
      return recorded('held', heldReason(event.by));
    case 'ExposureConflicted':
    case 'Failed':
      return recorded('failed', event.reason);
    case 'Ambiguous':
      return recorded('ambiguous', event.reason);
    case 'Sent':
      return recorded('sent', null, event.providerMessageId);
    case 'ResolvedAsSent':
      return recorded('sent', 'resolved by an operator');
    case 'SettledByEvidence':
      return recorded('sent', settledReason(event.source), event.providerMessageId);
    case 'Claimed':
    case 'LeaseRenewed':
    case 'ClaimReleased':
    case 'ClaimTakenOver':
    case 'Fenced':
    case 'RetryScheduled':
    case 'VerdictAwaited':
    case 'LookupDeferred':
    case 'Resumed':
    case 'ResolvedForRetry':
      return null;
    default: {
      const exhaustive: never = event;
      throw new Error(`unknown send event ${JSON.stringify(exhaustive)}`);
    }
  }
}

export interface RecordedSend {
  readonly sendId: string;
  readonly campaignId: string;
  readonly candidateKey: string;
  readonly emailHash: string;
  /** The key emailHash was made with; null for rows recorded before keyed hashes (unsalted SHA-256). */
  readonly emailHashKeyId: string | null;
  readonly step: string;
  readonly experimentId: string | null;
  readonly variant: string | null;
  readonly correlationId: string;
  readonly causationId: string | null;
  /** The conversation the request named (canonical), or null: old rows, backfill, none given. */
  readonly conversationId: string | null;
  /** The request the send was made for (SendRequested.requestId; a backfilled row: `backfill:<import>:<line>`). */
  readonly requestId: string;
}

/**
 * The SendRecorded for one outcome of one send. Its id is derived from (sendId, outcome, attempt
 * marker), so recording the same outcome twice yields the same event, which the outbox keeps once.
 */
export function sendRecorded(
  send: RecordedSend,
  outcome: Outcome,
  details: {
    readonly recordedAt: number;
    readonly reason?: string | null;
    readonly providerMessageId?: string | null;
    readonly generation?: number;
  },
): SendRecorded {
  return {
    type: 'SendRecorded',
    eventId: uuidV5('send-recorded', send.sendId, outcome, String(details.generation ?? 0)),
    occurredAt: details.recordedAt,
    producer: 'sender',
    correlationId: send.correlationId,
    causationId: send.causationId,
    sendId: send.sendId,
    campaignId: send.campaignId,
    candidateKey: send.candidateKey,
    emailHash: send.emailHash,
    emailHashKeyId: send.emailHashKeyId,
    step: send.step,
    experimentId: send.experimentId,
    variant: send.variant,
    outcome,
    reason: details.reason ?? null,
    providerMessageId: details.providerMessageId ?? null,
    recordedAt: details.recordedAt,
    conversationId: send.conversationId,
    // The publisher's join key: an outcome names its request (SendRecorded v4).
    requestId: send.requestId,
  };
}

/** The send decider, for the command seam (runCommands / decideAll from '@outreach/shared'). */
export const sendDecider: Decider<SendState, SendCommand, Decision> = { initialState, decide, evolve };
