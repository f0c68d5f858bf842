import { describe, expect, it } from 'vitest';
import { axisMax, barChart, wilson } from './charts.js';

describe('wilson', () => {
  it('is the textbook interval, inside [0, 1], and the whole range without data', () => {
    const { low, high } = wilson(50, 100);
    expect(low).toBeCloseTo(0.4038, 3);
    expect(high).toBeCloseTo(0.5962, 3);
    expect(wilson(0, 10).low).toBeCloseTo(0, 12);
    expect(wilson(10, 10).high).toBeCloseTo(1, 12);
    expect(wilson(0, 0)).toEqual({ low: 0, high: 1 });
  });
});

describe('barChart', () => {
  it('draws one bar per variant with its interval and the expected share, labels escaped', () => {
    const svg = barChart(
      [
        { label: 'a', value: 0.5, low: 0.4, high: 0.6, expected: 0.5 },
        { label: '<script>alert(1)</script>', value: 0.25 },
      ],
      'Share of assignments',
    ).value;
    expect(svg.match(/<rect /g)).toHaveLength(2);
    expect(svg).toContain('&lt;script&gt;alert(1)&lt;/script&gt;');
    expect(svg).not.toContain('<script>');
    expect(svg).not.toMatch(/style=/);
    expect(svg).toContain('50.0%');
  });
});

describe('reply-rate axis', () => {
  it('ends at the next tenth above every bar and interval, 100% at most and without data', () => {
    expect(axisMax([{ label: 'a', value: 0.03, low: 0.01, high: 0.08 }])).toBeCloseTo(0.1, 12);
    expect(axisMax([{ label: 'a', value: 0.2, low: 0.1, high: 0.3 }])).toBeCloseTo(0.3, 12);
    expect(axisMax([{ label: 'a', value: 0.9, high: 0.97 }])).toBe(1);
    expect(axisMax([{ label: 'a', value: 0 }])).toBe(1);
    expect(axisMax([])).toBe(1);
  });

  it('draws on a shorter axis: a 5% bar on a 10% axis is half the plot, the axis labelled 10%', () => {
    const svg = barChart([{ label: 'a', value: 0.05, low: 0.01, high: 0.1 }], 'Reply rate', { max: 0.1 }).value;
    expect(svg).toMatch(/<rect x="140" y="4" width="180\.0"/);
    expect(svg).toContain('>10%</text>');
    expect(svg).toContain('5.0%');
  });
});
