/**
 * The auto-pause rule: a campaign whose provider failures reach `threshold` of at least
 * `minAttempts` attempts within `windowMs` is paused. Pure: the counts come in. They are kept per
 * campaign per second in PostgreSQL (adapters/incident-controls.ts, SharedErrorWindow), so every
 * replica adds to one window and a restart forgets nothing of it.
 */
export interface ErrorRatePolicy {
  /** Pause when failures / attempts reaches this (0..1). */
  readonly threshold: number;
  /** ...over at least this many attempts... */
  readonly minAttempts: number;
  /** ...within this window. */
  readonly windowMs: number;
}

/** One campaign's provider calls inside the window, counted by every replica. */
export interface WindowCounts {
  readonly attempts: number;
  readonly failures: number;
}

/** The pause reason when `counts` cross the policy's threshold; undefined when they do not. */
export function autoPauseReason(counts: WindowCounts, policy: ErrorRatePolicy): string | undefined {
  const { attempts, failures } = counts;
  if (attempts === 0 || attempts < policy.minAttempts || failures / attempts < policy.threshold) return undefined;
  return `auto-paused: provider errors on ${failures} of the last ${attempts} sends (threshold ${Math.round(policy.threshold * 100)}%)`;
}
