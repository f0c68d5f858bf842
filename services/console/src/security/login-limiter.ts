/**
 * Sign-in throttling for the local users form (POST /login), which the shared rate limiter does not
 * see (the console's routes are public to it). A client is its address, an IPv6 address by its /64
 * (one subscriber's network, which hands its hosts any address in it). Two things a client could do
 * otherwise:
 *
 * - **Guess without limit.** Failed sign-ins are counted per client in a fixed window; past the
 *   limit the client is answered 429 with Retry-After until the window ends. Per (client, user
 *   name), past a few failures each further try waits a delay that doubles with each failure up to a
 *   cap, and a successful sign-in of that user from that client clears it: guessing one user's
 *   password stays slow, while a user who shares the client's address with the guesser (every client
 *   behind an ingress does: the console believes no forwarding header) is delayed, not locked out
 *   for the window (docs/operations.md, 12a).
 * - **Stall everyone's sign-in.** Each check costs a scrypt on libuv's small thread pool (which DNS
 *   lookups share); checks beyond `concurrent` wait in a queue of `queue`. Each client holds at most
 *   one place, running or waiting: a second check from it while one is in, or any past a full queue,
 *   is a 429 at once that counts as a failure of that client. Filling the queue takes as many
 *   clients as it has places, each of which is refused soon by its own failures.
 */
export interface LoginLimits {
  /** Failed sign-ins (queue refusals included) per client per window. */
  readonly perAddress: number;
  /** Failed sign-ins per (client, user name) before each further try waits. */
  readonly perAddressAndUser: number;
  readonly windowMs: number;
  /** The wait after `perAddressAndUser` failures of a pair, doubled by each further one, at most `maxBackoffMs`. */
  readonly backoffMs: number;
  readonly maxBackoffMs: number;
  /** Password checks running at once, and waiting. */
  readonly concurrent: number;
  readonly queue: number;
}

export const DEFAULT_LOGIN_LIMITS: LoginLimits = {
  perAddress: 30,
  perAddressAndUser: 5,
  windowMs: 60_000,
  backoffMs: 1_000,
  maxBackoffMs: 30_000,
  concurrent: 2,
  queue: 30,
};

interface Window {
  count: number;
  resetAt: number;
}

interface PairFailures {
  count: number;
  lastAt: number;
}

/** What the limiter says of an attempt: go on, or come back after `retryAfterS` seconds. */
export type LoginVerdict =
  { readonly ok: true } | { readonly ok: false; readonly retryAfterS: number; readonly why: string };

/**
 * The client a socket address stands for: an IPv4 address (IPv4-mapped IPv6 too) as it is, an IPv6
 * address as its /64 (`2001:db8:1:2::/64`).
 */
export function clientOf(address: string): string {
  const mapped = /^::ffff:(\d+\.\d+\.\d+\.\d+)$/i.exec(address);
  if (mapped?.[1]) return mapped[1];
  if (!address.includes(':')) return address;
  const bare = address.split('%', 1)[0] ?? address;
  const [head = '', tail] = bare.split('::', 2);
  const left = head === '' ? [] : head.split(':');
  const right = tail === undefined || tail === '' ? [] : tail.split(':');
  const groups =
    tail === undefined ? left : [...left, ...Array(Math.max(0, 8 - left.length - right.length)).fill('0'), ...right];
  if (groups.length < 4 || groups.slice(0, 4).some((g) => !/^[0-9a-f]{1,4}$/i.test(g))) return address;
  return `${groups
    .slice(0, 4)
    .map((g) => parseInt(g, 16).toString(16))
    .join(':')}::/64`;
}

export class LoginLimiter {
  private readonly failures = new Map<string, Window>();
  private readonly pairs = new Map<string, PairFailures>();
  /** Clients with a check running or waiting. */
  private readonly busy = new Set<string>();
  private running = 0;
  private readonly waiting: Array<() => void> = [];

  constructor(
    private readonly limits: LoginLimits = DEFAULT_LOGIN_LIMITS,
    private readonly now: () => number = Date.now,
  ) {}

  /** Whether this client (and this client with this user name) may try now. */
  admit(address: string, user: string): LoginVerdict {
    const at = this.now();
    this.sweep(at);
    const client = clientOf(address);
    const window = this.failures.get(client);
    if (window && window.resetAt > at && window.count >= this.limits.perAddress)
      return {
        ok: false,
        retryAfterS: Math.max(1, Math.ceil((window.resetAt - at) / 1000)),
        why: 'too many failed sign-ins from this address',
      };
    const pair = this.pair(client, user, at);
    if (pair && pair.count >= this.limits.perAddressAndUser) {
      const until = pair.lastAt + this.backoff(pair.count);
      if (at < until)
        return {
          ok: false,
          retryAfterS: Math.max(1, Math.ceil((until - at) / 1000)),
          why: 'too many failed sign-ins for this user from this address',
        };
    }
    return { ok: true };
  }

  /** Counts a failed sign-in against the client and the (client, user name) pair. */
  failed(address: string, user: string): void {
    const at = this.now();
    const client = clientOf(address);
    this.countAgainst(client, at);
    const key = pairKey(client, user);
    const pair = this.pair(client, user, at);
    this.pairs.set(key, { count: (pair?.count ?? 0) + 1, lastAt: at });
  }

  /** A successful sign-in of `user` from this client: its pair's failures are forgotten. */
  succeeded(address: string, user: string): void {
    this.pairs.delete(pairKey(clientOf(address), user));
  }

  /**
   * Runs a password check within the concurrency bound, one place per client: `refused` (answer 429,
   * counted as a failure of the client) when the client has a check in already, or when `concurrent`
   * checks run and `queue` more wait.
   */
  async check<T>(address: string, work: () => Promise<T>): Promise<{ value: T } | { refused: string }> {
    const client = clientOf(address);
    const full = this.running >= this.limits.concurrent && this.waiting.length >= this.limits.queue;
    if (this.busy.has(client) || full) {
      this.countAgainst(client, this.now());
      return { refused: full ? 'too many sign-ins at once' : 'a sign-in from this address is being checked' };
    }
    this.busy.add(client);
    try {
      if (this.running >= this.limits.concurrent) await new Promise<void>((resolve) => this.waiting.push(resolve));
      else this.running++;
      try {
        return { value: await work() };
      } finally {
        // A waiting check takes this slot over (running stays the same); otherwise the slot frees.
        const next = this.waiting.shift();
        if (next) next();
        else this.running--;
      }
    } finally {
      this.busy.delete(client);
    }
  }

  private countAgainst(client: string, at: number): void {
    const window = this.failures.get(client);
    if (window && window.resetAt > at) window.count++;
    else this.failures.set(client, { count: 1, resetAt: at + this.limits.windowMs });
  }

  /** The pair's failures, unless a window has passed since its last one (then it starts over). */
  private pair(client: string, user: string, at: number): PairFailures | undefined {
    const pair = this.pairs.get(pairKey(client, user));
    return pair && at - pair.lastAt < this.limits.windowMs ? pair : undefined;
  }

  private backoff(count: number): number {
    const doublings = Math.min(30, count - this.limits.perAddressAndUser);
    return Math.min(this.limits.maxBackoffMs, this.limits.backoffMs * 2 ** doublings);
  }

  /** Windows that ended are forgotten (at most once per window's length of calls, cheaply). */
  private sweep(at: number): void {
    if (this.failures.size >= 10_000)
      for (const [key, window] of this.failures) if (window.resetAt <= at) this.failures.delete(key);
    if (this.pairs.size >= 10_000)
      for (const [key, pair] of this.pairs) if (at - pair.lastAt >= this.limits.windowMs) this.pairs.delete(key);
  }
}

const pairKey = (client: string, user: string) => `${client}\u0000${user.toLowerCase()}`;
