/** Given a step's past events, when the scheduler emits it or a reply cancels it, then these events (or a refusal). */
import { uuidV5, type StepCancelled } from '@outreach/contracts';
import { deciderSpec } from '@outreach/testkit';
import { describe, expect, it } from 'vitest';
import { plannedSendOf } from '../../test/requests.js';
import { arrivalOf, nextStepScheduled, sendRequested, stepDecider, type StepCommand, type StepEvent } from './step.js';

const given = deciderSpec(stepDecider);

const send = plannedSendOf('reminder');

const scheduled = (dueAt: number, at = 0) => nextStepScheduled(send, dueAt, at);
const emitted = (dueAt: number, at: number) => sendRequested(send, dueAt, at);
const emit = (now: number): StepCommand => ({ type: 'EmitStep', send, now });
const cancel = (now: number, reason = 'candidate replied'): StepCommand => ({
  type: 'CancelStep',
  step: { conversationId: 'camp:Ada', campaignId: 'camp', candidateKey: 'Ada', step: 'reminder' },
  reason,
  correlationId: 'corr',
  causationId: 'reply-1',
  now,
});

describe('a scheduled step', () => {
  it('given its schedule and a reschedule, then it waits for the later due time', () => {
    given([scheduled(1_000), scheduled(5_000, 10)]).thenState({ status: 'scheduled', dueAt: 5_000 });
  });

  it('given a step already emitted or cancelled, then a reschedule leaves it as it is', () => {
    given([scheduled(1_000), emitted(1_000, 1_000), scheduled(9_000, 2_000)]).thenState({ status: 'emitted' });
    given([scheduled(1_000), cancelled(500), scheduled(9_000, 2_000)]).thenState({ status: 'cancelled' });
  });

  it('given a scheduled step, then a send of the same step due at once leaves it scheduled (same sendId)', () => {
    given([scheduled(1_000), sendRequested(send, null, 10)]).thenState({ status: 'scheduled', dueAt: 1_000 });
  });

  it('given a scheduled step, when the scheduler emits it once due, then one SendRequested for its due time', () => {
    given([scheduled(1_000)])
      .when(emit(1_250))
      .then([
        {
          type: 'SendRequested',
          eventId: uuidV5('send-requested', send.sendId),
          occurredAt: 1_250,
          producer: 'planner',
          correlationId: 'corr',
          causationId: send.requestEventId,
          sendId: send.sendId,
          requestId: 'r1',
          campaignId: 'camp',
          candidateId: 'Ada',
          candidateKey: 'Ada',
          email: 'ada@example.com',
          emailNorm: 'ada@example.com',
          step: 'reminder',
          experimentId: 'exp',
          variant: 'B',
          subject: 'Hello',
          body: 'Would you like to talk?',
          scheduledFor: 1_000,
          conversationId: 'camp:Ada',
        },
      ]);
    given([scheduled(1_000)])
      .when(emit(1_000))
      .then([emitted(1_000, 1_000)]);
  });

  it('given a scheduled step, when emitted before it is due, then refused', () => {
    given([scheduled(1_000)])
      .when(emit(999))
      .thenThrows(/before it is due/);
    given([scheduled(1_000), scheduled(5_000, 10)])
      .when(emit(1_000))
      .thenThrows(/before it is due/);
  });

  it('given a step that is not scheduled, when emitted, then refused: a step is emitted once, only from its schedule', () => {
    given([])
      .when(emit(2_000))
      .thenThrows(/is none, not scheduled/);
    given([scheduled(1_000), emitted(1_000, 1_000)])
      .when(emit(2_000))
      .thenThrows(/is emitted, not scheduled/);
    given([scheduled(1_000), cancelled(500)])
      .when(emit(2_000))
      .thenThrows(/is cancelled, not scheduled/);
  });

  it('given a scheduled step, when the conversation stops, then a StepCancelled with the reason', () => {
    given([scheduled(1_000)])
      .when(cancel(700))
      .then([cancelled(700)]);
    given([scheduled(1_000), cancelled(700)]).thenState({ status: 'cancelled' });
  });

  it('given a step already sent, cancelled or never scheduled, when the conversation stops, then nothing to cancel', () => {
    given([scheduled(1_000), emitted(1_000, 1_000)])
      .when(cancel(2_000))
      .then([]);
    given([scheduled(1_000), cancelled(700)])
      .when(cancel(2_000, 'conversation closed'))
      .then([]);
    given([]).when(cancel(2_000)).then([]);
  });

  it('names its events by what happened, not when: an emit or a cancel decided again is the same event', () => {
    const [first] = stepDecider.decide({ status: 'scheduled', dueAt: 1_000 }, emit(3_000));
    const [again] = stepDecider.decide({ status: 'scheduled', dueAt: 1_000 }, emit(4_000));
    expect(again?.eventId).toBe(first?.eventId);
    expect(cancelled(900).eventId).toBe(cancelled(700).eventId);
    expect(scheduled(1_000, 20).eventId).toBe(scheduled(1_000, 10).eventId);
    expect(scheduled(2_000, 10).eventId).not.toBe(scheduled(1_000, 10).eventId);
  });
});

describe('a request for a step (arrivalOf)', () => {
  const stored = (events: StepEvent[], requestId: string | null = 'r1') => ({
    state: given(events).state,
    requestId,
  });

  it('given no row or a scheduled one, then the step is open: sent, scheduled or rescheduled', () => {
    expect(arrivalOf({ state: stepDecider.initialState, requestId: null }, 'r9')).toEqual({ kind: 'open' });
    expect(arrivalOf(stored([scheduled(1_000)]), 'r9')).toEqual({ kind: 'open' });
    expect(arrivalOf(stored([scheduled(1_000)]), 'r1')).toEqual({ kind: 'open' });
  });

  it('given a step already emitted or cancelled, when another request asks for it, then a re-request with its state', () => {
    expect(arrivalOf(stored([scheduled(1_000), emitted(1_000, 1_000)]), 'r2')).toEqual({
      kind: 'rerequested',
      state: 'emitted',
    });
    expect(arrivalOf(stored([scheduled(1_000), cancelled(500)]), 'r2')).toEqual({
      kind: 'rerequested',
      state: 'cancelled',
    });
  });

  it('given a step already emitted or cancelled, when the request that scheduled it comes again, then a quiet repeat', () => {
    expect(arrivalOf(stored([scheduled(1_000), emitted(1_000, 1_000)]), 'r1')).toEqual({
      kind: 'repeated',
      state: 'emitted',
    });
    expect(arrivalOf(stored([scheduled(1_000), cancelled(500)]), 'r1')).toEqual({
      kind: 'repeated',
      state: 'cancelled',
    });
  });
});

function cancelled(at: number): StepCancelled {
  return {
    type: 'StepCancelled',
    eventId: uuidV5('step-cancelled', 'camp:Ada', 'reminder', 'candidate replied'),
    occurredAt: at,
    producer: 'planner',
    correlationId: 'corr',
    causationId: 'reply-1',
    conversationId: 'camp:Ada',
    campaignId: 'camp',
    candidateKey: 'Ada',
    stepId: 'reminder',
    reason: 'candidate replied',
  };
}
