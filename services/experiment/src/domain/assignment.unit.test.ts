import { describe, expect, it } from 'vitest';
import { bucketOf, definitionProblems, variantForBucket } from './assignment.js';
import { chiSquarePValue, sampleRatioMismatch } from './srm.js';

describe('assignment', () => {
  const variants = [
    { name: 'A', weight: 1 },
    { name: 'B', weight: 1 },
  ];

  it('is a pure function of (salt, candidate key): the same every time', () => {
    const first = Array.from({ length: 100 }, (_, i) => variantForBucket(variants, bucketOf('salt-1', `cand-${i}`)));
    const second = Array.from({ length: 100 }, (_, i) => variantForBucket(variants, bucketOf('salt-1', `cand-${i}`)));
    expect(second).toEqual(first);
    expect(bucketOf('salt-1', 'x')).toBeGreaterThanOrEqual(0);
    expect(bucketOf('salt-1', 'x')).toBeLessThan(1);
  });

  it('balances sequential ids (cand-1 … cand-10000) because the hash is salted', () => {
    const counts = { A: 0, B: 0 };
    for (let i = 1; i <= 10_000; i++)
      counts[variantForBucket(variants, bucketOf('exp-seq', `cand-${i}`)) as 'A' | 'B']++;
    expect(sampleRatioMismatch(counts, { A: 1, B: 1 }).mismatch).toBe(false);
  });

  it('follows the weights, and never picks a zero-weight variant', () => {
    const weighted = [
      { name: 'control', weight: 80 },
      { name: 'off', weight: 0 },
      { name: 'treatment', weight: 20 },
    ];
    const counts: Record<string, number> = { control: 0, off: 0, treatment: 0 };
    for (let i = 0; i < 20_000; i++) {
      const name = variantForBucket(weighted, bucketOf('w', `c${i}`));
      counts[name] = (counts[name] ?? 0) + 1;
    }
    expect(counts.off).toBe(0);
    expect(sampleRatioMismatch(counts, { control: 80, off: 0, treatment: 20 }).mismatch).toBe(false);
    expect(variantForBucket(weighted, 0.9999999999999999)).toBe('treatment');
  });

  it('gives salted experiments independent splits', () => {
    let same = 0;
    for (let i = 0; i < 2_000; i++) {
      if (
        variantForBucket(variants, bucketOf('exp-1', `c${i}`)) ===
        variantForBucket(variants, bucketOf('exp-2', `c${i}`))
      )
        same++;
    }
    expect(same).toBeGreaterThan(850);
    expect(same).toBeLessThan(1_150);
  });

  it('names every mistake in a definition', () => {
    expect(definitionProblems({ experimentId: 'ok', variants })).toEqual([]);
    const problems = definitionProblems({
      experimentId: 'has space',
      variants: [
        { name: 'A', weight: -1 },
        { name: 'A', weight: 0 },
      ],
    });
    expect(problems.join('\n')).toMatch(/experimentId must be/);
    expect(problems.join('\n')).toMatch(/duplicate variant names: A/);
    expect(problems.join('\n')).toMatch(/variants\[0\]\.weight must be a non-negative integer/);
    expect(problems.join('\n')).toMatch(/at least one variant needs a positive weight/);
    expect(definitionProblems({ experimentId: 'x', variants: [{ name: 'A', weight: 1 }] })).toEqual([
      'an experiment needs at least two variants',
    ]);
  });
});

describe('sample-ratio mismatch', () => {
  it('computes chi-square p-values that match the tables', () => {
    expect(chiSquarePValue(3.841458820694124, 1)).toBeCloseTo(0.05, 6);
    expect(chiSquarePValue(10.827566170662733, 1)).toBeCloseTo(0.001, 6);
    expect(chiSquarePValue(5.991464547107979, 2)).toBeCloseTo(0.05, 6);
    expect(chiSquarePValue(0, 1)).toBe(1);
  });

  it('flags a split far from the weights and accepts a fair one', () => {
    expect(sampleRatioMismatch({ A: 5_000, B: 5_000 }, { A: 1, B: 1 })).toMatchObject({
      chiSquare: 0,
      pValue: 1,
      mismatch: false,
    });
    const skewed = sampleRatioMismatch({ A: 5_200, B: 4_800 }, { A: 1, B: 1 });
    expect(skewed.chiSquare).toBeCloseTo(16, 6);
    expect(skewed.mismatch).toBe(true);
    expect(sampleRatioMismatch({ A: 2_000, B: 8_000 }, { A: 1, B: 4 }).mismatch).toBe(false);
  });
});
