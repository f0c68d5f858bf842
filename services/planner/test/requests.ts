/**
 * The one OutreachRequested builder of the planner's tests, with fixed values (the domain's unit tests
 * take no randomness; the integration harness adds fresh ids), the request as planning takes it, and
 * a send it plans.
 */
import { sendIdFor, type OutreachRequested } from '@outreach/contracts';
import { testEmailHashKey } from '@outreach/testkit';
import { validateRequest, type PlannedRequest } from '../src/domain/request.js';
import type { PlannedSend } from '../src/domain/step.js';

/** Request r1 of campaign `camp`: Ada's intro step, one content, no experiment, schedule or follow-up; `fields` over that. */
export function requestEvent(fields: Partial<OutreachRequested> = {}): OutreachRequested {
  return {
    type: 'OutreachRequested',
    eventId: '0b7f9a52-4a67-4e35-8b0c-1d7a3f1e9c11',
    occurredAt: 0,
    producer: 'ats',
    correlationId: 'corr',
    causationId: null,
    requestId: 'r1',
    campaignId: 'camp',
    candidateId: 'Ada',
    email: 'ada@example.com',
    step: 'intro',
    experimentId: null,
    contents: [{ variant: null, subject: 'Hi', body: 'Body' }],
    sendAt: null,
    conversationId: null,
    followUps: [],
    ...fields,
  };
}

/** requestEvent(fields) validated with the tests' email-hash key, as the decider plans it; a refusal throws. */
export function plannedRequest(fields: Partial<OutreachRequested> = {}): PlannedRequest {
  const validation = validateRequest(requestEvent(fields), testEmailHashKey());
  if (!validation.ok) throw new Error(validation.reason);
  return validation.request;
}

/** Ada's send of `step` for request r1, in experiment `exp` with variant B; `fields` over that. */
export function plannedSendOf(step: string, fields: Partial<PlannedSend> = {}): PlannedSend {
  return {
    requestId: 'r1',
    requestEventId: '0b7f9a52-4a67-4e35-8b0c-1d7a3f1e9c11',
    correlationId: 'corr',
    campaignId: 'camp',
    candidateId: 'Ada',
    candidateKey: 'Ada',
    conversationId: 'camp:Ada',
    email: 'ada@example.com',
    emailNorm: 'ada@example.com',
    experimentId: 'exp',
    sendId: sendIdFor('camp', 'Ada', step),
    step,
    variant: 'B',
    subject: 'Hello',
    body: 'Would you like to talk?',
    ...fields,
  };
}
