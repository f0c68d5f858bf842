/**
 * What a SendRequested must satisfy before anything is claimed: a deliverable address, no header
 * injection, content present, and a sendId that really is the key of (campaign, candidate, step).
 * Pure: the sender re-derives every key itself (canonicalSendKeys, the function every ingress
 * uses) rather than trusting the producer's, and the emailHash key comes in as a value.
 */
import {
  canonicalSendKeys,
  emailHash,
  hasControlCharacters,
  type EmailHashKey,
  type SendRequested,
} from '@outreach/contracts';

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
  readonly emailHashKeyId: string;
  readonly step: string;
  readonly experimentId: string | null;
  readonly variant: string | null;
  readonly subject: string;
  readonly body: string;
  /** The conversation the request named, canonical; carried to every SendRecorded of the send. */
  readonly conversationId: string | null;
}

export type Validation =
  { readonly ok: true; readonly send: ValidSend } | { readonly ok: false; readonly reason: string };

export function validateSendRequest(event: SendRequested, hashKey: EmailHashKey): Validation {
  const keys = canonicalSendKeys(event, hashKey);
  const problems: string[] = keys.ok ? [] : [...keys.problems];
  if (event.subject.trim() === '') problems.push('subject is empty');
  if (hasControlCharacters(event.subject))
    problems.push('subject contains line breaks or control characters (header injection)');
  if (event.subject.length > 998) problems.push('subject is longer than 998 characters');
  if (event.body.trim() === '') problems.push('body is empty');
  if ((event.experimentId === null) !== (event.variant === null))
    problems.push('experimentId and variant must be given together');
  if (problems.length === 0 && keys.ok && event.sendId !== keys.keys.sendId) {
    // Named, not quoted: a reason goes to logs and DLQ headers, and the producer's value may be anything.
    problems.push('sendId is not the id of the canonical (campaignId, candidateKey, step)');
  }
  if (problems.length > 0 || !keys.ok) return { ok: false, reason: `invalid SendRequested: ${problems.join('; ')}` };
  const { sendId, campaignId, candidateKey, step, email, emailNorm, correlationId } = keys.keys;
  return {
    ok: true,
    send: {
      sendId,
      requestId: event.requestId,
      requestEventId: event.eventId,
      correlationId,
      campaignId,
      candidateId: event.candidateId,
      candidateKey,
      email,
      emailNorm,
      emailHash: emailHash(emailNorm, hashKey),
      emailHashKeyId: hashKey.id,
      step,
      experimentId: event.experimentId,
      variant: event.variant,
      subject: event.subject,
      body: event.body,
      conversationId: keys.keys.conversationId,
    },
  };
}
