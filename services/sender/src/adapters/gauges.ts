import { Gauge, holdsAtSign, metric, type Registry } from '@outreach/shared';
import type { KillSwitch } from './incident-controls.js';
import type { ReportsRepository } from './reports-repository.js';

/** At most this many campaigns get their own series; the rest are summed under OTHER_CAMPAIGNS. */
export const MAX_CAMPAIGN_LABELS = 50;
export const OTHER_CAMPAIGNS = '_other';
/** Stands in for a campaign id that holds an address (refused at every ingress; older rows may). */
export const ADDRESS_CAMPAIGN = '_address';

/**
 * Held sends by campaign label, for an unauthenticated /metrics: the most held campaigns by name,
 * the rest summed, and never an id that holds an address (a label is as public as the endpoint).
 */
export function campaignSeries(
  rows: ReadonlyArray<{ readonly campaignId: string; readonly n: number }>,
  max = MAX_CAMPAIGN_LABELS,
): Map<string, number> {
  const series = new Map<string, number>();
  const add = (label: string, n: number) => series.set(label, (series.get(label) ?? 0) + n);
  const sorted = [...rows].sort((a, b) => b.n - a.n || (a.campaignId < b.campaignId ? -1 : 1));
  sorted.forEach(({ campaignId, n }, i) =>
    add(i >= max ? OTHER_CAMPAIGNS : holdsAtSign(campaignId) ? ADDRESS_CAMPAIGN : campaignId, n),
  );
  return series;
}

/** Gauges read from the database at scrape time: what an operator must act on. */
export function registerSenderGauges(
  registry: Registry,
  repository: Pick<ReportsRepository, 'ambiguousCount' | 'heldByCampaign'>,
  sending: Pick<KillSwitch, 'get'>,
): void {
  metric(
    registry,
    'sender_sending_paused',
    () =>
      new Gauge({
        name: 'sender_sending_paused',
        help: 'The kill switch: 1 while every send of every campaign is held (PUT /v1/sending), 0 otherwise',
        registers: [registry],
        async collect() {
          this.set((await sending.get()).paused ? 1 : 0);
        },
      }),
  );
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
        help: `Sends held because their campaign or sending is paused, by campaign (the ${MAX_CAMPAIGN_LABELS} with most; the rest as ${OTHER_CAMPAIGNS})`,
        labelNames: ['campaign'],
        registers: [registry],
        async collect() {
          this.reset();
          for (const [campaign, n] of campaignSeries(await repository.heldByCampaign())) this.set({ campaign }, n);
        },
      }),
  );
}
