import { gauge, type Registry } from '@outreach/shared';
import type { ConversationsRepository } from './conversations-repository.js';

/**
 * Read from the database at scrape time, each through a partial index (`conversations_stalled_idx`
 * WHERE stalled_reason IS NOT NULL, `conversations_obligation_idx` WHERE status = 'open'; test:
 * services/liveness/test/gauges.int.test.ts).
 */
export function registerLivenessGauges(registry: Registry, repository: ConversationsRepository): void {
  gauge(registry, 'outreach_liveness_stalled_conversations', async (g) => {
    for (const [reason, n] of Object.entries(await repository.stalledCounts())) g.set({ reason }, n);
  });
  gauge(registry, 'outreach_liveness_oldest_obligation_age_seconds', async (g) =>
    g.set(await repository.oldestObligationAgeSeconds()),
  );
}
