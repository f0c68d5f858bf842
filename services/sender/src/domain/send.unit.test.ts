/**
 * The send state machine, given/when/then. The matrix below is the transition table in this test's
 * own words: every command in every status, legal or refused. Changing a transition in send.ts
 * fails the cells it moves, by name; the repository's SQL follows the table (its int tests, and
 * test/schema.int.test.ts for the migration's constraint and indexes, show what that changes).
 */
import { deciderSpec } from '@outreach/testkit';
import { describe, expect, it } from 'vitest';
import {
  decide,
  evolve,
  GATE,
  gateOf,
  holdOf,
  initialState,
  outcomeOf,
  recordedOf,
  SEND_STATUSES,
  sendDecider,
  sendRecorded,
  statusesFor,
  transition,
  TRANSITIONS,
  type EventType,
  type Outcome,
  type SendCommand,
  type SendEvent,
  type SendFacts,
  type SendState,
  type Status,
  type TransitionEvent,
} from './send.js';

const spec = deciderSpec<SendState, SendCommand, SendEvent>({ initialState, evolve, decide });

const A = 'token-a';
const B = 'token-b';
const OTHER = '6f9e3c1e-4b2a-5f0e-9d7c-5a3b1e0f2d4c';
const policy = { maxAttempts: 3, retryBackoffMs: 100, leaseMs: 60_000 };
/** A policy under which the one provider call a send in REACH has made was its last. */
const lastAttempt = { ...policy, maxAttempts: 1 };
const notYet = { kind: 'pending', withinMs: 5_000, reason: 'not found yet; the provider may still show it' } as const;

/** Nothing stops a send: no suppression, its campaign and sending both running. */
const CLEAR = { suppression: null, paused: false, sendingPaused: false } as const;

const claimed: SendEvent = { type: 'Claimed', token: A };
const fenced: SendEvent = { type: 'Fenced' };
const lapsed: SendEvent = { type: 'LeaseLapsed' };

/** A history that reaches each status, under claim A, with its lease lapsed (so no lease guard refuses). */
const REACH: Record<Status, readonly SendEvent[]> = {
  none: [],
  // An attempted send waiting for its retry: what delivery evidence may settle (a fresh claim has none).
  claimed: [claimed, fenced, { type: 'RetryScheduled', reason: 'smtp 421', retryInMs: 0 }],
  sending: [claimed, fenced, lapsed],
  sent: [claimed, fenced, { type: 'Sent', providerMessageId: 'p-1' }],
  suppressed: [claimed, { type: 'Suppressed', suppression: 'unsubscribe' }],
  failed: [claimed, fenced, { type: 'Failed', reason: 'provider rejected: smtp 550' }],
  ambiguous: [claimed, fenced, { type: 'Ambiguous', reason: 'smtp no reply', verdictWithinMs: 0 }],
  // A retry of an attempted send, held by its campaign's pause.
  held: [
    claimed,
    fenced,
    { type: 'RetryScheduled', reason: 'smtp 421', retryInMs: 0 },
    { type: 'Held', by: 'campaign' },
  ],
};

const COMMANDS = {
  'Claim (slot free)': { type: 'Claim', newToken: B, heldBy: null },
  'Claim (slot taken)': { type: 'Claim', newToken: B, heldBy: { sendId: OTHER, sameCandidate: true } },
  RenewLease: { type: 'RenewLease', token: A },
  ReleaseClaim: { type: 'ReleaseClaim', token: A },
  TakeOverClaim: { type: 'TakeOverClaim', newToken: B },
  'Check (suppressed)': { type: 'Check', token: A, ...CLEAR, suppression: 'bounce' },
  'Check (paused)': { type: 'Check', token: A, ...CLEAR, paused: true },
  'Check (sending paused)': { type: 'Check', token: A, ...CLEAR, sendingPaused: true },
  'Check (clear)': { type: 'Check', token: A, ...CLEAR },
  'Fence (open)': { type: 'Fence', token: A, ...CLEAR },
  'Fence (suppressed)': { type: 'Fence', token: A, ...CLEAR, suppression: 'bounce' },
  'Fence (paused)': { type: 'Fence', token: A, ...CLEAR, paused: true },
  'Fence (sending paused)': { type: 'Fence', token: A, ...CLEAR, sendingPaused: true },
  'CheckExposure (another variant)': {
    type: 'CheckExposure',
    token: A,
    experimentId: 'exp',
    variant: 'b',
    exposedVariant: 'a',
  },
  'CheckExposure (same variant)': {
    type: 'CheckExposure',
    token: A,
    experimentId: 'exp',
    variant: 'a',
    exposedVariant: 'a',
  },
  'RecordResult (sent)': { type: 'RecordResult', token: A, result: { kind: 'sent', providerMessageId: 'p' }, policy },
  'RecordResult (rejected)': { type: 'RecordResult', token: A, result: { kind: 'rejected', reason: 'r' }, policy },
  'RecordResult (not_sent)': { type: 'RecordResult', token: A, result: { kind: 'not_sent', reason: 'r' }, policy },
  'RecordResult (unknown)': { type: 'RecordResult', token: A, result: { kind: 'unknown', reason: 'r' }, policy },
  AwaitVerdict: { type: 'AwaitVerdict', token: A, withinMs: 1_000 },
  'ExpireSendingLease (provider has it)': {
    type: 'ExpireSendingLease',
    token: A,
    lookup: { kind: 'sent', providerMessageId: 'p' },
    policy,
  },
  'ExpireSendingLease (provider has not)': {
    type: 'ExpireSendingLease',
    token: A,
    lookup: { kind: 'not_sent' },
    policy,
  },
  'ExpireSendingLease (provider has not, attempts used up)': {
    type: 'ExpireSendingLease',
    token: A,
    lookup: { kind: 'not_sent' },
    policy: lastAttempt,
  },
  'ExpireSendingLease (not found yet)': { type: 'ExpireSendingLease', token: A, lookup: notYet, policy },
  'ExpireSendingLease (cannot tell)': { type: 'ExpireSendingLease', token: A, lookup: { kind: 'unknown' }, policy },
  'LookUp (provider has it)': { type: 'LookUp', token: A, lookup: { kind: 'sent', providerMessageId: 'p' }, policy },
  'LookUp (provider has not)': { type: 'LookUp', token: A, lookup: { kind: 'not_sent' }, policy },
  'LookUp (provider has not, attempts used up)': {
    type: 'LookUp',
    token: A,
    lookup: { kind: 'not_sent' },
    policy: lastAttempt,
  },
  'LookUp (not found yet)': { type: 'LookUp', token: A, lookup: notYet, policy },
  'LookUp (cannot tell)': { type: 'LookUp', token: A, lookup: { kind: 'unknown' }, policy },
  Resume: { type: 'Resume', newToken: B, paused: false, sendingPaused: false },
  'Resume (still paused)': { type: 'Resume', newToken: B, paused: false, sendingPaused: true },
  'Resolve (sent)': { type: 'Resolve', resolution: 'sent' },
  'Resolve (retry)': { type: 'Resolve', resolution: 'retry', newToken: B },
  SettleByEvidence: { type: 'SettleByEvidence', source: 'ses', providerMessageId: 'ses-1', lastAttemptInDoubt: true },
} satisfies Record<string, SendCommand>;

type Cell = readonly [EventType, Status] | 'no change';

/** Where each command applies, with the event and the status it leads to; every other cell is refused. */
// prettier-ignore
const MATRIX: Record<keyof typeof COMMANDS, Partial<Record<Status, Cell>>> = {
  'Claim (slot free)':                     { none: ['Claimed', 'claimed'] },
  'Claim (slot taken)':                    { none: ['SkippedAsDuplicate', 'none'] },
  RenewLease:                              { claimed: ['LeaseRenewed', 'claimed'] },
  ReleaseClaim:                            { claimed: ['ClaimReleased', 'claimed'] },
  TakeOverClaim:                           { claimed: ['ClaimTakenOver', 'claimed'] },
  'Check (suppressed)':                    { claimed: ['Suppressed', 'suppressed'] },
  'Check (paused)':                        { claimed: ['Held', 'held'] },
  'Check (sending paused)':                { claimed: ['Held', 'held'] },
  'Check (clear)':                         { claimed: 'no change' },
  'Fence (open)':                          { claimed: ['Fenced', 'sending'] },
  'Fence (suppressed)':                    { claimed: ['Suppressed', 'suppressed'] },
  'Fence (paused)':                        { claimed: ['Held', 'held'] },
  'Fence (sending paused)':                { claimed: ['Held', 'held'] },
  'CheckExposure (another variant)':       { sending: ['ExposureConflicted', 'failed'] },
  'CheckExposure (same variant)':          { sending: 'no change' },
  'RecordResult (sent)':                   { sending: ['Sent', 'sent'],                ambiguous: ['Sent', 'sent'] },
  'RecordResult (rejected)':               { sending: ['Failed', 'failed'],            ambiguous: ['Failed', 'failed'] },
  'RecordResult (not_sent)':               { sending: ['RetryScheduled', 'claimed'],   ambiguous: ['RetryScheduled', 'claimed'] },
  'RecordResult (unknown)':                { sending: ['Ambiguous', 'ambiguous'],      ambiguous: ['Ambiguous', 'ambiguous'] },
  AwaitVerdict:                            { ambiguous: ['VerdictAwaited', 'ambiguous'] },
  'ExpireSendingLease (provider has it)':  { sending: ['Sent', 'sent'] },
  'ExpireSendingLease (provider has not)': { sending: ['RetryScheduled', 'claimed'] },
  'ExpireSendingLease (provider has not, attempts used up)': { sending: ['Failed', 'failed'] },
  'ExpireSendingLease (not found yet)':    { sending: ['LookupDeferred', 'sending'] },
  'ExpireSendingLease (cannot tell)':      { sending: ['Ambiguous', 'ambiguous'] },
  'LookUp (provider has it)':              { ambiguous: ['Sent', 'sent'] },
  'LookUp (provider has not)':             { ambiguous: ['RetryScheduled', 'claimed'] },
  'LookUp (provider has not, attempts used up)': { ambiguous: ['Failed', 'failed'] },
  'LookUp (not found yet)':                { ambiguous: ['VerdictAwaited', 'ambiguous'] },
  'LookUp (cannot tell)':                  { ambiguous: 'no change' },
  Resume:                                  { held: ['Resumed', 'claimed'] },
  'Resume (still paused)':                 { held: 'no change' },
  'Resolve (sent)':                        { ambiguous: ['ResolvedAsSent', 'sent'] },
  'Resolve (retry)':                       { ambiguous: ['ResolvedForRetry', 'claimed'] },
  SettleByEvidence:                        { claimed: ['SettledByEvidence', 'sent'], sending: ['SettledByEvidence', 'sent'], ambiguous: ['SettledByEvidence', 'sent'], held: ['SettledByEvidence', 'sent'] },
};

const STATUSES: readonly Status[] = ['none', ...SEND_STATUSES];
const NAMES = Object.keys(COMMANDS) as Array<keyof typeof COMMANDS>;

describe('the status × command matrix', () => {
  const cells = STATUSES.flatMap((status) => NAMES.map((name) => ({ status, name, cell: MATRIX[name][status] })));

  it.each(cells.filter((c) => c.cell === undefined))('$name in $status is refused as illegal', ({ status, name }) => {
    const command = COMMANDS[name];
    spec(REACH[status])
      .when(command)
      .then([{ type: 'Refused', command: command.type, why: 'illegal' }]);
  });

  it.each(cells.filter((c) => c.cell !== undefined))('$name in $status: $cell', ({ status, name, cell }) => {
    const given = spec(REACH[status]);
    const events = decide(given.state, COMMANDS[name]);
    if (cell === 'no change') {
      given.when(COMMANDS[name]).then([]);
      return;
    }
    const [type, to] = cell as readonly [EventType, Status];
    expect(events.map((e) => e.type)).toEqual([type]);
    expect(spec([...REACH[status], ...events]).state.status).toBe(to);
  });

  it('refuses 238 of the 280 cells: a command applies only where the table says', () => {
    expect(STATUSES).toHaveLength(8);
    expect(NAMES).toHaveLength(35);
    expect(cells.filter((c) => c.cell === undefined)).toHaveLength(238);
  });

  it('TRANSITIONS is exactly the legal cells of the matrix: no row untested, none missing', () => {
    const fromTable = TRANSITIONS.flatMap((t) => t.from.map((from) => `${t.command} ${from} ${t.event} ${t.to}`));
    const fromMatrix = cells.flatMap(({ status, name, cell }) =>
      cell === undefined || cell === 'no change' ? [] : [`${COMMANDS[name].type} ${status} ${cell[0]} ${cell[1]}`],
    );
    expect([...new Set(fromMatrix)].sort()).toEqual([...fromTable].sort());
    // An event leads to one status, whichever command makes it (evolve relies on it).
    for (const event of new Set(TRANSITIONS.map((t) => t.event)))
      expect(new Set(TRANSITIONS.filter((t) => t.event === event).map((t) => t.to)).size, event).toBe(1);
  });

  it('gives the repository the statuses each command applies in', () => {
    expect(statusesFor('Check')).toEqual(['claimed']);
    expect(statusesFor('RecordResult')).toEqual(['sending', 'ambiguous']);
    expect(statusesFor('ExpireSendingLease')).toEqual(['sending']);
    expect(statusesFor('LookUp')).toEqual(['ambiguous']);
    expect(statusesFor('Resume')).toEqual(['held']);
    expect(statusesFor('Claim')).toEqual([]);
    expect(() => transition('Fence', 'Sent')).toThrow(/no transition Fence → Sent/);
  });
});

describe('the gate (GATE): suppressed first, then the campaign pause, then the kill switch', () => {
  const everyFacts: SendFacts[] = [null, 'manual'].flatMap((suppression) =>
    [false, true].flatMap((paused) => [false, true].map((sendingPaused) => ({ suppression, paused, sendingPaused }))),
  );
  const claimed: SendEvent[] = [{ type: 'Claimed', token: 't' }];

  it('is a table in priority order', () => {
    expect(GATE.map((rule) => [rule.fact, rule.stop])).toEqual([
      ['suppression', 'Suppressed'],
      ['paused', 'Held'],
      ['sendingPaused', 'Held'],
    ]);
  });

  it.each(everyFacts)(
    'given a claim, when checked and fenced on %o, then the first rule that holds stops it',
    (facts) => {
      const expected =
        facts.suppression !== null
          ? [{ type: 'Suppressed', suppression: facts.suppression }]
          : facts.paused
            ? [{ type: 'Held', by: 'campaign' }]
            : facts.sendingPaused
              ? [{ type: 'Held', by: 'sending' }]
              : [];
      expect(gateOf(facts)).toEqual(expected[0] ?? null);
      expect(holdOf(facts)).toEqual(facts.paused ? 'campaign' : facts.sendingPaused ? 'sending' : null);
      spec(claimed)
        .when({ type: 'Check', token: 't', ...facts })
        .then(expected as SendEvent[]);
      spec(claimed)
        .when({ type: 'Fence', token: 't', ...facts })
        .then(expected.length > 0 ? (expected as SendEvent[]) : [{ type: 'Fenced' }]);
    },
  );

  it('is the decider the command seam runs', () => {
    expect(sendDecider).toEqual({ initialState, decide, evolve });
  });
});

describe('guards: the claim token, the lease, a pending verdict', () => {
  const underClaim = cellsWhere((command) => 'token' in command);

  it.each(underClaim)('$name in $status under a stale token is refused: the claim was lost', ({ status, name }) => {
    const command = { ...COMMANDS[name], token: 'stale' } as SendCommand;
    spec(REACH[status])
      .when(command)
      .then([{ type: 'Refused', command: command.type, why: 'claim_lost' }]);
  });

  it('a claim is taken over only once its lease lapsed on the database clock', () => {
    spec([claimed])
      .when(COMMANDS.TakeOverClaim)
      .then([{ type: 'Refused', command: 'TakeOverClaim', why: 'lease_running' }]);
    spec([claimed, lapsed])
      .when(COMMANDS.TakeOverClaim)
      .then([{ type: 'ClaimTakenOver', token: B }]);
  });

  it('a send in flight is not declared ambiguous while its lease runs', () => {
    spec([claimed, fenced])
      .when(COMMANDS['ExpireSendingLease (cannot tell)'])
      .then([{ type: 'Refused', command: 'ExpireSendingLease', why: 'lease_running' }]);
  });

  it('an operator cannot retry while a late verdict is awaited, but can resolve it as sent', () => {
    const awaiting = [claimed, fenced, { type: 'Ambiguous', reason: 'timeout', verdictWithinMs: 600_000 } as const];
    spec(awaiting)
      .when(COMMANDS['Resolve (retry)'])
      .then([{ type: 'Refused', command: 'Resolve', why: 'verdict_pending' }]);
    spec(awaiting)
      .when(COMMANDS['Resolve (sent)'])
      .then([{ type: 'ResolvedAsSent' }]);
    spec([...awaiting, lapsed])
      .when(COMMANDS['Resolve (retry)'])
      .then([{ type: 'ResolvedForRetry', token: B }]);
    // The provider gave up without a verdict: the wait ends, and a retry is the operator's to make.
    spec([...awaiting, { type: 'VerdictAwaited', withinMs: 0 }])
      .when(COMMANDS['Resolve (retry)'])
      .then([{ type: 'ResolvedForRetry', token: B }]);
  });
});

describe('stories', () => {
  it('a worker whose lease was taken over cannot fence; the new holder can (the fence)', () => {
    const takenOver = [claimed, lapsed, { type: 'ClaimTakenOver', token: B } as const];
    spec(takenOver)
      .when({ type: 'Fence', token: A, ...CLEAR })
      .then([{ type: 'Refused', command: 'Fence', why: 'claim_lost' }]);
    spec(takenOver)
      .when({ type: 'Fence', token: B, ...CLEAR })
      .then([{ type: 'Fenced' }]);
  });

  it('a late answer lands under the same claim after the timeout made the send ambiguous', () => {
    const ambiguous = [claimed, fenced, { type: 'Ambiguous', reason: 'timeout', verdictWithinMs: 600_000 } as const];
    spec(ambiguous)
      .when(COMMANDS['RecordResult (sent)'])
      .then([{ type: 'Sent', providerMessageId: 'p' }]);
    spec(ambiguous)
      .when({ type: 'RecordResult', token: B, result: { kind: 'sent', providerMessageId: 'p' }, policy })
      .then([{ type: 'Refused', command: 'RecordResult', why: 'claim_lost' }]);
  });

  it('a redelivered request whose send exists claims nothing', () => {
    spec([claimed, fenced])
      .when(COMMANDS['Claim (slot free)'])
      .then([{ type: 'Refused', command: 'Claim', why: 'illegal' }]);
  });

  it('a slot held by another send skips the request, saying whether by candidate or by address', () => {
    spec([])
      .when(COMMANDS['Claim (slot taken)'])
      .then([
        {
          type: 'SkippedAsDuplicate',
          duplicateOf: OTHER,
          reason: `candidate already has send ${OTHER} for this campaign step`,
        },
      ]);
    spec([])
      .when({ type: 'Claim', newToken: B, heldBy: { sendId: OTHER, sameCandidate: false } })
      .then([
        {
          type: 'SkippedAsDuplicate',
          duplicateOf: OTHER,
          reason: `address already has send ${OTHER} for this campaign step`,
        },
      ]);
  });

  it('a suppressed address is never mailed, paused campaign or not', () => {
    spec([claimed])
      .when({ type: 'Check', token: A, suppression: 'complaint', paused: true, sendingPaused: true })
      .then([{ type: 'Suppressed', suppression: 'complaint' }]);
  });

  it('a second variant of an experiment to an exposed candidate fails at the fence', () => {
    spec([claimed, fenced])
      .when(COMMANDS['CheckExposure (another variant)'])
      .then([
        {
          type: 'ExposureConflicted',
          exposedVariant: 'a',
          reason: 'exposure_conflict: candidate was already sent variant a of experiment exp',
        },
      ]);
  });

  it('a provider that certainly did not take it is retried with doubling backoff, then given up', () => {
    const notSent = {
      type: 'RecordResult',
      token: A,
      result: { kind: 'not_sent', reason: 'smtp 451' },
      policy,
    } as const;
    const retried = { type: 'RetryScheduled', reason: 'smtp 451', retryInMs: 100 } as const;
    spec([claimed, fenced]).when(notSent).then([retried]);
    spec([claimed, fenced, retried, lapsed, fenced])
      .when(notSent)
      .then([{ ...retried, retryInMs: 200 }]);
    spec([claimed, fenced, retried, fenced, retried, fenced])
      .when(notSent)
      .then([{ type: 'Failed', reason: 'gave up after 3 attempts: smtp 451' }]);
  });

  it('a lapsed sending lease: the lookup decides, and without one the send is ambiguous, never re-sent', () => {
    const sending = [claimed, fenced, lapsed];
    spec(sending)
      .when(COMMANDS['ExpireSendingLease (provider has it)'])
      .then([{ type: 'Sent', providerMessageId: 'p' }]);
    spec(sending)
      .when(COMMANDS['ExpireSendingLease (provider has not)'])
      .then([{ type: 'RetryScheduled', reason: 'lease expired; the provider has no record of it', retryInMs: 100 }]);
    spec(sending)
      .when(COMMANDS['ExpireSendingLease (cannot tell)'])
      .then([
        {
          type: 'Ambiguous',
          reason: 'lease expired while sending: the provider may or may not have accepted it',
          verdictWithinMs: 0,
        },
      ]);
  });

  it('a lookup that cannot decide yet keeps the send in flight, its lease pushed: no outcome is published', () => {
    const sending = [claimed, fenced, lapsed];
    spec(sending)
      .when(COMMANDS['ExpireSendingLease (not found yet)'])
      .then([{ type: 'LookupDeferred', withinMs: 5_000, reason: 'not found yet; the provider may still show it' }]);
    spec([...sending, { type: 'LookupDeferred', withinMs: 5_000, reason: 'r' }]).thenState({
      status: 'sending',
      token: A,
      lease: 'running',
      attempts: 1,
    });
    expect(recordedOf({ type: 'LookupDeferred', withinMs: 5_000, reason: 'r' })).toBeNull();
    // Asked again before the pushed lease lapsed: not yet.
    spec([...sending, { type: 'LookupDeferred', withinMs: 5_000, reason: 'r' }])
      .when(COMMANDS['ExpireSendingLease (provider has not)'])
      .then([{ type: 'Refused', command: 'ExpireSendingLease', why: 'lease_running' }]);
  });

  it('a lookup that gave up makes the send ambiguous, saying why', () => {
    spec([claimed, fenced, lapsed])
      .when({
        ...COMMANDS['ExpireSendingLease (cannot tell)'],
        lookup: { kind: 'unknown', reason: 'lookup unavailable: mailpit http 503' },
      })
      .then([
        {
          type: 'Ambiguous',
          reason:
            'lease expired while sending: the provider may or may not have accepted it (lookup unavailable: mailpit http 503)',
          verdictWithinMs: 0,
        },
      ]);
  });

  it('an ambiguous send the provider holds is sent; one it certainly lacks is retried, within MAX_ATTEMPTS', () => {
    const ambiguous = REACH.ambiguous;
    spec(ambiguous)
      .when(COMMANDS['LookUp (provider has it)'])
      .then([{ type: 'Sent', providerMessageId: 'p' }]);
    spec(ambiguous)
      .when(COMMANDS['LookUp (provider has not)'])
      .then([
        {
          type: 'RetryScheduled',
          reason: 'ambiguous; the provider has no record of it after the settle time',
          retryInMs: 100,
        },
      ]);
    spec(ambiguous)
      .when(COMMANDS['LookUp (provider has not, attempts used up)'])
      .then([
        {
          type: 'Failed',
          reason: 'gave up after 1 attempts: ambiguous; the provider has no record of it after the settle time',
        },
      ]);
    // Not found too early: the lookup's answer is awaited, and an operator's retry with it.
    const waiting = [...ambiguous, { type: 'VerdictAwaited', withinMs: 5_000 } as const];
    spec(ambiguous)
      .when(COMMANDS['LookUp (not found yet)'])
      .then([{ type: 'VerdictAwaited', withinMs: 5_000 }]);
    spec(waiting)
      .when(COMMANDS['Resolve (retry)'])
      .then([{ type: 'Refused', command: 'Resolve', why: 'verdict_pending' }]);
    const lapsedWait = spec([...waiting, lapsed]).state;
    expect(decide(lapsedWait, COMMANDS['LookUp (provider has not)']).map((e) => e.type)).toEqual(['RetryScheduled']);
    // A lookup that cannot tell changes nothing: the send stays the operator's.
    spec(ambiguous).when(COMMANDS['LookUp (cannot tell)']).then([]);
  });

  it('while a late reply is awaited, only a lookup that found the message decides', () => {
    const awaiting = [claimed, fenced, { type: 'Ambiguous', reason: 'timeout', verdictWithinMs: 600_000 } as const];
    for (const name of ['LookUp (provider has not)', 'LookUp (not found yet)', 'LookUp (cannot tell)'] as const)
      spec(awaiting)
        .when(COMMANDS[name])
        .then([{ type: 'Refused', command: 'LookUp', why: 'verdict_pending' }]);
    spec(awaiting)
      .when(COMMANDS['LookUp (provider has it)'])
      .then([{ type: 'Sent', providerMessageId: 'p' }]);
  });

  it('the kill switch holds a send at the checks and at the fence like a paused campaign, and says which pause holds it', () => {
    spec([claimed])
      .when(COMMANDS['Check (sending paused)'])
      .then([{ type: 'Held', by: 'sending' }]);
    spec([claimed])
      .when(COMMANDS['Fence (sending paused)'])
      .then([{ type: 'Held', by: 'sending' }]);
    // Both on: the campaign's pause is named, the one that outlasts the switch.
    spec([claimed])
      .when({ type: 'Fence', token: A, ...CLEAR, paused: true, sendingPaused: true })
      .then([{ type: 'Held', by: 'campaign' }]);
    expect(recordedOf({ type: 'Held', by: 'sending' })).toEqual({
      outcome: 'held',
      reason: 'sending is paused',
      providerMessageId: null,
    });
  });

  it('a held send is released only when neither its campaign nor sending is paused, each pause releasing its own', () => {
    const held = spec(REACH.held);
    held.when({ type: 'Resume', newToken: B, paused: false, sendingPaused: true }).then([]);
    held.when({ type: 'Resume', newToken: B, paused: true, sendingPaused: false }).then([]);
    held
      .when({ type: 'Resume', newToken: B, paused: false, sendingPaused: false })
      .then([{ type: 'Resumed', token: B }]);
    spec([claimed, { type: 'Held', by: 'sending' }, { type: 'Resumed', token: B }]).thenState({
      status: 'claimed',
      token: B,
      lease: 'lapsed',
      attempts: 0,
    });
  });

  it('the fence reads the suppression list again: an address suppressed while its claim waited for a token is not mailed', () => {
    spec([claimed]).when(COMMANDS['Check (clear)']).then([]);
    spec([claimed])
      .when({ type: 'Fence', token: A, ...CLEAR, suppression: 'unsubscribe', paused: true, sendingPaused: true })
      .then([{ type: 'Suppressed', suppression: 'unsubscribe' }]);
    spec([claimed, { type: 'Suppressed', suppression: 'unsubscribe' }]).thenState({
      status: 'suppressed',
      token: A,
      lease: 'none',
      attempts: 0,
    });
  });

  it('a permanent refusal of the recipient fails the send and suppresses the address (a hard bounce)', () => {
    const refused = (status: string | null) =>
      ({
        type: 'RecordResult',
        token: A,
        result: { kind: 'rejected', reason: 'smtp 550 permanent at RCPT TO', recipient: { status } },
        policy,
      }) as const;
    const bounced = {
      type: 'Failed',
      reason: 'provider rejected: smtp 550 permanent at RCPT TO',
      suppress: 'bounce',
    } as const;
    spec([claimed, fenced]).when(refused('5.1.1')).then([bounced]);
    spec([claimed, fenced]).when(refused(null)).then([bounced]);
    spec([claimed, fenced]).when(refused('5.2.1')).then([bounced]);
    // Refusals that say nothing lasting about the address: policy, a full mailbox, the sender's own address.
    for (const status of ['5.7.1', '5.2.2', '5.1.8', '5.3.4'])
      spec([claimed, fenced])
        .when(refused(status))
        .then([{ type: 'Failed', reason: 'provider rejected: smtp 550 permanent at RCPT TO' }]);
    // A refusal of the message (after the final dot), not of the recipient.
    spec([claimed, fenced])
      .when(COMMANDS['RecordResult (rejected)'])
      .then([{ type: 'Failed', reason: 'provider rejected: r' }]);
  });

  it('folds a send from claim to a resumed hold, and its lease along', () => {
    spec([claimed]).thenState({ status: 'claimed', token: A, lease: 'running', attempts: 0 });
    const held = { type: 'Held', by: 'campaign' } as const;
    spec([claimed, held]).thenState({ status: 'held', token: A, lease: 'none', attempts: 0 });
    spec([claimed, held, lapsed]).thenState({ status: 'held', token: A, lease: 'none', attempts: 0 });
    spec([claimed, held, { type: 'Resumed', token: B }]).thenState({
      status: 'claimed',
      token: B,
      lease: 'lapsed',
      attempts: 0,
    });
    spec([claimed, fenced, { type: 'Refused', command: 'Fence', why: 'illegal' }]).thenState({
      status: 'sending',
      token: A,
      lease: 'running',
      attempts: 1,
    });
  });
});

describe('outcomeOf', () => {
  it('maps each provider verdict, and waits for a late one as long as the provider says, or a lease', () => {
    expect(outcomeOf({ kind: 'sent', providerMessageId: 'p' }, 1, policy)).toEqual({
      type: 'Sent',
      providerMessageId: 'p',
    });
    expect(outcomeOf({ kind: 'rejected', reason: 'smtp 550' }, 1, policy)).toEqual({
      type: 'Failed',
      reason: 'provider rejected: smtp 550',
    });
    expect(outcomeOf({ kind: 'unknown', reason: 'cut' }, 1, policy)).toEqual({
      type: 'Ambiguous',
      reason: 'cut',
      verdictWithinMs: 0,
    });
    const late = Promise.resolve();
    expect(outcomeOf({ kind: 'unknown', reason: 'cut', late, lateWithinMs: 5_000 }, 1, policy)).toMatchObject({
      verdictWithinMs: 5_000,
    });
    expect(outcomeOf({ kind: 'unknown', reason: 'cut', late }, 1, policy)).toMatchObject({ verdictWithinMs: 60_000 });
    expect(outcomeOf({ kind: 'not_sent', reason: 'x' }, 2, policy)).toEqual({
      type: 'RetryScheduled',
      reason: 'x',
      retryInMs: 200,
    });
    expect(outcomeOf({ kind: 'not_sent', reason: 'x' }, 4, policy)).toEqual({
      type: 'Failed',
      reason: 'gave up after 4 attempts: x',
    });
  });
});

describe('recordedOf: which transitions publish a SendRecorded', () => {
  const SAMPLES: Record<EventType, TransitionEvent> = {
    Claimed: { type: 'Claimed', token: A },
    SkippedAsDuplicate: { type: 'SkippedAsDuplicate', duplicateOf: OTHER, reason: 'dup' },
    LeaseRenewed: { type: 'LeaseRenewed' },
    ClaimReleased: { type: 'ClaimReleased' },
    ClaimTakenOver: { type: 'ClaimTakenOver', token: B },
    Suppressed: { type: 'Suppressed', suppression: 'unsubscribe' },
    Held: { type: 'Held', by: 'campaign' },
    Fenced: { type: 'Fenced' },
    ExposureConflicted: { type: 'ExposureConflicted', exposedVariant: 'a', reason: 'exposure_conflict: x' },
    Sent: { type: 'Sent', providerMessageId: 'p' },
    Failed: { type: 'Failed', reason: 'f' },
    Ambiguous: { type: 'Ambiguous', reason: 'a', verdictWithinMs: 0 },
    RetryScheduled: { type: 'RetryScheduled', reason: 'r', retryInMs: 0 },
    VerdictAwaited: { type: 'VerdictAwaited', withinMs: 0 },
    LookupDeferred: { type: 'LookupDeferred', withinMs: 1, reason: 'not found yet' },
    Resumed: { type: 'Resumed', token: B },
    ResolvedAsSent: { type: 'ResolvedAsSent' },
    ResolvedForRetry: { type: 'ResolvedForRetry', token: B },
    SettledByEvidence: { type: 'SettledByEvidence', source: 'dsn', providerMessageId: null },
  };

  it('publishes an outcome exactly where a request ends (for now), with its reason', () => {
    const published = Object.fromEntries(Object.values(SAMPLES).map((e) => [e.type, recordedOf(e)]));
    expect(published).toEqual({
      Claimed: null,
      SkippedAsDuplicate: { outcome: 'skipped_duplicate', reason: 'dup', providerMessageId: null },
      LeaseRenewed: null,
      ClaimReleased: null,
      ClaimTakenOver: null,
      Suppressed: { outcome: 'suppressed', reason: 'suppressed (unsubscribe)', providerMessageId: null },
      Held: { outcome: 'held', reason: 'campaign is paused', providerMessageId: null },
      Fenced: null,
      ExposureConflicted: { outcome: 'failed', reason: 'exposure_conflict: x', providerMessageId: null },
      Sent: { outcome: 'sent', reason: null, providerMessageId: 'p' },
      Failed: { outcome: 'failed', reason: 'f', providerMessageId: null },
      Ambiguous: { outcome: 'ambiguous', reason: 'a', providerMessageId: null },
      RetryScheduled: null,
      VerdictAwaited: null,
      LookupDeferred: null,
      Resumed: null,
      ResolvedAsSent: { outcome: 'sent', reason: 'resolved by an operator', providerMessageId: null },
      ResolvedForRetry: null,
      SettledByEvidence: { outcome: 'sent', reason: 'settled by delivery evidence (dsn)', providerMessageId: null },
    });
    // Every outcome of the contract has a transition that publishes it, and its status is that outcome.
    const outcomes = new Set(Object.values(published).flatMap((r) => (r ? [r.outcome] : [])));
    expect([...outcomes].sort()).toEqual(
      (['ambiguous', 'failed', 'held', 'sent', 'skipped_duplicate', 'suppressed'] satisfies Outcome[]).sort(),
    );
    for (const t of TRANSITIONS) {
      const outcome = recordedOf(SAMPLES[t.event])?.outcome;
      if (outcome !== undefined && outcome !== 'skipped_duplicate') expect(t.to).toBe(outcome);
    }
  });
});

describe('SettleByEvidence: a provider or relay says the message went out (ADR 009)', () => {
  const evidence = COMMANDS.SettleByEvidence;
  const settled = { type: 'SettledByEvidence', source: 'ses', providerMessageId: 'ses-1' } as const;

  it('settles an ambiguous send, also while a late verdict is still awaited: found is found', () => {
    spec([claimed, fenced, { type: 'Ambiguous', reason: 'smtp no reply', verdictWithinMs: 60_000 }])
      .when(evidence)
      .then([settled]);
  });

  it('refuses a retry whose last attempt handed nothing over: a leaked ENVID proves nothing (not_in_doubt)', () => {
    const notInDoubt = { ...evidence, lastAttemptInDoubt: false };
    spec([claimed, fenced, { type: 'RetryScheduled', reason: 'smtp 421 before DATA', retryInMs: 0 }])
      .when(notInDoubt)
      .then([{ type: 'Refused', command: 'SettleByEvidence', why: 'not_in_doubt' }]);
    spec(REACH.held)
      .when(notInDoubt)
      .then([{ type: 'Refused', command: 'SettleByEvidence', why: 'not_in_doubt' }]);
    // An attempt in flight or in doubt is settled whatever the flag says of the one before.
    spec([claimed, fenced, lapsed]).when(notInDoubt).then([settled]);
    spec(REACH.ambiguous).when(notInDoubt).then([settled]);
  });

  it("settles a retry before its fence, so the retry (an operator's, or one a lookup scheduled) never goes out", () => {
    spec([
      claimed,
      fenced,
      { type: 'Ambiguous', reason: 'r', verdictWithinMs: 0 },
      { type: 'ResolvedForRetry', token: B },
    ])
      .when(evidence)
      .then([settled]);
    // Even while a worker holds the retry's claim: its fence then finds the send settled.
    spec([claimed, fenced, { type: 'RetryScheduled', reason: 'r', retryInMs: 0 }, { type: 'ClaimTakenOver', token: B }])
      .when(evidence)
      .then([settled]);
  });

  it('keeps evidence for a send whose worker is still in the provider call; settles it once the lease lapsed', () => {
    spec([claimed, fenced])
      .when(evidence)
      .then([{ type: 'Refused', command: 'SettleByEvidence', why: 'lease_running' }]);
    spec([claimed, fenced, lapsed]).when(evidence).then([settled]);
  });

  it('proves nothing about a send never attempted: no message of it can have gone out', () => {
    spec([claimed])
      .when(evidence)
      .then([{ type: 'Refused', command: 'SettleByEvidence', why: 'never_attempted' }]);
    spec([claimed, { type: 'Held', by: 'campaign' }, { type: 'Resumed', token: B }])
      .when(evidence)
      .then([{ type: 'Refused', command: 'SettleByEvidence', why: 'never_attempted' }]);
  });

  it('changes nothing once the send has ended: sent, failed, suppressed stay as they are', () => {
    for (const status of ['sent', 'failed', 'suppressed', 'none'] as const)
      spec(REACH[status])
        .when(evidence)
        .then([{ type: 'Refused', command: 'SettleByEvidence', why: 'illegal' }]);
  });

  it("refuses an operator's retry while the provider's evidence may still arrive; `sent` is always taken", () => {
    spec(REACH.ambiguous)
      .when({ ...COMMANDS['Resolve (retry)'], evidenceDueMs: 30_000 })
      .then([{ type: 'Refused', command: 'Resolve', why: 'evidence_pending' }]);
    spec(REACH.ambiguous)
      .when({ ...COMMANDS['Resolve (retry)'], evidenceDueMs: 0 })
      .then([{ type: 'ResolvedForRetry', token: B }]);
    spec(REACH.ambiguous)
      .when(COMMANDS['Resolve (sent)'])
      .then([{ type: 'ResolvedAsSent' }]);
  });

  it("leaves the send sent with no lease, and an operator's retry after it is refused", () => {
    const after = spec([...REACH.ambiguous, settled]);
    expect(after.state).toMatchObject({ status: 'sent', lease: 'none' });
    after.when(COMMANDS['Resolve (retry)']).then([{ type: 'Refused', command: 'Resolve', why: 'illegal' }]);
  });
});

describe('sendRecorded', () => {
  const send = {
    sendId: '6f9e3c1e-4b2a-5f0e-9d7c-5a3b1e0f2d4c',
    campaignId: 'c',
    candidateKey: 'k',
    emailHash: 'h',
    emailHashKeyId: 'k1',
    step: 's',
    experimentId: null,
    variant: null,
    correlationId: 'corr',
    causationId: null,
    conversationId: 'conv-1',
    requestId: 'ats-7731',
  };
  it('derives the event id from the send and the outcome, so recording twice is one event', () => {
    const a = sendRecorded(send, 'sent', { recordedAt: 1 });
    const b = sendRecorded(send, 'sent', { recordedAt: 2 });
    expect(a.eventId).toBe(b.eventId);
    expect(sendRecorded(send, 'held', { recordedAt: 1 }).eventId).not.toBe(a.eventId);
  });
  it('carries the id of the key its emailHash was made with', () => {
    expect(sendRecorded(send, 'sent', { recordedAt: 1 })).toMatchObject({ emailHash: 'h', emailHashKeyId: 'k1' });
    // The conversation the request named rides on every SendRecorded (liveness files the send by it).
    expect(sendRecorded(send, 'failed', { recordedAt: 1 }).conversationId).toBe('conv-1');
  });
  it('names the request the send was made for, on every outcome (publishers join by it)', () => {
    for (const outcome of ['sent', 'held', 'failed', 'ambiguous', 'suppressed', 'skipped_duplicate'] as const)
      expect(sendRecorded(send, outcome, { recordedAt: 1 }).requestId, outcome).toBe('ats-7731');
  });
});

function cellsWhere(predicate: (command: SendCommand) => boolean) {
  return STATUSES.flatMap((status) =>
    NAMES.filter((name) => predicate(COMMANDS[name]) && MATRIX[name][status] !== undefined).map((name) => ({
      status,
      name,
    })),
  );
}
