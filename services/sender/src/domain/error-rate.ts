/**
 * Provider error rate per campaign over a sliding window, for auto-pause. Pure: time comes in.
 * Each campaign keeps its attempts in arrival order with running counts, so recording one is
 * amortized O(1) however many sends the window holds.
 */
export interface ErrorRatePolicy {
  /** Pause when failures / attempts reaches this (0..1). */
  readonly threshold: number;
  /** ...over at least this many attempts... */
  readonly minAttempts: number;
  /** ...within this window. */
  readonly windowMs: number;
}

interface Window {
  readonly at: number[];
  readonly failed: boolean[];
  head: number;
  failures: number;
}

export class ErrorRateWindow {
  private readonly windows = new Map<string, Window>();

  constructor(private readonly policy: ErrorRatePolicy) {}

  /** Records one provider attempt; returns a pause reason when the campaign crossed the threshold. */
  record(campaignId: string, failed: boolean, now: number): string | undefined {
    let window = this.windows.get(campaignId);
    if (!window) {
      window = { at: [], failed: [], head: 0, failures: 0 };
      this.windows.set(campaignId, window);
    }
    while (window.head < window.at.length && now - (window.at[window.head] as number) >= this.policy.windowMs) {
      if (window.failed[window.head]) window.failures--;
      window.head++;
    }
    if (window.head > 1024 && window.head * 2 > window.at.length) {
      window.at.splice(0, window.head);
      window.failed.splice(0, window.head);
      window.head = 0;
    }
    window.at.push(now);
    window.failed.push(failed);
    if (failed) window.failures++;
    const attempts = window.at.length - window.head;
    if (attempts >= this.policy.minAttempts && window.failures / attempts >= this.policy.threshold) {
      this.windows.delete(campaignId);
      return `auto-paused: provider errors on ${window.failures} of the last ${attempts} sends (threshold ${Math.round(this.policy.threshold * 100)}%)`;
    }
    return undefined;
  }
}
