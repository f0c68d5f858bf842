/**
 * Given what the planner decided and the SendRecorded events it has seen, then this is the status a
 * publisher reads: records move only along their transitions, the latest outcome of a send wins
 * and a duplicated, replayed or late one moves nothing back.
 */
import { sendIdFor, uuidV5 } from '@outreach/contracts';
import { describe, expect, it } from 'vitest';
import { stepTaken, unknownExperiment } from './rejection.js';
import {
  foldDecisions,
  latestOutcomes,
  plannedSteps,
  recordMoves,
  refusalTold,
  REQUEST_TRANSITIONS,
  SAME_EVENT_ONLY,
  requestView,
  sendView,
  supersedes,
  type Outcome,
  type RecordStatus,
  type RequestDecision,
  type RequestRecord,
  type SendOutcome,
  type StoredSend,
} from './request-status.js';
import type { PlannedRequest } from './request.js';

let ids = 0;
/** A fresh UUID per call (the domain's tests take no randomness). */
const randomUUID = () => uuidV5('test', String(++ids));

const SEND = sendIdFor('camp', 'ada', 'intro');
const outcome = (kind: Outcome, recordedAt: number, requestId: string | null = 'r1'): SendOutcome => ({
  sendId: SEND,
  outcome: kind,
  reason: kind === 'sent' ? null : `why ${kind}`,
  recordedAt,
  requestId,
  eventId: randomUUID(),
});

describe('the request record', () => {
  it('is accepted only before any decision, and a plan is final', () => {
    expect(REQUEST_TRANSITIONS).toEqual({
      accepted: ['none'],
      planned: ['none', 'accepted', 'rejected'],
      rejected: ['none', 'accepted', 'rejected'],
    });
    expect(recordMoves('planned', 'rejected')).toBe(false);
    expect(recordMoves('planned', 'accepted')).toBe(false);
    // A request refused (say, an unknown experiment) and sent again once fixed is planned.
    expect(recordMoves('rejected', 'planned')).toBe(true);
  });

  it('rejects an accepted request only for its own event: another event reusing its requestId moves nothing', () => {
    expect(SAME_EVENT_ONLY).toEqual({ rejected: ['accepted'] });
    expect(recordMoves('accepted', 'rejected', true)).toBe(true);
    expect(recordMoves('accepted', 'rejected', false)).toBe(false);
    // Elsewhere the event does not matter: a publisher's fixed retry, or its own refusal again.
    expect(recordMoves('rejected', 'rejected', false)).toBe(true);
    expect(recordMoves('none', 'rejected', false)).toBe(true);
    expect(recordMoves('rejected', 'planned', false)).toBe(true);
  });

  it.each([
    ['no record', undefined, 'e2', false, true],
    ['no record, over HTTP (no event)', undefined, null, false, true],
    ['a record rejected before (a retry of a bad request)', { status: 'rejected', eventId: 'e1' }, 'e2', false, true],
    [
      'accepted over HTTP as this very event, refused by the consumer',
      { status: 'accepted', eventId: 'e1' },
      'e1',
      false,
      true,
    ],
    [
      'accepted as another event (a bad body reusing its id)',
      { status: 'accepted', eventId: 'e1' },
      'e2',
      false,
      false,
    ],
    ['accepted, and refused over HTTP (no event)', { status: 'accepted', eventId: 'e1' }, null, false, false],
    ['accepted before event ids were kept', { status: 'accepted', eventId: null }, 'e2', false, true],
    ['planned', { status: 'planned', eventId: 'e1' }, 'e1', false, false],
    ['planned as another event', { status: 'planned', eventId: 'e1' }, 'e2', false, false],
    ['planned in the same batch', undefined, 'e2', true, false],
  ] as const)('a refusal is told with %s: %s', (_name, stored, eventId, plannedInBatch, told) => {
    expect(refusalTold(stored, eventId, plannedInBatch)).toBe(told);
  });

  it('folds a batch into what applying each decision in turn to the stored record gives, for every stored status', () => {
    const apply = (from: RecordStatus | 'none', decision: RequestDecision): RecordStatus | 'none' =>
      recordMoves(from, decision.to) ? decision.to : from;
    const detailOf = (from: RecordStatus | 'none', decisions: readonly RequestDecision[]) => {
      let status = from;
      let last: RequestDecision | undefined;
      for (const decision of decisions) {
        const next = apply(status, decision);
        if (recordMoves(status, decision.to)) last = decision;
        status = next;
      }
      return { status, last };
    };
    const choices: RequestDecision[] = [
      { requestId: 'r', eventId: 'e1', to: 'planned' },
      { requestId: 'r', eventId: 'e1', to: 'rejected', rejection: unknownExperiment },
      { requestId: 'r', eventId: 'e2', to: 'rejected', rejection: stepTaken('emitted', SEND) },
    ];
    const sequences: RequestDecision[][] = [[]];
    for (let length = 1; length <= 3; length++)
      for (const prefix of sequences.filter((s) => s.length === length - 1))
        for (const choice of choices) sequences.push([...prefix, choice]);
    expect(sequences).toHaveLength(1 + 3 + 9 + 27);
    for (const stored of ['none', 'accepted', 'planned', 'rejected'] as const) {
      for (const sequence of sequences) {
        const stepwise = detailOf(stored, sequence);
        const folded = foldDecisions(sequence);
        expect(folded.length, JSON.stringify(sequence)).toBeLessThanOrEqual(1);
        const once = detailOf(stored, folded);
        expect(once.status, `${stored} then ${sequence.map((d) => d.to).join(',')}`).toBe(stepwise.status);
        expect(once.last, `${stored} then ${sequence.map((d) => d.to).join(',')}`).toEqual(stepwise.last);
      }
    }
  });
});

describe('plannedSteps', () => {
  it('lists the step and each follow-up in order, with the send ids the planner and the sender derive', () => {
    const request = {
      campaignId: 'camp',
      candidateKey: 'ada',
      step: 'intro',
      sendId: SEND,
      followUps: [
        { step: 'nudge', delayMs: 1, contents: [] },
        { step: 'last', delayMs: 1, contents: [] },
      ],
    } as unknown as PlannedRequest;
    expect(plannedSteps(request)).toEqual([
      { ord: 0, sendId: SEND, step: 'intro' },
      { ord: 1, sendId: sendIdFor('camp', 'ada', 'nudge'), step: 'nudge' },
      { ord: 2, sendId: sendIdFor('camp', 'ada', 'last'), step: 'last' },
    ]);
  });
});

describe("a send's outcome", () => {
  it('given none yet, then any outcome is taken', () => {
    expect(supersedes(undefined, outcome('held', 1))).toBe(true);
  });

  it('given an earlier record, then a later one wins: a held send released and sent reads sent', () => {
    expect(latestOutcomes(new Map(), [outcome('held', 1), outcome('sent', 2)])).toEqual([
      expect.objectContaining({ outcome: 'sent', recordedAt: 2 }),
    ]);
    expect(supersedes(outcome('ambiguous', 5), outcome('failed', 6))).toBe(true);
  });

  it('given a record arriving late or again, then nothing moves back', () => {
    const sent = outcome('sent', 2);
    // Out of order in one batch, or redelivered after: still sent.
    expect(latestOutcomes(new Map(), [sent, outcome('held', 1)])).toEqual([sent]);
    expect(latestOutcomes(new Map([[SEND, sent]]), [outcome('held', 1), { ...sent, eventId: randomUUID() }])).toEqual(
      [],
    );
    // The same record twice changes nothing the second time.
    const held = outcome('held', 3);
    expect(latestOutcomes(new Map([[SEND, held]]), [held])).toEqual([]);
    expect(supersedes(outcome('ambiguous', 9), outcome('held', 4))).toBe(false);
  });

  it('given a send that went out, then nothing replaces it, not even a later record', () => {
    expect(supersedes(outcome('sent', 2), outcome('failed', 3))).toBe(false);
    expect(supersedes(outcome('sent', 2), outcome('held', 3))).toBe(false);
  });

  it('given two records at the same database time, then the more settled one wins, whatever the order', () => {
    expect(latestOutcomes(new Map(), [outcome('sent', 5), outcome('held', 5)])).toEqual([
      expect.objectContaining({ outcome: 'sent' }),
    ]);
    expect(latestOutcomes(new Map(), [outcome('held', 5), outcome('ambiguous', 5)])).toEqual([
      expect.objectContaining({ outcome: 'ambiguous' }),
    ]);
  });
});

const stored = (fields: Partial<StoredSend> = {}): StoredSend => ({
  ord: 0,
  sendId: SEND,
  step: 'intro',
  plannedAt: 100,
  outcome: null,
  scheduled: null,
  sequenceStopped: false,
  ...fields,
});
const record = (status: RecordStatus, fields: Partial<RequestRecord> = {}): RequestRecord => ({
  requestId: 'r1',
  status,
  reason: null,
  detail: null,
  sendId: null,
  updatedAt: 50,
  ...fields,
});
const scheduledRow = (status: 'scheduled' | 'emitted' | 'cancelled', requestId: string | null = 'r1') => ({
  status,
  dueAt: 900,
  emittedAt: status === 'emitted' ? 950 : null,
  updatedAt: 960,
  requestId,
});

describe('a send, as its publisher sees it', () => {
  it('given its outcome for this request (or for no named request: a sender before v4), then that outcome', () => {
    expect(sendView('r1', stored({ outcome: outcome('held', 7) }))).toEqual({
      sendId: SEND,
      step: 'intro',
      status: 'held',
      at: 7,
      reason: 'why held',
    });
    expect(sendView('r1', stored({ outcome: outcome('sent', 8, null) })).status).toBe('sent');
  });

  it('given an outcome recorded for another request for the same step, then superseded', () => {
    expect(sendView('r1', stored({ outcome: outcome('sent', 8, 'r2') }))).toMatchObject({
      status: 'superseded',
      at: 8,
      reason: null,
    });
    expect(sendView('r1', stored({ scheduled: scheduledRow('scheduled', 'r2') })).status).toBe('superseded');
  });

  it('given no outcome yet, then where the planner has it', () => {
    expect(sendView('r1', stored())).toMatchObject({ status: 'requested', at: 100 });
    expect(sendView('r1', stored({ scheduled: scheduledRow('scheduled') }))).toMatchObject({
      status: 'scheduled',
      at: 900,
    });
    expect(sendView('r1', stored({ scheduled: scheduledRow('emitted') }))).toMatchObject({
      status: 'requested',
      at: 950,
    });
    expect(sendView('r1', stored({ scheduled: scheduledRow('cancelled') }))).toMatchObject({
      status: 'cancelled',
      at: 960,
    });
    expect(sendView('r1', stored({ ord: 1, step: 'nudge' }))).toMatchObject({ status: 'pending', at: null });
    expect(sendView('r1', stored({ ord: 1, sequenceStopped: true }))).toMatchObject({ status: 'cancelled' });
  });
});

describe('the request, as its publisher sees it', () => {
  const follow = (fields: Partial<StoredSend> = {}) =>
    stored({ ord: 1, sendId: sendIdFor('camp', 'ada', 'nudge'), step: 'nudge', ...fields });

  it('moves accepted → planned → sent as the decision and then the SendRecorded arrive', () => {
    expect(requestView(record('accepted'), []).status).toBe('accepted');
    expect(requestView(record('planned'), [stored(), follow()]).status).toBe('planned');
    const sent = requestView(record('planned'), [follow(), stored({ outcome: outcome('sent', 10) })]);
    expect(sent.status).toBe('sent');
    expect(sent.sends.map((s) => [s.step, s.status])).toEqual([
      ['intro', 'sent'],
      ['nudge', 'pending'],
    ]);
  });

  it("reads the latest send's outcome in sequence order: a held follow-up after a sent step is held", () => {
    const view = requestView(record('planned'), [
      stored({ outcome: outcome('sent', 10) }),
      follow({ outcome: { ...outcome('held', 20), sendId: sendIdFor('camp', 'ada', 'nudge') } }),
    ]);
    expect(view.status).toBe('held');
    // A follow-up cancelled by a reply after the step went out leaves the request sent.
    expect(
      requestView(record('planned'), [
        stored({ outcome: outcome('sent', 10) }),
        follow({ scheduled: scheduledRow('cancelled') }),
      ]).status,
    ).toBe('sent');
  });

  it('given each outcome of its step, then that status; given its step cancelled before any send, then cancelled', () => {
    for (const kind of ['sent', 'ambiguous', 'suppressed', 'held', 'failed', 'skipped_duplicate'] as const)
      expect(requestView(record('planned'), [stored({ outcome: outcome(kind, 1) })]).status).toBe(kind);
    expect(requestView(record('planned'), [stored({ scheduled: scheduledRow('cancelled') })]).status).toBe('cancelled');
  });

  it('given a rejection, then rejected with its reason, detail and send', () => {
    const view = requestView(
      record('rejected', {
        reason: 'step_already_emitted',
        detail: 'the step was already emitted for another request: nothing was planned',
        sendId: SEND,
      }),
      [],
    );
    expect(view).toEqual({
      requestId: 'r1',
      status: 'rejected',
      rejection: {
        reason: 'step_already_emitted',
        detail: 'the step was already emitted for another request: nothing was planned',
        sendId: SEND,
      },
      updatedAt: 50,
      sends: [],
    });
    expect(requestView(record('planned'), []).rejection).toBeNull();
  });
});
