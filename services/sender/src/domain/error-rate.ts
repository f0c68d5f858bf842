/**
 * Provider error rate per campaign over a sliding window, for auto-pause. Pure: time comes in.
 * Each campaign keeps its attempts in arrival order with running counts, so recording one is
 * amortized O(1) however many sends the window holds. A campaign with no attempt inside the window
 * is forgotten (swept at most once per window), so a long-lived process holds only the campaigns
 * that sent in the last window, not every campaign it ever saw.
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
  private lastSweep = Number.NEGATIVE_INFINITY;

  constructor(private readonly policy: ErrorRatePolicy) {}

  /** Campaigns currently tracked. */
  get size(): number {
    return this.windows.size;
  }

  /** Records one provider attempt; returns a pause reason when the campaign crossed the threshold. */
  record(campaignId: string, failed: boolean, now: number): string | undefined {
    this.evictIdle(now);
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

  /** Drops campaigns whose newest attempt has left the window; O(campaigns) once per window. */
  private evictIdle(now: number): void {
    if (now - this.lastSweep < this.policy.windowMs) return;
    this.lastSweep = now;
    for (const [campaignId, window] of this.windows) {
      const newest = window.at.at(-1);
      if (newest === undefined || now - newest >= this.policy.windowMs) this.windows.delete(campaignId);
    }
  }
}
