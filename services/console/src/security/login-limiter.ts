/**
 * Sign-in throttling for the local users form (POST /login), which the shared rate limiter does not
 * see (the console's routes are public to it). Two things a single client could do otherwise:
 *
 * - **Guess without limit.** Failed sign-ins are counted per client address and per (address, user
 *   name) in a fixed window; past the limit the address (or the pair) is answered 429 with
 *   Retry-After until the window ends. A backoff, not a lockout: nobody else's sign-in is refused,
 *   and a user locked out by someone's guessing from one address is not locked out elsewhere.
 * - **Stall everyone's sign-in.** Each check costs a scrypt on libuv's small thread pool (which DNS
 *   lookups share); checks beyond `concurrent` wait in a queue of `queue`, and past that the answer
 *   is 429 at once, so a flood costs its sender, not the next user.
 */
export interface LoginLimits {
  /** Failed sign-ins per client address per window. */
  readonly perAddress: number;
  /** Failed sign-ins per (client address, user name) per window. */
  readonly perAddressAndUser: number;
  readonly windowMs: number;
  /** Password checks running at once, and waiting. */
  readonly concurrent: number;
  readonly queue: number;
}

export const DEFAULT_LOGIN_LIMITS: LoginLimits = {
  perAddress: 30,
  perAddressAndUser: 5,
  windowMs: 60_000,
  concurrent: 2,
  queue: 8,
};

interface Window {
  count: number;
  resetAt: number;
}

/** What the limiter says of an attempt: go on, or come back after `retryAfterS` seconds. */
export type LoginVerdict =
  { readonly ok: true } | { readonly ok: false; readonly retryAfterS: number; readonly why: string };

export class LoginLimiter {
  private readonly failures = new Map<string, Window>();
  private running = 0;
  private readonly waiting: Array<() => void> = [];

  constructor(
    private readonly limits: LoginLimits = DEFAULT_LOGIN_LIMITS,
    private readonly now: () => number = Date.now,
  ) {}

  /** Whether this address (and this address with this user name) may try now. */
  admit(address: string, user: string): LoginVerdict {
    const at = this.now();
    this.sweep(at);
    for (const [key, limit] of [
      [`a\u0000${address}`, this.limits.perAddress],
      [`u\u0000${address}\u0000${user.toLowerCase()}`, this.limits.perAddressAndUser],
    ] as const) {
      const window = this.failures.get(key);
      if (window && window.resetAt > at && window.count >= limit)
        return {
          ok: false,
          retryAfterS: Math.max(1, Math.ceil((window.resetAt - at) / 1000)),
          why: 'too many failed sign-ins from this address',
        };
    }
    return { ok: true };
  }

  /** Counts a failed sign-in against the address and the (address, user name) pair. */
  failed(address: string, user: string): void {
    const at = this.now();
    for (const key of [`a\u0000${address}`, `u\u0000${address}\u0000${user.toLowerCase()}`]) {
      const window = this.failures.get(key);
      if (window && window.resetAt > at) window.count++;
      else this.failures.set(key, { count: 1, resetAt: at + this.limits.windowMs });
    }
  }

  /**
   * Runs a password check within the concurrency bound; undefined (answer 429) when `concurrent`
   * checks run and `queue` more wait.
   */
  async check<T>(work: () => Promise<T>): Promise<{ value: T } | undefined> {
    if (this.running >= this.limits.concurrent) {
      if (this.waiting.length >= this.limits.queue) return undefined;
      await new Promise<void>((resolve) => this.waiting.push(resolve));
    } else {
      this.running++;
    }
    try {
      return { value: await work() };
    } finally {
      // A waiting check takes this slot over (running stays the same); otherwise the slot frees.
      const next = this.waiting.shift();
      if (next) next();
      else this.running--;
    }
  }

  /** Windows that ended are forgotten (at most once per window's length of calls, cheaply). */
  private sweep(at: number): void {
    if (this.failures.size < 10_000) return;
    for (const [key, window] of this.failures) if (window.resetAt <= at) this.failures.delete(key);
  }
}
