import { describe, expect, it } from 'vitest';
import { ErrorRateWindow } from './error-rate.js';
import { TokenBucket } from './rate-limit.js';

describe('ErrorRateWindow', () => {
  const policy = { threshold: 0.5, minAttempts: 4, windowMs: 1_000 };

  it('pauses once the failure share reaches the threshold over enough attempts', () => {
    const window = new ErrorRateWindow(policy);
    expect(window.record('c', true, 0)).toBeUndefined();
    expect(window.record('c', true, 10)).toBeUndefined();
    expect(window.record('c', false, 20)).toBeUndefined();
    expect(window.record('c', false, 30)).toMatch(
      /auto-paused: provider errors on 2 of the last 4 sends \(threshold 50%\)/,
    );
  });

  it('forgets attempts outside the window and keeps campaigns apart', () => {
    const window = new ErrorRateWindow(policy);
    for (let i = 0; i < 3; i++) window.record('old', true, i);
    expect(window.record('old', true, 5_000)).toBeUndefined();
    for (let i = 0; i < 3; i++) expect(window.record('other', false, i)).toBeUndefined();
    expect(window.record('other', true, 4)).toBeUndefined();
  });

  it('counts only the window across many attempts, after compacting what expired', () => {
    const window = new ErrorRateWindow({ threshold: 0.5, minAttempts: 10, windowMs: 1_000 });
    // 5,000 successes over 5 s, then failures: only the last second's 1,000 successes still count.
    for (let t = 0; t < 5_000; t++) expect(window.record('c', false, t)).toBeUndefined();
    let pausedAfter = 0;
    for (let t = 5_000; pausedAfter === 0; t++) if (window.record('c', true, t)) pausedAfter = t - 4_999;
    // At time 4,999 + k the window holds successes from 4,000 + k .. 4,999 (1,000 - k) and k failures.
    expect(pausedAfter).toBe(500);
  });

  it('forgets campaigns that stopped sending: 10,000 one-off campaigns leave only the last window behind', () => {
    const window = new ErrorRateWindow(policy);
    for (let i = 0; i < 10_000; i++) window.record(`campaign-${i}`, false, i * 10);
    // 1,000 ms window, one campaign per 10 ms: at most the last ~100 (plus one sweep's lag) remain.
    expect(window.size).toBeLessThanOrEqual(200);
    window.record('later', false, 1_000_000);
    expect(window.size).toBe(1);
  });

  it('keeps a campaign that is still sending, with its counts, while idle ones go', () => {
    const window = new ErrorRateWindow(policy);
    window.record('busy', true, 0);
    for (let i = 0; i < 50; i++) window.record(`idle-${i}`, false, 500);
    window.record('busy', true, 900);
    window.record('busy', true, 900);
    // The sweep at 1,600 drops the campaigns whose newest attempt is 1,000 ms old or more.
    expect(window.record('busy', true, 1_600)).toBeUndefined();
    expect(window.size).toBe(1);
    expect(window.record('busy', true, 1_700)).toMatch(/provider errors on 4 of the last 4 sends/);
  });
});

describe('TokenBucket', () => {
  it('allows a burst, then one token per 1/rate seconds', () => {
    const bucket = new TokenBucket(10, 2, 0);
    expect(bucket.take(0)).toBe(0);
    expect(bucket.take(0)).toBe(0);
    expect(bucket.take(0)).toBe(100);
    expect(bucket.take(100)).toBe(0);
    expect(bucket.take(150)).toBe(50);
  });
});
