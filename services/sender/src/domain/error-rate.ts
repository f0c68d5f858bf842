/**
 * Provider error rate per campaign over a sliding window, for auto-pause. Pure: time comes in.
 */
export interface ErrorRatePolicy {
  /** Pause when failures / attempts reaches this (0..1). */
  readonly threshold: number;
  /** ...over at least this many attempts... */
  readonly minAttempts: number;
  /** ...within this window. */
  readonly windowMs: number;
}

export class ErrorRateWindow {
  private readonly samples = new Map<string, Array<{ at: number; failed: boolean }>>();

  constructor(private readonly policy: ErrorRatePolicy) {}

  /** Records one provider attempt; returns a pause reason when the campaign crossed the threshold. */
  record(campaignId: string, failed: boolean, now: number): string | undefined {
    const recent = (this.samples.get(campaignId) ?? []).filter((s) => now - s.at < this.policy.windowMs);
    recent.push({ at: now, failed });
    this.samples.set(campaignId, recent);
    const failures = recent.filter((s) => s.failed).length;
    if (recent.length >= this.policy.minAttempts && failures / recent.length >= this.policy.threshold) {
      this.samples.delete(campaignId);
      return `auto-paused: provider errors on ${failures} of the last ${recent.length} sends (threshold ${Math.round(this.policy.threshold * 100)}%)`;
    }
    return undefined;
  }
}
