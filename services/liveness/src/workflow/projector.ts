import type { ConsumedEvent, EventBatchHandler, Logger } from '@outreach/shared';
import type { ConversationsRepository, ProjectedEvent } from '../adapters/conversations-repository.js';

/** The conversation an event belongs to; a send belongs to (campaign, candidate)'s default conversation. */
export function defaultConversationId(campaignId: string, candidateKey: string): string {
  return `${campaignId}:${candidateKey}`;
}

/** Maps consumed events to projection inputs; event time is the record's broker append time. */
export function toProjected(consumed: ConsumedEvent): ProjectedEvent | undefined {
  const { event } = consumed;
  const base = {
    eventId: event.eventId,
    at: consumed.timestamp,
    position: [consumed.topic, consumed.partition, Number(consumed.offset)] as const,
    correlationId: event.correlationId,
  };
  const inConversation = (
    e: { conversationId: string; campaignId: string; candidateKey: string },
    input: ProjectedEvent['input'],
  ) => ({
    ...base,
    conversationId: e.conversationId,
    campaignId: e.campaignId,
    candidateKey: e.candidateKey,
    input,
  });
  switch (event.type) {
    case 'ConversationStarted':
    case 'MessageReceived':
    case 'ConversationClosed':
      return inConversation(event, { type: event.type });
    case 'NextStepScheduled':
      return inConversation(event, { type: 'NextStepScheduled', stepId: event.stepId, dueAt: event.dueAt });
    case 'StepCancelled':
      return inConversation(event, { type: 'StepCancelled', stepId: event.stepId });
    case 'StepCompleted':
      return inConversation(event, { type: 'StepCompleted', stepId: event.stepId });
    case 'SendRecorded':
      // Only a send that went out is a step taken; held, suppressed or failed sends are not.
      if (event.outcome !== 'sent') return undefined;
      return {
        ...base,
        conversationId: defaultConversationId(event.campaignId, event.candidateKey),
        campaignId: event.campaignId,
        candidateKey: event.candidateKey,
        input: { type: 'SendRecorded', step: event.step },
      };
    default:
      return undefined;
  }
}

export function projectorHandler(repository: ConversationsRepository, logger: Logger): EventBatchHandler {
  return async (events) => {
    const projected = events.map(toProjected).filter((e): e is ProjectedEvent => e !== undefined);
    const recovered = await repository.project(projected);
    for (const event of recovered) {
      logger.info(
        { alert: 'conversation_recovered', conversationId: event.conversationId, reason: event.reason },
        'conversation recovered',
      );
    }
  };
}
