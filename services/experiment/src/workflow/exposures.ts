import type { ConsumedEvent, ErasedSubjects, EventBatchHandler, Logger } from '@outreach/shared';
import type { SendRecorded } from '@outreach/contracts';
import type { ExperimentsRepository, Exposure } from '../adapters/experiments-repository.js';

/**
 * Exposures come from the sender's SendRecorded events: an experiment's send that went out
 * (`sent`). Idempotent by event id, so redeliveries and replays count once.
 *
 * An exposure of a person erased here (`erased`, the live schema's subject_erasures) is filed under
 * the pseudonym the erasure left (`erased:<hash>`), never their candidate key: a replay of the log
 * does not bring them back, and reaches the same counts as the live projection (ADR 014).
 */
export function exposureHandler(
  repository: ExperimentsRepository,
  logger: Logger,
  erased?: ErasedSubjects,
): EventBatchHandler {
  return async (events: readonly ConsumedEvent[]) => {
    const found: Exposure[] = events
      .map((e) => e.event)
      .filter((e): e is SendRecorded => e.type === 'SendRecorded')
      .filter((e) => e.outcome === 'sent' && e.experimentId !== null && e.variant !== null)
      .map((e) => ({
        eventId: e.eventId,
        experimentId: e.experimentId as string,
        candidateKey: e.candidateKey,
        variant: e.variant as string,
        sendId: e.sendId,
        campaignId: e.campaignId,
        recordedAt: new Date(e.recordedAt),
        correlationId: e.correlationId,
      }));
    const pseudonyms = erased ? await erased.candidates(found.map((e) => e.candidateKey)) : new Map<string, string>();
    const exposures =
      pseudonyms.size === 0
        ? found
        : found.map((e) => ({ ...e, candidateKey: pseudonyms.get(e.candidateKey) ?? e.candidateKey }));
    const contaminated = await repository.recordExposures(exposures);
    for (const event of contaminated) {
      logger.error(
        {
          alert: 'variant_contaminated',
          experimentId: event.experimentId,
          candidateKey: event.candidateKey,
          exposedVariants: event.exposedVariants,
        },
        'ALERT: candidate exposed to more than one variant',
      );
    }
  };
}
