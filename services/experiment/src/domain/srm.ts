/**
 * Sample-ratio mismatch: Pearson's chi-square of observed assignment counts against the weights.
 * A p-value below 0.001 means the split is not what the weights promise (a bug, a filter, a leak).
 *
 * Weights change during a test (a ramp from 10/90 to 50/50), and a candidate's arm follows the
 * weights in force when it was assigned, so the whole run's counts tested against today's weights
 * flag every ramp. rampSampleRatioMismatch tests each period of constant weights against its own
 * weights instead, and the periods together against the sum of their expectations.
 */

/** ln Γ(x), Lanczos approximation (g = 7, n = 9). */
function logGamma(x: number): number {
  const c = [
    0.99999999999980993, 676.5203681218851, -1259.1392167224028, 771.32342877765313, -176.61502916214059,
    12.507343278686905, -0.13857109526572012, 9.9843695780195716e-6, 1.5056327351493116e-7,
  ];
  if (x < 0.5) return Math.log(Math.PI / Math.sin(Math.PI * x)) - logGamma(1 - x);
  const y = x - 1;
  let a = c[0] as number;
  const t = y + 7.5;
  for (let i = 1; i < 9; i++) a += (c[i] as number) / (y + i);
  return 0.5 * Math.log(2 * Math.PI) + (y + 0.5) * Math.log(t) - t + Math.log(a);
}

/** Regularized upper incomplete gamma Q(s, x) = Γ(s, x) / Γ(s). */
export function upperRegularizedGamma(s: number, x: number): number {
  if (x <= 0) return 1;
  if (x < s + 1) {
    // Series for P(s, x), then Q = 1 - P.
    let sum = 1 / s;
    let term = sum;
    for (let n = 1; n < 1000; n++) {
      term *= x / (s + n);
      sum += term;
      if (Math.abs(term) < Math.abs(sum) * 1e-15) break;
    }
    return 1 - sum * Math.exp(-x + s * Math.log(x) - logGamma(s));
  }
  // Continued fraction for Q(s, x) (modified Lentz).
  let b = x + 1 - s;
  let c = 1 / 1e-300;
  let d = 1 / b;
  let h = d;
  for (let i = 1; i < 1000; i++) {
    const an = -i * (i - s);
    b += 2;
    d = an * d + b;
    if (Math.abs(d) < 1e-300) d = 1e-300;
    c = b + an / c;
    if (Math.abs(c) < 1e-300) c = 1e-300;
    d = 1 / d;
    const delta = d * c;
    h *= delta;
    if (Math.abs(delta - 1) < 1e-15) break;
  }
  return Math.exp(-x + s * Math.log(x) - logGamma(s)) * h;
}

export function chiSquarePValue(statistic: number, degreesOfFreedom: number): number {
  return upperRegularizedGamma(degreesOfFreedom / 2, statistic / 2);
}

export interface SrmResult {
  readonly chiSquare: number;
  readonly degreesOfFreedom: number;
  readonly pValue: number;
  /** True when p < threshold: the observed split does not match the weights. */
  readonly mismatch: boolean;
  readonly expected: Readonly<Record<string, number>>;
}

export function sampleRatioMismatch(
  observed: Readonly<Record<string, number>>,
  weights: Readonly<Record<string, number>>,
  threshold = 0.001,
): SrmResult {
  const names = Object.keys(weights).filter((name) => (weights[name] ?? 0) > 0);
  const total = names.reduce((sum, name) => sum + (observed[name] ?? 0), 0);
  const weightTotal = names.reduce((sum, name) => sum + (weights[name] ?? 0), 0);
  const expected: Record<string, number> = {};
  let chiSquare = 0;
  for (const name of names) {
    const e = (total * (weights[name] ?? 0)) / weightTotal;
    expected[name] = e;
    if (e > 0) chiSquare += ((observed[name] ?? 0) - e) ** 2 / e;
  }
  const degreesOfFreedom = Math.max(1, names.length - 1);
  const pValue = total === 0 ? 1 : chiSquarePValue(chiSquare, degreesOfFreedom);
  return { chiSquare, degreesOfFreedom, pValue, mismatch: pValue < threshold, expected };
}

/** One period of constant weights and the assignments made under them. */
export interface WeightPeriodCounts {
  /** Weight per variant in force (any non-negative scale: 1/9 is 10/90); null when not recorded. */
  readonly weights: Readonly<Record<string, number>> | null;
  /** Assignments per variant made under these weights. */
  readonly observed: Readonly<Record<string, number>>;
}

export interface PeriodSrm extends SrmResult {
  /** False when the period's weights are not known: its assignments are counted, not tested. */
  readonly tested: boolean;
  readonly assigned: number;
  /**
   * Assignments in a variant the period's weights give nothing (weight 0, or added later): the
   * assignment path never picks one, so any count here is a mismatch whatever the chi-square says.
   */
  readonly unexpected: Readonly<Record<string, number>>;
}

export interface RampSrmResult extends SrmResult {
  readonly periods: readonly PeriodSrm[];
  /** Assignments per variant over the tested periods. */
  readonly observed: Readonly<Record<string, number>>;
  /** Assignments in periods whose weights are not known. */
  readonly untested: number;
  /** Each period's own test runs at threshold / (periods with something to test): Bonferroni. */
  readonly periodThreshold: number;
}

const sum = (values: Iterable<number>) => [...values].reduce((a, b) => a + b, 0);
const positiveNames = (weights: Readonly<Record<string, number>>) =>
  Object.keys(weights).filter((name) => (weights[name] ?? 0) > 0);

/**
 * The report's test across weight changes. Each period is tested against its own weights (so a
 * ramp is not a mismatch), and the periods' chi-squares add up to one statistic whose degrees of
 * freedom add up too (the periods are independent samples), tested against `expected`, the sum of
 * the periods' expected counts: the whole run's expectation, each period weighted by the
 * assignments made in it. `mismatch` is true when the combined test or one period's
 * Bonferroni-corrected test rejects, or when a variant got assignments its weight did not allow;
 * the false-alarm rate is at most twice `threshold`. One period gives sampleRatioMismatch's result.
 */
export function rampSampleRatioMismatch(periods: readonly WeightPeriodCounts[], threshold = 0.001): RampSrmResult {
  // A period informs the test when it has assignments in at least two weighted variants.
  const informative = (p: WeightPeriodCounts): boolean => {
    if (p.weights === null) return false;
    const names = positiveNames(p.weights);
    return names.length > 1 && sum(names.map((name) => p.observed[name] ?? 0)) > 0;
  };
  const tests = periods.filter(informative).length;
  const periodThreshold = threshold / Math.max(1, tests);
  const results: PeriodSrm[] = periods.map((p) => {
    const assigned = sum(Object.values(p.observed));
    if (p.weights === null) {
      return {
        tested: false,
        assigned,
        chiSquare: 0,
        degreesOfFreedom: 0,
        pValue: 1,
        mismatch: false,
        expected: {},
        unexpected: {},
      };
    }
    const weights = p.weights;
    const unexpected = Object.fromEntries(
      Object.entries(p.observed).filter(([name, n]) => n > 0 && !((weights[name] ?? 0) > 0)),
    );
    const own = sampleRatioMismatch(p.observed, weights, periodThreshold);
    return { ...own, mismatch: own.mismatch || Object.keys(unexpected).length > 0, tested: true, assigned, unexpected };
  });

  let chiSquare = 0;
  let degreesOfFreedom = 0;
  const expected: Record<string, number> = {};
  const observed: Record<string, number> = {};
  periods.forEach((p, i) => {
    const result = results[i] as PeriodSrm;
    if (!result.tested) return;
    for (const [name, n] of Object.entries(p.observed)) observed[name] = (observed[name] ?? 0) + n;
    for (const [name, e] of Object.entries(result.expected)) expected[name] = (expected[name] ?? 0) + e;
    if (!informative(p)) return;
    chiSquare += result.chiSquare;
    degreesOfFreedom += result.degreesOfFreedom;
  });
  const pValue = degreesOfFreedom === 0 ? 1 : chiSquarePValue(chiSquare, degreesOfFreedom);
  return {
    chiSquare,
    degreesOfFreedom,
    pValue,
    mismatch: pValue < threshold || results.some((r) => r.mismatch),
    expected,
    observed,
    untested: sum(results.filter((r) => !r.tested).map((r) => r.assigned)),
    periods: results,
    periodThreshold,
  };
}
