/**
 * The request's decider (plan.ts `requestDecider`): given the step a request asks for, as stored,
 * when the HTTP ingress takes it (AcceptRequest) or the consumer plans it (PlanRequest), then the
 * rules in their one order: the step, the experiment, the content.
 */
import { deciderSpec } from '@outreach/testkit';
import { describe, expect, it } from 'vitest';
import {
  asksExperiment,
  planRequest,
  requestDecider,
  type ExperimentAnswer,
  type RequestCommand,
  type RequestEvent,
} from './plan.js';
import { contentMissing, experimentRefused, invalidRequest, stepTaken, unknownExperiment } from './rejection.js';
import { plannedRequest as planned } from '../../test/requests.js';
import { UNKNOWN_EXPERIMENT, type PlannedRequest } from './request.js';
import type { StoredStep } from './step.js';

const NOW = 1_700_000_000_000;
const given = deciderSpec(requestDecider);

const refused = { requestId: 'r1', eventId: '0b7f9a52-4a67-4e35-8b0c-1d7a3f1e9c11', correlationId: 'corr' };
const plan = (request: PlannedRequest, experiment: ExperimentAnswer = { kind: 'none' }): RequestCommand => ({
  type: 'PlanRequest',
  request,
  refused,
  experiment,
  now: NOW,
});
const accept = (request: PlannedRequest, experiment: ExperimentAnswer = { kind: 'none' }): RequestCommand => ({
  type: 'AcceptRequest',
  request,
  refused,
  experiment,
});
const planFor = (request: PlannedRequest, decision: Parameters<typeof planRequest>[1] = null) => {
  const result = planRequest(request, decision, NOW);
  if (!result.ok) throw new Error(result.reason);
  return result.plan;
};
const experimented = planned({
  experimentId: 'exp',
  contents: [
    { variant: 'A', subject: 'a', body: 'body a' },
    { variant: 'B', subject: 'b', body: 'body b' },
  ],
});
const taken = (status: 'emitted' | 'cancelled', requestId = 'r0'): StoredStep => ({ state: { status }, requestId });

describe('a request for an open step', () => {
  it('given no row, when the consumer plans it, then it is planned as planRequest plans it', () => {
    const request = planned();
    given([])
      .when(plan(request))
      .then([{ type: 'RequestPlanned', request, plan: planFor(request) }]);
  });

  it('given a plan for later, then the step is scheduled for that request (a second request in the batch sees it open)', () => {
    const request = planned({ sendAt: NOW + 60_000 });
    const event: RequestEvent = { type: 'RequestPlanned', request, plan: planFor(request) };
    given([event]).thenState({ state: { status: 'scheduled', dueAt: NOW + 60_000 }, requestId: 'r1' });
    const other = planned({ requestId: 'r2', sendAt: NOW + 120_000 });
    given([event])
      .when(plan(other))
      .then([{ type: 'RequestPlanned', request: other, plan: planFor(other) }]);
  });

  it('given a plan due now, then the step has no row still (the sender dedupes the send)', () => {
    const request = planned();
    given([{ type: 'RequestPlanned', request, plan: planFor(request) }]).thenState(requestDecider.initialState);
  });

  it('when the HTTP ingress takes it without an experiment, or the service did not answer, then it is accepted unchecked', () => {
    given([])
      .when(accept(planned()))
      .then([{ type: 'RequestAccepted', request: planned(), experimentChecked: false }]);
    given([])
      .when(accept(experimented, { kind: 'unavailable' }))
      .then([{ type: 'RequestAccepted', request: experimented, experimentChecked: false }]);
  });

  it('when every variant finds content, then the HTTP ingress accepts it checked', () => {
    given([])
      .when(accept(experimented, { kind: 'variants', variants: ['A', 'B'] }))
      .then([{ type: 'RequestAccepted', request: experimented, experimentChecked: true }]);
  });
});

describe('the rules, in their one order', () => {
  it('given a step another request had emitted or cancelled, then a re-request, whatever the experiment says', () => {
    for (const status of ['emitted', 'cancelled'] as const)
      for (const command of [plan(experimented, { kind: 'unknown' }), accept(experimented, { kind: 'unknown' })])
        expect(requestDecider.decide(taken(status), command)).toEqual([
          {
            type: 'RequestRejected',
            refused,
            rejection: stepTaken(status, experimented.sendId),
            reason: `the step was already ${status}: nothing was planned`,
            rerequested: status,
          },
        ]);
  });

  it('given a re-request, or no experiment, then the experiment is not asked (its answer cannot matter)', () => {
    expect(asksExperiment(requestDecider.initialState, experimented)).toBe(true);
    expect(asksExperiment(taken('emitted', 'r1'), experimented)).toBe(true);
    expect(asksExperiment(taken('cancelled'), experimented)).toBe(false);
    expect(asksExperiment(requestDecider.initialState, planned())).toBe(false);
  });

  it('given the same request again for a step already emitted, then the consumer plans nothing and HTTP takes it again', () => {
    expect(requestDecider.decide(taken('emitted', 'r1'), plan(planned()))).toEqual([]);
    expect(requestDecider.decide(taken('emitted', 'r1'), accept(planned()))).toEqual([
      { type: 'RequestAccepted', request: planned(), experimentChecked: false },
    ]);
  });

  it('when the experiment is unknown, then it is refused on both ingresses', () => {
    const rejected = { type: 'RequestRejected', refused, rejection: unknownExperiment, rerequested: null };
    given([])
      .when(plan(experimented, { kind: 'unknown' }))
      .then([{ ...rejected, reason: UNKNOWN_EXPERIMENT } as RequestEvent]);
    given([])
      .when(accept(experimented, { kind: 'unknown' }))
      .then([{ ...rejected, reason: UNKNOWN_EXPERIMENT } as RequestEvent]);
  });

  it('when the experiment service refused the ids, then the consumer refuses the request', () => {
    given([])
      .when(plan(experimented, { kind: 'refused' }))
      .then([
        {
          type: 'RequestRejected',
          refused,
          rejection: experimentRefused,
          reason: 'the experiment service refused the experimentId or candidateId (400)',
          rerequested: null,
        },
      ]);
  });

  it('when a variant finds no content, then HTTP refuses it up front and the consumer for the candidate assigned to it', () => {
    const onlyA = planned({ experimentId: 'exp', contents: [{ variant: 'A', subject: 'a', body: 'body a' }] });
    given([])
      .when(accept(onlyA, { kind: 'variants', variants: ['A', 'B'] }))
      .then([
        {
          type: 'RequestRejected',
          refused,
          rejection: contentMissing('no_content_for_variant'),
          reason: 'no content for variant(s) B of the experiment (and no content without a variant)',
          rerequested: null,
        },
      ]);
    given([])
      .when(plan(onlyA, { kind: 'assigned', decision: { enrolled: true, variant: 'B' } }))
      .then([
        {
          type: 'RequestRejected',
          refused,
          rejection: contentMissing('no_content_for_variant', 'contents'),
          reason: 'invalid OutreachRequested: request has no content for the assigned variant B',
          rerequested: null,
        },
      ]);
  });

  it('when the consumer plans with the candidate assigned, then the content is the variant’s', () => {
    const decision = { enrolled: true, variant: 'B' } as const;
    given([])
      .when(plan(experimented, { kind: 'assigned', decision }))
      .then([{ type: 'RequestPlanned', request: experimented, plan: planFor(experimented, decision) }]);
  });

  it('when the consumer is handed the HTTP ingress’s question, then it is a bug, not a plan', () => {
    given([])
      .when(plan(experimented, { kind: 'variants', variants: ['A'] }))
      .thenThrows(/planned with the candidate's assignment/);
  });

  it('when a request broke the rules, then it is refused as it was found', () => {
    const rejection = invalidRequest(['email']);
    given([])
      .when({ type: 'RefuseRequest', refused, rejection, reason: 'invalid OutreachRequested: email' })
      .then([
        { type: 'RequestRejected', refused, rejection, reason: 'invalid OutreachRequested: email', rerequested: null },
      ]);
  });
});
