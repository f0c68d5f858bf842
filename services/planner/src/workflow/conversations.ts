/**
 * Follows conversations: a sent step advances its reminder sequence, which schedules the next
 * follow-up; a reply (MessageReceived) or a close stops the sequence and cancels the scheduled steps,
 * with a StepCancelled each. Each change is one transaction on the database clock, with its events.
 */
import { canonicalCorrelationId, withTransaction, type EventBatchHandler, type Logger } from '@outreach/shared';
import type { Pool } from 'pg';
import type { PlannerRepository } from '../adapters/planner-repository.js';
import { planFollowUp } from '../domain/plan.js';
import { decideStep } from '../domain/step.js';

interface SentStep {
  readonly campaignId: string;
  readonly candidateKey: string;
  readonly step: string;
  readonly sentAt: number;
}

export function conversationHandler(deps: {
  pool: Pool;
  repository: PlannerRepository;
  logger: Logger;
}): EventBatchHandler {
  const { pool, repository, logger } = deps;
  return async (events) => {
    const sent: SentStep[] = [];
    for (const { event } of events) {
      if (event.type === 'SendRecorded' && event.outcome === 'sent') {
        sent.push({
          campaignId: event.campaignId,
          candidateKey: event.candidateKey,
          step: event.step,
          sentAt: event.recordedAt,
        });
      } else if (event.type === 'MessageReceived' || event.type === 'ConversationClosed') {
        const reason = event.type === 'MessageReceived' ? 'candidate replied' : 'conversation closed';
        const { conversationId } = event;
        const cancelled = await withTransaction(pool, async (client) => {
          const now = await repository.now(client);
          const steps = await repository.stopConversation(client, conversationId, reason);
          await repository.enqueue(
            client,
            // The UPDATE returns the steps it moved, so each was scheduled until then.
            steps.flatMap(({ dueAt, ...step }) =>
              decideStep(
                { status: 'scheduled', dueAt },
                {
                  type: 'CancelStep',
                  step: { conversationId, ...step },
                  reason,
                  // An agent's correlation id goes on with StepCancelled: only a plain token may (as at every ingress).
                  correlationId: canonicalCorrelationId(event.correlationId, event.eventId),
                  causationId: event.eventId,
                  now,
                },
              ),
            ),
          );
          return steps.length;
        });
        if (cancelled > 0) logger.info({ conversationId, cancelled, reason }, 'cancelled scheduled steps');
      }
    }
    if (sent.length === 0) return;
    await withTransaction(pool, async (client) => {
      const now = await repository.now(client);
      const advanced = await repository.advanceSequences(client, sent);
      await repository.schedule(
        client,
        advanced.flatMap((sequence) => planFollowUp(sequence, (sent[sequence.ord] as SentStep).sentAt, now) ?? []),
      );
    });
  };
}
