import { describe, expect, it } from 'vitest';
import { niceCeiling, OutcomeSeries, outcomesOf, rateChart } from './outcome-series.js';

const at = (s: number) => 1_000_000 + s * 1000;

describe('OutcomeSeries', () => {
  it('turns consecutive counter samples into rates per outcome', () => {
    const series = new OutcomeSeries(10);
    series.add({ at: at(0), process: 'p1', counts: { sent: 10 } });
    series.add({ at: at(10), process: 'p1', counts: { sent: 30, failed: 5 } });
    const [point] = series.rates();
    expect(point).toEqual({ at: at(10), seconds: 10, perSecond: { sent: 2, failed: 0.5 } });
  });

  it('keeps at most its capacity, dropping the oldest', () => {
    const series = new OutcomeSeries(3);
    for (let i = 0; i < 10; i += 1) series.add({ at: at(i), process: 'p', counts: { sent: i * 2 } });
    expect(series.size).toBe(3);
    expect(series.rates().map((p) => p.at)).toEqual([at(8), at(9)]);
    expect(series.rates().every((p) => p.perSecond.sent === 2)).toBe(true);
  });

  it('leaves a gap, never a negative rate or a jump, across a restart or another replica', () => {
    const series = new OutcomeSeries(10);
    series.add({ at: at(0), process: 'p1', counts: { sent: 100 } });
    series.add({ at: at(10), process: 'p2', counts: { sent: 3 } }); // another process
    series.add({ at: at(20), process: 'p2', counts: { sent: 13 } });
    series.add({ at: at(30), process: 'p2', counts: { sent: 1 } }); // same start time, went down
    series.add({ at: at(40), process: 'p2', counts: { sent: 11 } });
    expect(series.rates().map((p) => [p.at, p.perSecond.sent])).toEqual([
      [at(20), 1],
      [at(40), 1],
    ]);
  });

  it('ignores a sample older than the last (a clock step back) and rates since a time', () => {
    const series = new OutcomeSeries(10);
    series.add({ at: at(10), process: 'p', counts: { sent: 0 } });
    series.add({ at: at(5), process: 'p', counts: { sent: 50 } });
    series.add({ at: at(20), process: 'p', counts: { sent: 10 } });
    series.add({ at: at(30), process: 'p', counts: { sent: 20 } });
    expect(series.size).toBe(3);
    expect(series.rates(at(25)).map((p) => p.at)).toEqual([at(30)]);
  });

  it('refuses a capacity that could hold no interval', () => {
    expect(() => new OutcomeSeries(1)).toThrow(RangeError);
  });
});

describe('rateChart', () => {
  it('draws a line per outcome, known outcomes first, labels escaped', () => {
    const points = [
      { at: at(10), seconds: 10, perSecond: { sent: 1, '<b>x</b>': 0.1 } },
      { at: at(20), seconds: 10, perSecond: { sent: 3, failed: 0.2 } },
    ];
    expect(outcomesOf(points)).toEqual(['sent', 'failed', '<b>x</b>']);
    const svg = String(rateChart(points, at(0), at(20), 'Outcomes'));
    expect(svg).toContain('<polyline');
    expect(svg.match(/<polyline/g)).toHaveLength(3);
    expect(svg).toContain('&lt;b&gt;x&lt;/b&gt;');
    expect(svg).not.toContain('<b>');
    expect(svg).not.toMatch(/style=/);
  });

  it('rounds the axis up to 1, 2 or 5 times a power of ten', () => {
    expect(niceCeiling(3)).toBe(5);
    expect(niceCeiling(0.13)).toBe(0.2);
    expect(niceCeiling(10)).toBe(10);
    expect(niceCeiling(11)).toBe(20);
  });
});
