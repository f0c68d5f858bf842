/**
 * The assignment method, documented for analysts (see the README):
 *
 *   bucket = first 53 bits of SHA-256("<experiment salt>:<candidate key>") / 2^53   ∈ [0, 1)
 *   variant = the first variant, in declared order, whose cumulative weight share exceeds bucket
 *
 * The salt is per experiment, so sequential candidate ids do not line up across experiments, and two
 * experiments never split candidates the same way. The result is stored on first assignment; later
 * weight changes only affect candidates assigned afterwards.
 */
import { createHash } from 'node:crypto';

export interface Variant {
  readonly name: string;
  readonly weight: number;
}

/** 53 bits: every integer below 2^53 is exact in a double, so the bucket loses nothing to rounding. */
export function bucketOf(salt: string, candidateKey: string): number {
  const digest = createHash('sha256').update(`${salt}:${candidateKey}`, 'utf8').digest();
  return Number(digest.readBigUInt64BE(0) >> 11n) / 2 ** 53;
}

export function variantForBucket(variants: readonly Variant[], bucket: number): string {
  const total = variants.reduce((sum, v) => sum + v.weight, 0);
  if (total <= 0) throw new Error('variants need a positive total weight');
  let cumulative = 0;
  for (const variant of variants) {
    cumulative += variant.weight / total;
    if (bucket < cumulative) return variant.name;
  }
  // Floating-point rounding can leave the last sliver uncovered: it belongs to the last weighted variant.
  return [...variants].reverse().find((v) => v.weight > 0)?.name as string;
}

export interface ExperimentDefinition {
  readonly experimentId: string;
  readonly variants: readonly Variant[];
  readonly exclusionGroup?: string | null;
}

const NAME = /^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$/;

/** The mistakes an experiment definition can have, as reasons (empty when valid). */
export function definitionProblems(definition: ExperimentDefinition): string[] {
  const problems: string[] = [];
  if (!NAME.test(definition.experimentId))
    problems.push('experimentId must be 1-64 characters of letters, digits, _ . -');
  if (definition.variants.length < 2) problems.push('an experiment needs at least two variants');
  const names = definition.variants.map((v) => v.name);
  const duplicated = names.filter((n, i) => names.indexOf(n) !== i);
  if (duplicated.length > 0) problems.push(`duplicate variant names: ${[...new Set(duplicated)].join(', ')}`);
  // Positions, not names: a name that fails the rule is the caller's value, and reasons never quote one.
  definition.variants.forEach((variant, i) => {
    if (!NAME.test(variant.name))
      problems.push(`variants[${i}].name must be 1-64 characters of letters, digits, _ . -`);
    if (!Number.isInteger(variant.weight) || variant.weight < 0)
      problems.push(`variants[${i}].weight must be a non-negative integer`);
  });
  if (definition.variants.reduce((sum, v) => sum + (v.weight > 0 ? v.weight : 0), 0) <= 0) {
    problems.push('at least one variant needs a positive weight');
  }
  if (
    definition.exclusionGroup !== undefined &&
    definition.exclusionGroup !== null &&
    !NAME.test(definition.exclusionGroup)
  ) {
    problems.push('exclusionGroup must be 1-64 characters of letters, digits, _ . -');
  }
  return problems;
}
