/**
 * Follows conversations: a sent step advances its reminder sequence, which schedules the next
 * follow-up; a reply (MessageReceived) or a close stops the sequence and cancels the scheduled steps,
 * with a StepCancelled each. Each change is one transaction on the database clock, with its events.
 * A follow-up whose step was already emitted or cancelled (another request had it) is reported, as
 * a re-request at the ingress is. The liveness service's `sequence_completed` close stops nothing:
 * it comes only after the last step was sent, and a late one (the conversation moved on) must not
 * stop a sequence planned since.
 */
import { withTransaction, type EventBatchHandler, type Logger } from '@outreach/shared';
import { canonicalConversationId, canonicalCorrelationId } from '@outreach/contracts';
import type { Pool } from 'pg';
import type { PlannerRepository } from '../adapters/planner-repository.js';
import { SEQUENCE_COMPLETED } from '../domain/conversation-event.js';
import { planFollowUp, type Scheduling } from '../domain/plan.js';
import { arrivalOf, stepDecider, stepRefKey, unstoredStep } from '../domain/step.js';
import type { Rerequest, Rerequests } from './rerequests.js';

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
  rerequests: Rerequests;
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
      } else if (
        event.type === 'MessageReceived' ||
        (event.type === 'ConversationClosed' && event.reason !== SEQUENCE_COMPLETED)
      ) {
        const reason = event.type === 'MessageReceived' ? 'candidate replied' : 'conversation closed';
        // Filed under the canonical id, as the ingress files a given one.
        const conversationId = canonicalConversationId(event.conversationId);
        const cancelled = await withTransaction(pool, async (client) => {
          const now = await repository.now(client);
          const steps = await repository.stopConversation(client, conversationId, reason);
          await repository.enqueue(
            client,
            // The UPDATE returns the steps it moved, so each was scheduled until then.
            steps.flatMap(({ dueAt, ...step }) =>
              stepDecider.decide(
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
    const rerequests: Rerequest[] = [];
    await withTransaction(pool, async (client) => {
      const now = await repository.now(client);
      const advanced = await repository.advanceSequences(client, sent);
      const followUps = advanced.flatMap(
        (sequence) => planFollowUp(sequence, (sent[sequence.ord] as SentStep).sentAt, now) ?? [],
      );
      const stored = await repository.storedSteps(
        client,
        followUps.map(({ send }) => send),
        { lock: true },
      );
      const open: Scheduling[] = [];
      for (const followUp of followUps) {
        const arrival = arrivalOf(stored.get(stepRefKey(followUp.send)) ?? unstoredStep, followUp.send.requestId);
        if (arrival.kind === 'open') open.push(followUp);
        else if (arrival.kind === 'rerequested') {
          const { campaignId, step, requestId } = followUp.send;
          rerequests.push({ state: arrival.state, ingress: 'sequence', campaignId, step, requestId });
        }
      }
      await repository.schedule(client, open);
    });
    deps.rerequests.report(rerequests);
  };
}
