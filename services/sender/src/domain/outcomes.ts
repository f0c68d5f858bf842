import { uuidV5, type SendRecorded } from '@outreach/shared';

/** Every accepted request ends in exactly one of these (see the service README). */
export type Outcome = SendRecorded['outcome'];

export interface RecordedSend {
  readonly sendId: string;
  readonly campaignId: string;
  readonly candidateKey: string;
  readonly emailHash: string;
  /** The key emailHash was made with; null for rows recorded before keyed hashes (unsalted SHA-256). */
  readonly emailHashKeyId: string | null;
  readonly step: string;
  readonly experimentId: string | null;
  readonly variant: string | null;
  readonly correlationId: string;
  readonly causationId: string | null;
}

/**
 * The SendRecorded for one outcome of one send. Its id is derived from (sendId, outcome, attempt
 * marker), so recording the same outcome twice yields the same event, which the outbox keeps once.
 */
export function sendRecorded(
  send: RecordedSend,
  outcome: Outcome,
  details: {
    readonly recordedAt: number;
    readonly reason?: string | null;
    readonly providerMessageId?: string | null;
    readonly generation?: number;
  },
): SendRecorded {
  return {
    type: 'SendRecorded',
    eventId: uuidV5('send-recorded', send.sendId, outcome, String(details.generation ?? 0)),
    occurredAt: details.recordedAt,
    producer: 'sender',
    correlationId: send.correlationId,
    causationId: send.causationId,
    sendId: send.sendId,
    campaignId: send.campaignId,
    candidateKey: send.candidateKey,
    emailHash: send.emailHash,
    emailHashKeyId: send.emailHashKeyId,
    step: send.step,
    experimentId: send.experimentId,
    variant: send.variant,
    outcome,
    reason: details.reason ?? null,
    providerMessageId: details.providerMessageId ?? null,
    recordedAt: details.recordedAt,
  };
}
