import { gauge, type Registry } from '@outreach/shared';
import { holdsAtSign } from '@outreach/contracts';
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

/**
 * Gauges read from the database at scrape time: what an operator must act on. Each count is served
 * by a partial index (`sends_lookup_idx` WHERE status = 'ambiguous', `sends_held_idx` WHERE status =
 * 'held'), so it costs the rows counted, not the table (test: services/sender/test/gauges.int.test.ts).
 */
export function registerSenderGauges(
  registry: Registry,
  repository: Pick<ReportsRepository, 'ambiguousCount' | 'heldByCampaign'>,
  sending: Pick<KillSwitch, 'get'>,
): void {
  gauge(registry, 'outreach_sender_sending_paused', async (g) => g.set((await sending.get()).paused ? 1 : 0));
  gauge(registry, 'outreach_sender_ambiguous_sends', async (g) => g.set(await repository.ambiguousCount()));
  gauge(registry, 'outreach_sender_held_sends', async (g) => {
    const series = campaignSeries(await repository.heldByCampaign());
    g.reset();
    for (const [campaign, n] of series) g.set({ campaign }, n);
  });
}
