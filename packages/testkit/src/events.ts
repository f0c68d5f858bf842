/** Events a test publishes in another service's place. */
import type { SendRecorded } from '@outreach/contracts';
import { sendRecordedEvent } from './send-recorded.js';

/**
 * The sender's SendRecorded as the test plays the sender: `step` of the candidate in campaign `camp`
 * sent now, naming neither the conversation nor the request; `fields` over that.
 */
export function sendRecorded(candidateKey: string, step: string, fields: Partial<SendRecorded> = {}): SendRecorded {
  return sendRecordedEvent({ campaignId: 'camp', candidateKey, step, correlationId: 'c', ...fields });
}
