/**
 * Attack round 4: the sign-in queue was shared by every address. A client that kept `concurrent +
 * queue` password checks in flight (16 parallel attempts from 16 addresses, each below its failure
 * limit, whose queue refusals were not counted as failures) made the next operator's sign-in a 429
 * at once, from any address. Each client now holds one place (an IPv6 client by its /64), a refusal
 * counts as its failure, and the default queue has room for that many clients.
 */
import { describe, expect, it } from 'vitest';
import { DEFAULT_LOGIN_LIMITS, LoginLimiter } from './login-limiter.js';

/** Starts `checks` that hang until released; `release` ends them one by one as they start. */
function flood(limiter: LoginLimiter, addresses: readonly string[]) {
  const releases: Array<() => void> = [];
  const slow = () => new Promise<boolean>((resolve) => releases.push(() => resolve(false)));
  const inFlight = addresses.map((address, i) => {
    expect(limiter.admit(address, `nobody${i}`)).toEqual({ ok: true });
    return limiter.check(address, slow);
  });
  return {
    inFlight,
    async release(count: number) {
      // A waiting check starts only when a running one ends.
      for (let i = 0; i < count; i++) {
        while (releases.length === 0) await new Promise((resolve) => setImmediate(resolve));
        releases.shift()?.();
      }
      return Promise.all(inFlight);
    },
  };
}

describe('sign-in throttling under a flood from other addresses', () => {
  it("lets an operator's sign-in from an untouched address through 16 parallel attempts from 16 addresses", async () => {
    const limiter = new LoginLimiter(DEFAULT_LOGIN_LIMITS, () => 0);
    const attack = flood(
      limiter,
      Array.from({ length: 16 }, (_, i) => `198.51.${100 + i}.7`),
    );
    expect(limiter.admit('10.0.0.7', 'ada')).toEqual({ ok: true });
    // Not refused: it waits its turn behind the flood's checks (scrypts of a few tens of ms each).
    const operator = limiter.check('10.0.0.7', async () => true);
    await attack.release(16);
    expect(await operator).toEqual({ value: true });
  });

  it('gives one address, and one IPv6 /64, a single place and counts every refusal against it', async () => {
    const limits = { ...DEFAULT_LOGIN_LIMITS, perAddress: 30, concurrent: 2, queue: 8 };
    const limiter = new LoginLimiter(limits, () => 0);
    const fromOne = Array.from({ length: 16 }, () => '198.51.100.1');
    const fromNet = Array.from({ length: 16 }, (_, i) => `2001:db8:0:7:${i.toString(16)}::1`);
    const attack = flood(limiter, [...fromOne, ...fromNet]);
    const outcomes = await Promise.all(attack.inFlight.filter((_, i) => i % 16 !== 0));
    expect(outcomes.every((o) => 'refused' in o)).toBe(true);
    // 15 refusals each: 15 more and the address (or the /64) is refused before its check.
    for (let i = 0; i < 15; i++) await limiter.check('198.51.100.1', async () => false);
    expect(limiter.admit('198.51.100.1', 'x')).toMatchObject({ ok: false });
    for (let i = 0; i < 15; i++) await limiter.check('2001:db8:0:7:ffff::2', async () => false);
    expect(limiter.admit('2001:db8:0:7::9', 'x')).toMatchObject({ ok: false });
    expect(limiter.admit('2001:db8:0:8::9', 'x')).toEqual({ ok: true });
    // Two places taken, eight free: other clients get theirs.
    const operators = Array.from({ length: 8 }, (_, i) => limiter.check(`10.0.0.${i}`, async () => true));
    await attack.release(2);
    expect(await Promise.all(operators)).toEqual(Array.from({ length: 8 }, () => ({ value: true })));
  });

  it('refuses past a full queue, counting it against the refused address', async () => {
    const limiter = new LoginLimiter({ ...DEFAULT_LOGIN_LIMITS, perAddress: 1, concurrent: 1, queue: 1 }, () => 0);
    const attack = flood(limiter, ['198.51.100.1', '198.51.100.2']);
    expect(await limiter.check('198.51.100.3', async () => true)).toEqual({ refused: 'too many sign-ins at once' });
    expect(limiter.admit('198.51.100.3', 'ada')).toMatchObject({ ok: false });
    await attack.release(2);
    expect(await limiter.check('10.0.0.1', async () => true)).toEqual({ value: true });
  });
});
