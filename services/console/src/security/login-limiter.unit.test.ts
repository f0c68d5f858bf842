import { describe, expect, it } from 'vitest';
import { clientOf, LoginLimiter } from './login-limiter.js';

const limits = {
  perAddress: 4,
  perAddressAndUser: 2,
  windowMs: 60_000,
  backoffMs: 1_000,
  maxBackoffMs: 8_000,
  concurrent: 2,
  queue: 1,
};

describe('sign-in throttling', () => {
  it('backs off an address and user name pair after its failures, doubling the wait up to a cap', () => {
    let now = 0;
    const limiter = new LoginLimiter({ ...limits, perAddress: 100 }, () => now);
    expect(limiter.admit('10.0.0.1', 'ada')).toEqual({ ok: true });
    limiter.failed('10.0.0.1', 'ada');
    limiter.failed('10.0.0.1', 'ADA');
    expect(limiter.admit('10.0.0.1', 'Ada')).toMatchObject({ ok: false, retryAfterS: 1 });
    // The same user from elsewhere, and another user from here, are not refused.
    expect(limiter.admit('10.0.0.2', 'ada')).toEqual({ ok: true });
    expect(limiter.admit('10.0.0.1', 'bob')).toEqual({ ok: true });
    now = 1_000;
    expect(limiter.admit('10.0.0.1', 'ada')).toEqual({ ok: true });
    const waits: number[] = [];
    for (let i = 0; i < 5; i++) {
      limiter.failed('10.0.0.1', 'ada');
      const verdict = limiter.admit('10.0.0.1', 'ada');
      if (verdict.ok) throw new Error('admitted during its backoff');
      waits.push(verdict.retryAfterS);
      now += verdict.retryAfterS * 1_000;
    }
    expect(waits).toEqual([2, 4, 8, 8, 8]);
    // A quiet window and it starts over.
    now += 60_000;
    limiter.failed('10.0.0.1', 'ada');
    expect(limiter.admit('10.0.0.1', 'ada')).toEqual({ ok: true });
  });

  it("clears a pair's backoff when that user signs in from that address", () => {
    const limiter = new LoginLimiter({ ...limits, perAddress: 100 }, () => 0);
    for (let i = 0; i < 4; i++) limiter.failed('10.0.0.1', 'ada');
    expect(limiter.admit('10.0.0.1', 'ada')).toMatchObject({ ok: false });
    limiter.succeeded('10.0.0.1', 'Ada');
    expect(limiter.admit('10.0.0.1', 'ada')).toEqual({ ok: true });
  });

  it('groups IPv6 addresses by /64 and reads IPv4-mapped addresses as IPv4', () => {
    expect(clientOf('2001:db8:0:7::1')).toBe('2001:db8:0:7::/64');
    expect(clientOf('2001:0db8:0000:0007:abcd:1:2:3')).toBe('2001:db8:0:7::/64');
    expect(clientOf('::1')).toBe('0:0:0:0::/64');
    expect(clientOf('fe80::1%eth0')).toBe('fe80:0:0:0::/64');
    expect(clientOf('::ffff:10.0.0.1')).toBe('10.0.0.1');
    expect(clientOf('10.0.0.1')).toBe('10.0.0.1');
  });

  it('backs off an address guessing many names', () => {
    const limiter = new LoginLimiter(limits, () => 0);
    for (const name of ['a', 'b', 'c', 'd']) limiter.failed('10.0.0.9', name);
    expect(limiter.admit('10.0.0.9', 'e')).toMatchObject({ ok: false });
    expect(limiter.admit('10.0.0.8', 'e')).toEqual({ ok: true });
  });

  it('runs at most `concurrent` checks, queues `queue`, and refuses the rest at once', async () => {
    const limiter = new LoginLimiter(limits);
    const releases: Array<() => void> = [];
    let running = 0;
    let most = 0;
    const work = () =>
      new Promise<string>((resolve) => {
        running++;
        most = Math.max(most, running);
        releases.push(() => {
          running--;
          resolve('done');
        });
      });
    const first = limiter.check('10.0.1.1', work);
    const second = limiter.check('10.0.1.2', work);
    const queued = limiter.check('10.0.1.3', work);
    expect(await limiter.check('10.0.1.4', work)).toEqual({ refused: 'too many sign-ins at once' });
    expect(running).toBe(2);
    releases.shift()?.();
    await expect(first).resolves.toEqual({ value: 'done' });
    // The queued check took the freed slot.
    await new Promise((resolve) => setImmediate(resolve));
    expect(running).toBe(2);
    while (releases.length) releases.shift()?.();
    await new Promise((resolve) => setImmediate(resolve));
    while (releases.length) releases.shift()?.();
    await expect(second).resolves.toEqual({ value: 'done' });
    await expect(queued).resolves.toEqual({ value: 'done' });
    expect(most).toBe(2);
    // Every slot is free again.
    expect(await limiter.check('10.0.1.5', async () => 1)).toEqual({ value: 1 });
  });
});
