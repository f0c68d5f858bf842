/**
 * Attack round 4: the sign-in queue is shared by every address. A client that keeps `concurrent +
 * queue` password checks in flight (from a handful of addresses, each below its failure limit,
 * whose queue refusals are not counted as failures) makes the next operator's sign-in a 429 at
 * once, from any address. `it.fails` while that holds: make it `it` with the fix (a share of the
 * queue per address, or refusals counted against the address).
 */
import { describe, expect, it } from 'vitest';
import { LoginLimiter } from './login-limiter.js';

const limits = { perAddress: 30, perAddressAndUser: 5, windowMs: 60_000, concurrent: 2, queue: 8 };

describe('sign-in throttling under a flood from other addresses', () => {
  it.fails("lets an operator's sign-in from an untouched address through", async () => {
    const limiter = new LoginLimiter(limits, () => 0);
    const releases: Array<() => void> = [];
    const slow = () => new Promise<boolean>((resolve) => releases.push(() => resolve(false)));
    // Ten checks in flight from ten attacker addresses, none of which has failed yet.
    const flood = Array.from({ length: 10 }, (_, i) => {
      expect(limiter.admit(`198.51.100.${i}`, `nobody${i}`)).toEqual({ ok: true });
      return limiter.check(slow);
    });
    expect(limiter.admit('10.0.0.7', 'ada')).toEqual({ ok: true });
    const operator = await limiter.check(async () => true);
    // Unblock the flood (a waiting check starts only when a running one ends).
    for (let i = 0; i < 10; i++) {
      while (releases.length === 0) await new Promise((resolve) => setImmediate(resolve));
      releases.shift()?.();
    }
    await Promise.all(flood);
    expect(operator).toEqual({ value: true });
  });
});
