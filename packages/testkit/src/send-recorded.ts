import { randomUUID } from 'node:crypto';
import { sendIdFor, type SendRecorded } from '@outreach/contracts';

/**
 * A SendRecorded as the sender writes it for a sent step, recorded now, with its send id derived
 * from (campaign, candidate, step); outside an experiment and naming no conversation or request
 * unless `fields` says otherwise (any field may be overridden).
 */
export function sendRecordedEvent(
  fields: Pick<SendRecorded, 'campaignId' | 'candidateKey' | 'step'> & Partial<SendRecorded>,
): SendRecorded {
  const now = Date.now();
  return {
    type: 'SendRecorded',
    eventId: randomUUID(),
    occurredAt: now,
    producer: 'sender',
    correlationId: randomUUID(),
    causationId: null,
    sendId: sendIdFor(fields.campaignId, fields.candidateKey, fields.step),
    emailHash: 'h',
    emailHashKeyId: 'test-1',
    experimentId: null,
    variant: null,
    outcome: 'sent',
    reason: null,
    providerMessageId: null,
    recordedAt: now,
    conversationId: null,
    requestId: null,
    ...fields,
  };
}
