/**
 * A token bucket: at most `ratePerSecond` provider calls per second, bursts up to `burst`.
 * Pure arithmetic; the caller supplies the clock and does the waiting.
 */
export class TokenBucket {
  private tokens: number;
  private updatedAt: number;

  constructor(
    private readonly ratePerSecond: number,
    private readonly burst: number,
    now: number,
  ) {
    this.tokens = burst;
    this.updatedAt = now;
  }

  /** Takes a token and returns 0, or returns how many ms until one is available. */
  take(now: number): number {
    this.tokens = Math.min(this.burst, this.tokens + ((now - this.updatedAt) / 1000) * this.ratePerSecond);
    this.updatedAt = now;
    if (this.tokens >= 1) {
      this.tokens -= 1;
      return 0;
    }
    return Math.ceil(((1 - this.tokens) / this.ratePerSecond) * 1000);
  }
}
