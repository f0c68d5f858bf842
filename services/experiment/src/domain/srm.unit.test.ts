/**
 * The report's balance test across weight changes, given/when/then: given periods of constant
 * weights and the assignments made in each, when the report tests them, then this follows.
 */
import { describe, expect, it } from 'vitest';
import { rampSampleRatioMismatch, sampleRatioMismatch, type WeightPeriodCounts } from './srm.js';

const given = (...periods: WeightPeriodCounts[]) => ({ whenTested: () => rampSampleRatioMismatch(periods) });

describe('sample-ratio mismatch per period of constant weights', () => {
  it('given a 10/90 ramp to 50/50 with 1000 assignments each, matching, then no mismatch (the whole-run test would flag it)', () => {
    const ramp = given(
      { weights: { A: 10, B: 90 }, observed: { A: 100, B: 900 } },
      { weights: { A: 50, B: 50 }, observed: { A: 500, B: 500 } },
    );
    const result = ramp.whenTested();
    expect(result.mismatch).toBe(false);
    expect(result.chiSquare).toBe(0);
    expect(result.degreesOfFreedom).toBe(2);
    expect(result.pValue).toBe(1);
    expect(result.expected).toEqual({ A: 600, B: 1_400 });
    expect(result.observed).toEqual({ A: 600, B: 1_400 });
    expect(result.periods.map((p) => p.mismatch)).toEqual([false, false]);
    // What the report computed before: the run's counts against today's 50/50.
    const wholeRun = sampleRatioMismatch({ A: 600, B: 1_400 }, { A: 50, B: 50 });
    expect(wholeRun.mismatch).toBe(true);
    expect(wholeRun.chiSquare).toBeCloseTo(320, 6);
  });

  it('given a ramp with ordinary sampling noise in both periods, then no mismatch', () => {
    const result = given(
      { weights: { A: 10, B: 90 }, observed: { A: 93, B: 907 } },
      { weights: { A: 50, B: 50 }, observed: { A: 521, B: 479 } },
    ).whenTested();
    expect(result.mismatch).toBe(false);
    expect(result.pValue).toBeGreaterThan(0.05);
  });

  it('given a real mismatch within one period, then it is flagged, and that period is the one marked', () => {
    const result = given(
      { weights: { A: 10, B: 90 }, observed: { A: 100, B: 900 } },
      { weights: { A: 50, B: 50 }, observed: { A: 600, B: 400 } },
    ).whenTested();
    expect(result.mismatch).toBe(true);
    expect(result.periods.map((p) => p.mismatch)).toEqual([false, true]);
    expect(result.periods[1]?.chiSquare).toBeCloseTo(40, 6);
  });

  it('given a strong mismatch in one short period among many fair ones, then it is still flagged (per-period test)', () => {
    const fair: WeightPeriodCounts = { weights: { A: 1, B: 1 }, observed: { A: 1_000, B: 1_000 } };
    const result = given(...Array.from({ length: 10 }, () => fair), {
      weights: { A: 1, B: 1 },
      observed: { A: 300, B: 200 },
    }).whenTested();
    // Combined over 11 degrees of freedom the deviation is diluted; the period's own test is not.
    expect(result.pValue).toBeGreaterThan(0.001);
    expect(result.periodThreshold).toBeCloseTo(0.001 / 11, 12);
    expect(result.periods[10]?.pValue).toBeLessThan(result.periodThreshold);
    expect(result.mismatch).toBe(true);
  });

  it('given many periods each a little off the same way, then the combined test flags what no single period shows', () => {
    const result = given(
      ...Array.from({ length: 8 }, () => ({ weights: { A: 1, B: 1 }, observed: { A: 540, B: 460 } })),
    ).whenTested();
    expect(result.periods.every((p) => !p.mismatch)).toBe(true);
    expect(result.chiSquare).toBeCloseTo(8 * 6.4, 6);
    expect(result.mismatch).toBe(true);
  });

  it('given a single period, then the result is the whole-run computation', () => {
    const cases: Array<[Record<string, number>, Record<string, number>]> = [
      [
        { A: 5_000, B: 5_000 },
        { A: 1, B: 1 },
      ],
      [
        { A: 5_200, B: 4_800 },
        { A: 1, B: 1 },
      ],
      [
        { A: 2_000, B: 8_000 },
        { A: 1, B: 4 },
      ],
      [
        { control: 7_950, off: 0, treatment: 2_050 },
        { control: 80, off: 0, treatment: 20 },
      ],
      [
        { A: 310, B: 355, C: 335 },
        { A: 1, B: 1, C: 1 },
      ],
    ];
    for (const [observed, weights] of cases) {
      const old = sampleRatioMismatch(observed, weights);
      expect(rampSampleRatioMismatch([{ weights, observed }]), JSON.stringify(observed)).toMatchObject({
        chiSquare: old.chiSquare,
        degreesOfFreedom: old.degreesOfFreedom,
        pValue: old.pValue,
        mismatch: old.mismatch,
        expected: old.expected,
      });
    }
    expect(rampSampleRatioMismatch([{ weights: { A: 1, B: 1 }, observed: { A: 5_200, B: 4_800 } }]).mismatch).toBe(
      true,
    );
  });

  it('given a period with no assignments, then it neither passes nor fails anything: the others decide', () => {
    const alone = given({ weights: { A: 50, B: 50 }, observed: { A: 600, B: 400 } }).whenTested();
    const withEmpty = given(
      { weights: { A: 10, B: 90 }, observed: {} },
      { weights: { A: 50, B: 50 }, observed: { A: 600, B: 400 } },
    ).whenTested();
    expect(withEmpty.periods[0]).toMatchObject({ tested: true, assigned: 0, pValue: 1, mismatch: false });
    expect(withEmpty).toMatchObject({
      chiSquare: alone.chiSquare,
      degreesOfFreedom: alone.degreesOfFreedom,
      pValue: alone.pValue,
      mismatch: true,
      periodThreshold: 0.001,
    });
    expect(given({ weights: { A: 1, B: 1 }, observed: {} }).whenTested()).toMatchObject({
      pValue: 1,
      mismatch: false,
      degreesOfFreedom: 0,
    });
  });

  it('given a variant at weight 0 in a period, then it expects nothing there, and any assignment there is a mismatch', () => {
    const paused = given(
      { weights: { A: 50, B: 50 }, observed: { A: 500, B: 500 } },
      { weights: { A: 0, B: 100 }, observed: { B: 700 } },
    ).whenTested();
    expect(paused.mismatch).toBe(false);
    expect(paused.periods[1]).toMatchObject({ expected: { B: 700 }, unexpected: {}, mismatch: false });
    expect(paused.expected).toEqual({ A: 500, B: 1_200 });
    // One weighted variant has nothing to test: it adds no degrees of freedom.
    expect(paused.degreesOfFreedom).toBe(1);

    const leaked = given(
      { weights: { A: 50, B: 50 }, observed: { A: 500, B: 500 } },
      { weights: { A: 0, B: 100 }, observed: { A: 3, B: 697 } },
    ).whenTested();
    expect(leaked.periods[1]).toMatchObject({ unexpected: { A: 3 }, mismatch: true });
    expect(leaked.mismatch).toBe(true);
  });

  it('given a variant added in a later period, then assignments to it in an earlier period are a mismatch', () => {
    const result = given(
      { weights: { A: 1, B: 1 }, observed: { A: 500, B: 498, C: 2 } },
      { weights: { A: 1, B: 1, C: 1 }, observed: { A: 300, B: 300, C: 300 } },
    ).whenTested();
    expect(result.periods[0]?.unexpected).toEqual({ C: 2 });
    expect(result.mismatch).toBe(true);
  });

  it('given weights that do not sum to 100, then only their shares matter', () => {
    const observed = { A: 93, B: 907 };
    const small = given({ weights: { A: 1, B: 9 }, observed }).whenTested();
    const percent = given({ weights: { A: 10, B: 90 }, observed }).whenTested();
    expect(small.chiSquare).toBeCloseTo(percent.chiSquare, 12);
    expect(small.pValue).toBeCloseTo(percent.pValue, 12);
    expect(small.expected).toEqual(percent.expected);
  });

  it('given a period whose weights were not recorded, then its assignments are counted as untested and left out', () => {
    const result = given(
      { weights: null, observed: { A: 900, B: 100 } },
      { weights: { A: 50, B: 50 }, observed: { A: 500, B: 500 } },
    ).whenTested();
    expect(result.untested).toBe(1_000);
    expect(result.periods[0]).toMatchObject({ tested: false, assigned: 1_000, mismatch: false });
    expect(result.observed).toEqual({ A: 500, B: 500 });
    expect(result.mismatch).toBe(false);
    expect(result.periodThreshold).toBe(0.001);
  });
});
