/** Events a test publishes in another service's place. */
import { randomUUID } from 'node:crypto';
import { sendIdFor, type SendRecorded } from '@outreach/contracts';

/**
 * The sender's SendRecorded as the test plays the sender: `step` of the candidate in campaign `camp`
 * sent now, naming neither the conversation nor the request; `fields` over that.
 */
export function sendRecorded(candidateKey: string, step: string, fields: Partial<SendRecorded> = {}): SendRecorded {
  const campaignId = fields.campaignId ?? 'camp';
  return {
    type: 'SendRecorded',
    eventId: randomUUID(),
    occurredAt: Date.now(),
    producer: 'sender',
    correlationId: 'c',
    causationId: null,
    sendId: sendIdFor(campaignId, candidateKey, step),
    campaignId,
    candidateKey,
    emailHash: 'h',
    emailHashKeyId: 'test-1',
    step,
    experimentId: null,
    variant: null,
    outcome: 'sent',
    reason: null,
    providerMessageId: null,
    recordedAt: Date.now(),
    conversationId: null,
    requestId: null,
    ...fields,
  };
}
