/**
 * The sends' outcomes, projected from the sender's SendRecorded events (the planner owns requests;
 * it learns what became of their sends from the log, never from the sender's tables). One
 * transaction per chunk: read and lock the stored outcomes, let the domain keep the latest of each
 * send (domain/request-status.ts `latestOutcomes`: a duplicated, replayed or late record changes
 * nothing), store what changed.
 */
import { withTransaction, type ConsumedEvent } from '@outreach/shared';
import type { Pool } from 'pg';
import type { RequestsRepository } from '../adapters/requests-repository.js';
import { latestOutcomes, outcomeOf } from '../domain/request-status.js';

export function sendOutcomesProjector(deps: {
  pool: Pool;
  requests: RequestsRepository;
}): (events: readonly ConsumedEvent[]) => Promise<void> {
  return async (events) => {
    const recorded = events.flatMap(({ event }) => (event.type === 'SendRecorded' ? [outcomeOf(event)] : []));
    if (recorded.length === 0) return;
    await withTransaction(deps.pool, async (client) => {
      const stored = await deps.requests.outcomes(
        client,
        recorded.map((outcome) => outcome.sendId),
      );
      await deps.requests.storeOutcomes(client, latestOutcomes(stored, recorded), stored);
    });
  };
}
