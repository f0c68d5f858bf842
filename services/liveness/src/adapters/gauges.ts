import { Gauge, metric, type Registry } from '@outreach/shared';
import type { ConversationsRepository } from './conversations-repository.js';

/** Read from the database at scrape time. */
export function registerLivenessGauges(registry: Registry, repository: ConversationsRepository): void {
  metric(
    registry,
    'liveness_stalled_conversations',
    () =>
      new Gauge({
        name: 'liveness_stalled_conversations',
        help: 'Conversations currently flagged as stalled, by reason',
        labelNames: ['reason'],
        registers: [registry],
        async collect() {
          for (const [reason, n] of Object.entries(await repository.stalledCounts())) this.set({ reason }, n);
        },
      }),
  );
  metric(
    registry,
    'liveness_oldest_obligation_age_seconds',
    () =>
      new Gauge({
        name: 'liveness_oldest_obligation_age_seconds',
        help: 'Age of the oldest open obligation (a next step owed), 0 when none',
        registers: [registry],
        async collect() {
          this.set(await repository.oldestObligationAgeSeconds());
        },
      }),
  );
}
