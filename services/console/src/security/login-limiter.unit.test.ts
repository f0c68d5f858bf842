import { describe, expect, it } from 'vitest';
import { LoginLimiter } from './login-limiter.js';

const limits = { perAddress: 4, perAddressAndUser: 2, windowMs: 60_000, concurrent: 2, queue: 1 };

describe('sign-in throttling', () => {
  it('backs off an address and user name pair after its failures, until the window ends', () => {
    let now = 0;
    const limiter = new LoginLimiter(limits, () => now);
    expect(limiter.admit('10.0.0.1', 'ada')).toEqual({ ok: true });
    limiter.failed('10.0.0.1', 'ada');
    limiter.failed('10.0.0.1', 'ADA');
    const refused = limiter.admit('10.0.0.1', 'Ada');
    expect(refused).toMatchObject({ ok: false, retryAfterS: 60 });
    // The same user from elsewhere, and another user from here, are not refused.
    expect(limiter.admit('10.0.0.2', 'ada')).toEqual({ ok: true });
    expect(limiter.admit('10.0.0.1', 'bob')).toEqual({ ok: true });
    now = 59_500;
    expect(limiter.admit('10.0.0.1', 'ada')).toMatchObject({ ok: false, retryAfterS: 1 });
    now = 60_000;
    expect(limiter.admit('10.0.0.1', 'ada')).toEqual({ ok: true });
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
    const first = limiter.check(work);
    const second = limiter.check(work);
    const queued = limiter.check(work);
    expect(await limiter.check(work)).toBeUndefined();
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
    expect(await limiter.check(async () => 1)).toEqual({ value: 1 });
  });
});
