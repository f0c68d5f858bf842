import { canonicalCorrelationId, type EventBatchHandler, type Logger } from '@outreach/shared';
import type { PlannerRepository } from '../adapters/planner-repository.js';

/**
 * Follows conversations: a sent step advances its reminder sequence; a reply (MessageReceived) or a
 * close stops the sequence and cancels the scheduled steps, with a StepCancelled each.
 */
export function conversationHandler(repository: PlannerRepository, logger: Logger): EventBatchHandler {
  return async (events) => {
    const sent = [];
    for (const { event } of events) {
      if (event.type === 'SendRecorded' && event.outcome === 'sent') {
        sent.push({
          campaignId: event.campaignId,
          candidateKey: event.candidateKey,
          step: event.step,
          sentAt: new Date(event.recordedAt),
        });
      } else if (event.type === 'MessageReceived' || event.type === 'ConversationClosed') {
        const reason = event.type === 'MessageReceived' ? 'candidate replied' : 'conversation closed';
        const cancelled = await repository.stopConversation(
          event.conversationId,
          reason,
          // An agent's correlation id goes on with StepCancelled: only a plain token may (as at every ingress).
          canonicalCorrelationId(event.correlationId, event.eventId),
          event.eventId,
        );
        if (cancelled > 0)
          logger.info({ conversationId: event.conversationId, cancelled, reason }, 'cancelled scheduled steps');
      }
    }
    await repository.advanceSequences(sent);
  };
}
