/**
 * Sample-ratio mismatch: Pearson's chi-square of observed assignment counts against the weights.
 * A p-value below 0.001 means the split is not what the weights promise (a bug, a filter, a leak).
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
