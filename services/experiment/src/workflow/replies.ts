import type { ConsumedEvent, ErasedSubjects, EventBatchHandler } from '@outreach/shared';
import type { MessageReceived } from '@outreach/contracts';
import type { ExperimentsRepository, Reply } from '../adapters/experiments-repository.js';

/**
 * Replies come from MessageReceived on conversation.events.v1 (the candidate wrote to us), stored
 * once per event id. They are not attributed here: the report counts, per variant, the exposed
 * candidates with a reply in the campaign of their exposure, at or after it (ExperimentsRepository
 * `report`), so a reply read before its exposure still counts once the exposure arrives, and a
 * replay reaches the same counts. Every reply is kept, whatever its campaign: which experiments a
 * campaign's sends belong to is on SendRecorded, not here.
 *
 * A reply of a person erased here is filed under the erasure's pseudonym, as exposures are (ADR 014).
 */
export function replyHandler(repository: ExperimentsRepository, erased?: ErasedSubjects): EventBatchHandler {
  return async (events: readonly ConsumedEvent[]) => {
    const found: Reply[] = events
      .map((e) => e.event)
      .filter((e): e is MessageReceived => e.type === 'MessageReceived')
      .map((e) => ({
        eventId: e.eventId,
        candidateKey: e.candidateKey,
        campaignId: e.campaignId,
        conversationId: e.conversationId,
        occurredAt: new Date(e.occurredAt),
      }));
    if (found.length === 0) return;
    const pseudonyms = erased ? await erased.candidates(found.map((e) => e.candidateKey)) : new Map<string, string>();
    await repository.recordReplies(
      pseudonyms.size === 0
        ? found
        : found.map((e) => ({ ...e, candidateKey: pseudonyms.get(e.candidateKey) ?? e.candidateKey })),
    );
  };
}

/** One consumer for both topics: exposures from SendRecorded, then replies from MessageReceived. */
export function experimentEventsHandler(exposures: EventBatchHandler, replies: EventBatchHandler): EventBatchHandler {
  return async (events, context) => {
    await exposures(events, context);
    await replies(events, context);
  };
}
