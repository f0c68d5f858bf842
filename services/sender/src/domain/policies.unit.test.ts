import { describe, expect, it } from 'vitest';
import { ErrorRateWindow } from './error-rate.js';
import { sendRecorded } from './outcomes.js';
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

describe('sendRecorded', () => {
  const send = {
    sendId: '6f9e3c1e-4b2a-5f0e-9d7c-5a3b1e0f2d4c',
    campaignId: 'c',
    candidateKey: 'k',
    emailHash: 'h',
    step: 's',
    experimentId: null,
    variant: null,
    correlationId: 'corr',
    causationId: null,
  };
  it('derives the event id from the send and the outcome, so recording twice is one event', () => {
    const a = sendRecorded(send, 'sent', { recordedAt: 1 });
    const b = sendRecorded(send, 'sent', { recordedAt: 2 });
    expect(a.eventId).toBe(b.eventId);
    expect(sendRecorded(send, 'held', { recordedAt: 1 }).eventId).not.toBe(a.eventId);
  });
});
