/** Given these events, then this state (and this stall at this time): every rule and their interleavings. */
import { describe, expect, it } from 'vitest';
import {
  deadlines,
  initialState,
  isFinalStep,
  project,
  refold,
  stallAt,
  stallDeadline,
  verdictAt,
  type ConversationInput,
  type TimedInput,
} from './conversation.js';

const graces = { inboundMs: 60_000, outboundMs: 3_600_000, overdueMs: 300_000, replyWindowMs: 7_200_000 };
let n = 0;
const at = (time: number, input: ConversationInput): TimedInput => ({
  eventId: `e${String(++n).padStart(4, '0')}`,
  at: time,
  input,
});
const given = (...events: TimedInput[]) => {
  const state = project(events);
  return {
    state,
    stallAt: (now: number) => stallAt(state, graces, now),
    verdictAt: (now: number) => verdictAt(state, graces, now),
  };
};
const planned = (...steps: string[]): ConversationInput => ({ type: 'SequencePlanned', steps });
const sent = (step: string): ConversationInput => ({ type: 'SendRecorded', step });

describe('conversation rules', () => {
  it('an inbound message creates an obligation with the short grace', () => {
    const c = given(at(1_000, { type: 'MessageReceived' }));
    expect(c.state).toMatchObject({ status: 'open', obligationSince: 1_000, obligationKind: 'inbound' });
    expect(c.stallAt(60_999)).toBeNull();
    expect(c.stallAt(61_000)).toEqual({ reason: 'no_next_step', since: 1_000 });
  });

  it("a second unanswered message keeps the first one's obligation time", () => {
    const c = given(at(1_000, { type: 'MessageReceived' }), at(50_000, { type: 'MessageReceived' }));
    expect(c.state.obligationSince).toBe(1_000);
    expect(c.stallAt(61_000)).toEqual({ reason: 'no_next_step', since: 1_000 });
  });

  it('a start, a send and a completed step create an outbound obligation with the long grace', () => {
    for (const input of [
      { type: 'ConversationStarted' },
      { type: 'SendRecorded', step: 'intro' },
      { type: 'StepCompleted', stepId: 's1' },
    ] as const) {
      const c = given(at(0, input));
      expect(c.state.obligationKind).toBe('outbound');
      expect(c.stallAt(3_599_999)).toBeNull();
      expect(c.stallAt(3_600_000)?.reason).toBe('no_next_step');
    }
  });

  it('scheduling the next step discharges the obligation and sets a deadline', () => {
    const c = given(
      at(0, { type: 'MessageReceived' }),
      at(10, { type: 'NextStepScheduled', stepId: 'reply', dueAt: 1_000 }),
    );
    expect(c.state).toMatchObject({ obligationSince: null, pendingStepId: 'reply', dueAt: 1_000 });
    expect(c.stallAt(1_000 + 299_999)).toBeNull();
    expect(c.stallAt(1_000 + 300_000)).toEqual({ reason: 'next_step_overdue', since: 1_000 });
  });

  it('executing the scheduled step clears the deadline and owes the next one', () => {
    const scheduled = at(0, { type: 'NextStepScheduled', stepId: 'follow-up', dueAt: 500 });
    const bySend = given(scheduled, at(600, { type: 'SendRecorded', step: 'follow-up' }));
    expect(bySend.state).toMatchObject({
      pendingStepId: null,
      dueAt: null,
      obligationSince: 600,
      obligationKind: 'outbound',
    });
    const byStep = given(scheduled, at(600, { type: 'StepCompleted', stepId: 'follow-up' }));
    expect(byStep.state).toMatchObject({ pendingStepId: null, dueAt: null, obligationSince: 600 });
  });

  it('another step executing leaves the pending deadline in place', () => {
    const c = given(
      at(0, { type: 'NextStepScheduled', stepId: 'follow-up', dueAt: 500 }),
      at(100, { type: 'StepCompleted', stepId: 'other' }),
    );
    expect(c.state).toMatchObject({ pendingStepId: 'follow-up', dueAt: 500, obligationSince: 100 });
  });

  it('an inbound reply while a step is pending is still owed a reaction', () => {
    const c = given(
      at(0, { type: 'NextStepScheduled', stepId: 'follow-up', dueAt: 10_000_000 }),
      at(100, { type: 'MessageReceived' }),
    );
    expect(c.stallAt(100 + 60_000)).toEqual({ reason: 'no_next_step', since: 100 });
  });

  it('a cancelled step leaves an open conversation owing a next step, and a closed one closed', () => {
    const open = given(
      at(0, { type: 'NextStepScheduled', stepId: 'f', dueAt: 100 }),
      at(10, { type: 'StepCancelled', stepId: 'f' }),
    );
    expect(open.state).toMatchObject({
      pendingStepId: null,
      dueAt: null,
      obligationSince: 10,
      obligationKind: 'outbound',
    });
    const replied = given(
      at(0, { type: 'NextStepScheduled', stepId: 'f', dueAt: 100 }),
      at(5, { type: 'MessageReceived' }),
      at(6, { type: 'StepCancelled', stepId: 'f' }),
    );
    expect(replied.state).toMatchObject({ obligationSince: 5, obligationKind: 'inbound', dueAt: null });
    const closed = given(at(0, { type: 'ConversationClosed' }), at(1, { type: 'StepCancelled', stepId: 'f' }));
    expect(closed.state.status).toBe('closed');
  });

  it('closing ends everything; a later event reopens', () => {
    const closed = given(at(0, { type: 'MessageReceived' }), at(5, { type: 'ConversationClosed' }));
    expect(closed.state).toMatchObject({ status: 'closed', obligationSince: null, dueAt: null });
    expect(closed.stallAt(Number.MAX_SAFE_INTEGER)).toBeNull();
    expect(deadlines(closed.state, graces)).toEqual({ obligation: null, overdue: null, reply: null });
    const reopened = given(at(0, { type: 'ConversationClosed' }), at(10, { type: 'MessageReceived' }));
    expect(reopened.state).toMatchObject({ status: 'open', obligationKind: 'inbound' });
  });

  it('events out of order (a redelivery after a restart) give the state of the ordered stream', () => {
    const events = [
      at(0, { type: 'MessageReceived' }),
      at(10, { type: 'NextStepScheduled', stepId: 'reply', dueAt: 100 }),
      at(50, { type: 'StepCompleted', stepId: 'reply' }),
      at(60, { type: 'NextStepScheduled', stepId: 'next', dueAt: 1_000 }),
    ];
    const ordered = project(events);
    expect(project([...events].reverse())).toEqual(ordered);
    expect(project([events[2], events[0], events[3], events[1]] as TimedInput[])).toEqual(ordered);
    expect(stallAt(ordered, graces, 60 + 60_000)).toBeNull();
  });

  it('events of one producer batch share an append time: their log position orders them', () => {
    const message: TimedInput = {
      eventId: 'ffff',
      at: 100,
      position: ['conversation.events.v1', 3, 10],
      input: { type: 'MessageReceived' },
    };
    const schedule: TimedInput = {
      eventId: '0000',
      at: 100,
      position: ['conversation.events.v1', 3, 11],
      input: { type: 'NextStepScheduled', stepId: 'reply', dueAt: 10_000_000 },
    };
    expect(project([schedule, message])).toMatchObject({ obligationSince: null, pendingStepId: 'reply' });
  });

  it('the same event twice changes nothing (the projection also deduplicates by event id)', () => {
    const message = at(0, { type: 'MessageReceived' });
    const schedule = at(10, { type: 'NextStepScheduled', stepId: 'x', dueAt: 20 });
    expect(project([message, schedule, schedule])).toEqual(project([message, schedule]));
  });

  it('starts with no obligation at all', () => {
    expect(stallAt(initialState, graces, Number.MAX_SAFE_INTEGER)).toBeNull();
  });

  it('the stall deadline is the earliest deadline, or none', () => {
    expect(stallDeadline({ obligation: 500, overdue: 400, reply: null })).toBe(400);
    expect(stallDeadline({ obligation: null, overdue: 400, reply: null })).toBe(400);
    expect(stallDeadline({ obligation: 500, overdue: null, reply: null })).toBe(500);
    expect(stallDeadline({ obligation: null, overdue: null, reply: 700 })).toBe(700);
    expect(stallDeadline({ obligation: null, overdue: null, reply: null })).toBeNull();
  });

  it('a re-fold heals a flagged conversation that is no longer stalled, and only a flagged one', () => {
    const unanswered = [at(0, { type: 'MessageReceived' })];
    const answered = [...unanswered, at(70_000, { type: 'NextStepScheduled', stepId: 'reply', dueAt: 80_000 })];
    expect(refold(answered, graces, 75_000, true)).toEqual({
      state: project(answered),
      deadlines: { obligation: null, overdue: 380_000, reply: null },
      stallDeadline: 380_000,
      healed: true,
    });
    expect(refold(answered, graces, 75_000, false).healed).toBe(false);
    // Still stalled (now by the overdue step): the flag stays.
    expect(refold(answered, graces, 380_000, true).healed).toBe(false);
    expect(refold(unanswered, graces, 75_000, true)).toMatchObject({ stallDeadline: 60_000, healed: false });
  });
});

describe('conversations end: the last planned step, then the reply window', () => {
  const REPLY = graces.replyWindowMs;

  it('given a plan of one step, when it is sent, then nothing is owed and the reply is awaited until the window ends, then it closes', () => {
    const c = given(at(0, planned('intro')), at(1_000, sent('intro')));
    expect(c.state).toMatchObject({
      status: 'open',
      obligationSince: null,
      obligationKind: null,
      awaitingReplySince: 1_000,
    });
    expect(deadlines(c.state, graces)).toEqual({ obligation: null, overdue: null, reply: 1_000 + REPLY });
    expect(c.verdictAt(1_000 + REPLY - 1)).toBeNull();
    expect(c.verdictAt(1_000 + REPLY)).toEqual({ outcome: 'close', reason: 'sequence_completed', since: 1_000 });
    // Closing is not a stall: it never reaches the stalled list, and a flag on it would heal.
    expect(c.stallAt(Number.MAX_SAFE_INTEGER)).toBeNull();
  });

  it('given a plan with follow-ups, then only the last step ends it: the others owe the next step', () => {
    const head = given(at(0, planned('intro', 'nudge', 'last')), at(1_000, sent('intro')));
    expect(head.state).toMatchObject({ obligationSince: 1_000, obligationKind: 'outbound', awaitingReplySince: null });
    const done = given(
      at(0, planned('intro', 'nudge', 'last')),
      at(1_000, sent('intro')),
      at(1_100, { type: 'NextStepScheduled', stepId: 'nudge', dueAt: 5_000 }),
      at(5_000, sent('nudge')),
      at(5_100, { type: 'NextStepScheduled', stepId: 'last', dueAt: 9_000 }),
      at(9_000, sent('last')),
    );
    expect(done.state).toMatchObject({ pendingStepId: null, obligationSince: null, awaitingReplySince: 9_000 });
    expect(done.verdictAt(9_000 + REPLY)?.outcome).toBe('close');
  });

  it('given the last step completed by an agent (StepCompleted), then it ends the sequence as a send does', () => {
    const c = given(at(0, planned('answer')), at(500, { type: 'StepCompleted', stepId: 'answer' }));
    expect(c.state.awaitingReplySince).toBe(500);
  });

  it('given a reply before the window ends, then the normal inbound obligation: no close, a stall if nobody answers', () => {
    const c = given(at(0, planned('intro')), at(1_000, sent('intro')), at(2_000, { type: 'MessageReceived' }));
    expect(c.state).toMatchObject({ awaitingReplySince: null, obligationSince: 2_000, obligationKind: 'inbound' });
    expect(c.verdictAt(1_000 + REPLY)).toEqual({ outcome: 'stall', reason: 'no_next_step', since: 2_000 });
  });

  it('given the close, then a later reply reopens the conversation with an inbound obligation', () => {
    const c = given(
      at(0, planned('intro')),
      at(1_000, sent('intro')),
      at(1_000 + REPLY, { type: 'ConversationClosed', reason: 'sequence_completed' }),
      at(2_000 + REPLY, { type: 'MessageReceived' }),
    );
    expect(c.state).toMatchObject({ status: 'open', closedReason: null, obligationKind: 'inbound' });
  });

  it("given the sweep's close arriving after a reply (the conversation moved on), then it is stale and changes nothing", () => {
    const replied = [at(0, planned('intro')), at(1_000, sent('intro')), at(2_000, { type: 'MessageReceived' })];
    const late = at(3_000, { type: 'ConversationClosed', reason: 'sequence_completed' });
    expect(project([...replied, late])).toEqual(project(replied));
    // Any other close closes, whatever came before; so does one stored before reasons were kept.
    for (const input of [{ type: 'ConversationClosed', reason: 'hired' }, { type: 'ConversationClosed' }] as const) {
      expect(given(...replied, at(3_000, input)).state).toMatchObject({ status: 'closed', obligationSince: null });
    }
    expect(given(...replied, at(3_000, { type: 'ConversationClosed', reason: 'hired' })).state.closedReason).toBe(
      'hired',
    );
  });

  it('given a step that ends one plan and is continued by another, then it is not the last: the later step is', () => {
    const c = given(at(0, planned('intro', 'nudge')), at(10, planned('intro')), at(1_000, sent('intro')));
    expect(isFinalStep(c.state, 'intro')).toBe(false);
    expect(isFinalStep(c.state, 'nudge')).toBe(true);
    expect(c.state).toMatchObject({ obligationKind: 'outbound', awaitingReplySince: null });
    // Plans are sets: their order and repetition do not matter.
    expect(project([at(0, planned('intro')), at(10, planned('intro', 'nudge')), at(20, planned('intro'))])).toEqual(
      project([at(0, planned('intro', 'nudge')), at(10, planned('intro')), at(20, planned('intro'))]),
    );
  });

  it('given another step still pending when the last planned one is sent, then a next step is owed as usual', () => {
    const c = given(
      at(0, planned('intro')),
      at(10, { type: 'NextStepScheduled', stepId: 'agent-call', dueAt: 10_000_000 }),
      at(1_000, sent('intro')),
    );
    expect(c.state).toMatchObject({ pendingStepId: 'agent-call', awaitingReplySince: null, obligationSince: 1_000 });
  });

  it('given a step scheduled after the last one was sent, then the conversation goes on: no reply is awaited', () => {
    const c = given(
      at(0, planned('intro')),
      at(1_000, sent('intro')),
      at(2_000, { type: 'NextStepScheduled', stepId: 'extra', dueAt: 50_000 }),
    );
    expect(c.state).toMatchObject({ awaitingReplySince: null, pendingStepId: 'extra' });
    expect(c.verdictAt(1_000 + REPLY)).toEqual({ outcome: 'stall', reason: 'next_step_overdue', since: 50_000 });
  });

  it('given a plan, then nothing is owed until its steps are scheduled or sent, and a close keeps what was planned', () => {
    expect(given(at(0, planned('intro'))).stallAt(Number.MAX_SAFE_INTEGER)).toBeNull();
    const reopened = given(
      at(0, planned('intro')),
      at(5, { type: 'ConversationClosed', reason: 'paused' }),
      at(1_000, sent('intro')),
    );
    expect(reopened.state).toMatchObject({ status: 'open', awaitingReplySince: 1_000 });
  });

  it('given a follow-up suppressed (the candidate unsubscribed) or failed, then the sequence is over: no overdue step, the reply is awaited, then it closes', () => {
    for (const outcome of ['suppressed', 'failed'] as const) {
      const c = given(
        at(0, planned('intro', 'nudge')),
        at(1_000, sent('intro')),
        at(1_100, { type: 'NextStepScheduled', stepId: 'nudge', dueAt: 5_000 }),
        at(5_000, { type: 'SendRecorded', step: 'nudge', outcome }),
      );
      expect(c.state, outcome).toMatchObject({
        status: 'open',
        pendingStepId: null,
        dueAt: null,
        obligationSince: null,
        awaitingReplySince: 5_000,
      });
      // Unchanged, the nudge would be overdue at 5_000 + overdue grace, for ever.
      expect(c.stallAt(Number.MAX_SAFE_INTEGER), outcome).toBeNull();
      expect(c.verdictAt(5_000 + REPLY), outcome).toEqual({
        outcome: 'close',
        reason: 'sequence_completed',
        since: 5_000,
      });
    }
  });

  it('given a send that did not go out, then an answer owed, another pending step or a close stay as they were', () => {
    const failed = (step: string): ConversationInput => ({ type: 'SendRecorded', step, outcome: 'failed' });
    const replied = given(
      at(0, planned('intro', 'nudge')),
      at(1_000, sent('intro')),
      at(2_000, { type: 'MessageReceived' }),
      at(3_000, failed('nudge')),
    );
    expect(replied.state).toMatchObject({
      obligationKind: 'inbound',
      obligationSince: 2_000,
      awaitingReplySince: null,
    });
    expect(replied.stallAt(62_000)).toEqual({ reason: 'no_next_step', since: 2_000 });
    const call = given(
      at(0, planned('intro', 'nudge')),
      at(1_100, { type: 'NextStepScheduled', stepId: 'agent-call', dueAt: 9_000 }),
      at(3_000, failed('nudge')),
    );
    expect(call.state).toMatchObject({ pendingStepId: 'agent-call', dueAt: 9_000, awaitingReplySince: null });
    const closed = given(
      at(0, planned('intro')),
      at(500, { type: 'ConversationClosed', reason: 'hired' }),
      at(1_000, failed('intro')),
    );
    expect(closed.state).toMatchObject({ status: 'closed', closedReason: 'hired', awaitingReplySince: null });
  });

  it('a re-fold heals a flagged conversation whose last step has since been sent', () => {
    const events = [at(0, planned('intro')), at(0, { type: 'MessageReceived' })];
    expect(refold(events, graces, 70_000, true).healed).toBe(false);
    const answered = [...events, at(70_000, sent('intro'))];
    expect(refold(answered, graces, 75_000, true)).toMatchObject({
      stallDeadline: 70_000 + REPLY,
      healed: true,
    });
  });
});
