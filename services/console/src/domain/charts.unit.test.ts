import { describe, expect, it } from 'vitest';
import { barChart, wilson } from './charts.js';

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
