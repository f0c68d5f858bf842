import { describe, expect, it } from 'vitest';
import { ADDRESS_CAMPAIGN, campaignSeries, OTHER_CAMPAIGNS } from './gauges.js';

describe('campaignSeries (the held-sends gauge, served on an unauthenticated /metrics)', () => {
  it('never labels a series with a campaign id that holds an address, however it is spelled', () => {
    // Refused at every ingress since #15; rows from before may still hold one.
    const series = campaignSeries([
      { campaignId: 'ivan@leak.example', n: 2 },
      { campaignId: 'ivan\u200b@leak.example', n: 1 },
      { campaignId: 'ivan\uff20leak.example', n: 1 },
      { campaignId: 'camp-1', n: 3 },
    ]);
    expect(Object.fromEntries(series)).toEqual({ 'camp-1': 3, [ADDRESS_CAMPAIGN]: 4 });
  });

  it('bounds the label set: the campaigns with most held sends by name, the rest summed', () => {
    const rows = Array.from({ length: 120 }, (_, i) => ({ campaignId: `camp-${i}`, n: i + 1 }));
    const series = campaignSeries(rows, 50);
    expect(series.size).toBe(51);
    expect(series.get('camp-119')).toBe(120);
    expect(series.has('camp-69')).toBe(false);
    expect(series.get(OTHER_CAMPAIGNS)).toBe((70 * 71) / 2);
    expect([...series.values()].reduce((a, b) => a + b, 0)).toBe((120 * 121) / 2);
  });
});
