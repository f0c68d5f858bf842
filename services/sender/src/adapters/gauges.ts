import { Gauge, metric, type Registry } from '@outreach/shared';
import type { SendsRepository } from './sends-repository.js';

/** Gauges read from the database at scrape time: what an operator must act on. */
export function registerSenderGauges(registry: Registry, repository: SendsRepository): void {
  metric(
    registry,
    'sender_ambiguous_sends',
    () =>
      new Gauge({
        name: 'sender_ambiguous_sends',
        help: 'Sends whose outcome is unknown and wait for an operator (POST /v1/sends/:id/resolve)',
        registers: [registry],
        async collect() {
          this.set(await repository.ambiguousCount());
        },
      }),
  );
  metric(
    registry,
    'sender_held_sends',
    () =>
      new Gauge({
        name: 'sender_held_sends',
        help: 'Sends held because their campaign is paused, by campaign',
        labelNames: ['campaign'],
        registers: [registry],
        async collect() {
          this.reset();
          for (const { campaignId, n } of await repository.heldByCampaign()) this.set({ campaign: campaignId }, n);
        },
      }),
  );
}
