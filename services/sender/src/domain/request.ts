/**
 * What a SendRequested must satisfy before anything is claimed: a deliverable address, no header
 * injection, content present, and a sendId that really is the key of (campaign, candidate, step).
 * Pure: the sender re-derives every key itself rather than trusting the producer's.
 */
import {
  emailHash,
  hasControlCharacters,
  isDeliverableAddress,
  normalizeCandidateKey,
  normalizeEmail,
  sendIdFor,
  type SendRequested,
} from '@outreach/shared';

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

export function validateSendRequest(event: SendRequested): Validation {
  const email = event.email.trim();
  const emailNorm = normalizeEmail(event.email);
  const candidateKey = normalizeCandidateKey(event.candidateId);
  const problems: string[] = [];
  if (event.campaignId.trim() === '' || hasControlCharacters(event.campaignId))
    problems.push('campaignId is empty or has control characters');
  if (candidateKey === '' || hasControlCharacters(candidateKey))
    problems.push('candidateId is empty or has control characters');
  if (event.step.trim() === '' || hasControlCharacters(event.step))
    problems.push('step is empty or has control characters');
  if (!isDeliverableAddress(email)) problems.push('email is not a deliverable address');
  if (event.subject.trim() === '') problems.push('subject is empty');
  if (hasControlCharacters(event.subject))
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
