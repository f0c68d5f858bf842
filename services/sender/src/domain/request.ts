/**
 * What a SendRequested must satisfy before anything is claimed: a deliverable address, no header
 * injection, content present, and a sendId that really is the key of (campaign, candidate, step).
 * Pure: the sender re-derives every key itself rather than trusting the producer's.
 */
import { emailHash, normalizeCandidateKey, normalizeEmail, sendIdFor, type SendRequested } from '@outreach/shared';

export interface ValidSend {
  readonly sendId: string;
  readonly requestId: string;
  readonly requestEventId: string;
  readonly correlationId: string;
  readonly campaignId: string;
  readonly candidateId: string;
  readonly candidateKey: string;
  readonly email: string;
  readonly emailNorm: string;
  readonly emailHash: string;
  readonly step: string;
  readonly experimentId: string | null;
  readonly variant: string | null;
  readonly subject: string;
  readonly body: string;
}

export type Validation =
  { readonly ok: true; readonly send: ValidSend } | { readonly ok: false; readonly reason: string };

// Deliberately strict and simple: one @, a dotted domain, no spaces, quotes, angle brackets or controls.
const ADDRESS =
  /^[A-Za-z0-9.!#$%&'*+/=?^_`{|}~-]+@[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?)+$/;
// eslint-disable-next-line no-control-regex -- matching control characters is the point
const CONTROL = /[\u0000-\u001f\u007f]/;

export function validateSendRequest(event: SendRequested): Validation {
  const email = event.email.trim();
  const emailNorm = normalizeEmail(event.email);
  const candidateKey = normalizeCandidateKey(event.candidateId);
  const problems: string[] = [];
  if (event.campaignId.trim() === '' || CONTROL.test(event.campaignId))
    problems.push('campaignId is empty or has control characters');
  if (candidateKey === '' || CONTROL.test(candidateKey))
    problems.push('candidateId is empty or has control characters');
  if (event.step.trim() === '' || CONTROL.test(event.step)) problems.push('step is empty or has control characters');
  if (email.length > 254 || !ADDRESS.test(email)) problems.push(`email is not a deliverable address`);
  if (event.subject.trim() === '') problems.push('subject is empty');
  if (CONTROL.test(event.subject))
    problems.push('subject contains line breaks or control characters (header injection)');
  if (event.subject.length > 998) problems.push('subject is longer than 998 characters');
  if (event.body.trim() === '') problems.push('body is empty');
  if ((event.experimentId === null) !== (event.variant === null))
    problems.push('experimentId and variant must be given together');
  const expectedSendId = sendIdFor(event.campaignId, candidateKey, event.step);
  if (problems.length === 0 && event.sendId !== expectedSendId) {
    problems.push(
      `sendId ${event.sendId} is not the id of (campaignId, candidateKey, step); expected ${expectedSendId}`,
    );
  }
  if (problems.length > 0) return { ok: false, reason: `invalid SendRequested: ${problems.join('; ')}` };
  return {
    ok: true,
    send: {
      sendId: expectedSendId,
      requestId: event.requestId,
      requestEventId: event.eventId,
      correlationId: event.correlationId,
      campaignId: event.campaignId,
      candidateId: event.candidateId,
      candidateKey,
      email,
      emailNorm,
      emailHash: emailHash(emailNorm),
      step: event.step,
      experimentId: event.experimentId,
      variant: event.variant,
      subject: event.subject,
      body: event.body,
    },
  };
}
