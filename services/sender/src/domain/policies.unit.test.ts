import { describe, expect, it } from 'vitest';
import { autoPauseReason } from './error-rate.js';
import { rateLimitsOf, recipientDomain } from './rate-limit.js';

describe('autoPauseReason', () => {
  const policy = { threshold: 0.5, minAttempts: 4, windowMs: 1_000 };

  it('pauses once the failure share reaches the threshold over enough attempts', () => {
    expect(autoPauseReason({ attempts: 3, failures: 3 }, policy)).toBeUndefined();
    expect(autoPauseReason({ attempts: 4, failures: 1 }, policy)).toBeUndefined();
    expect(autoPauseReason({ attempts: 4, failures: 2 }, policy)).toBe(
      'auto-paused: provider errors on 2 of the last 4 sends (threshold 50%)',
    );
    expect(autoPauseReason({ attempts: 1_000, failures: 999 }, policy)).toMatch(/999 of the last 1000/);
  });

  it('never pauses on an empty window, whatever the policy', () => {
    expect(autoPauseReason({ attempts: 0, failures: 0 }, { ...policy, threshold: 0, minAttempts: 0 })).toBeUndefined();
  });
});

describe('rateLimitsOf', () => {
  const settings = { ratePerSecond: 50, burst: 0, perDomainPerSecond: 0, perDomainBurst: 0, concurrency: 8 };

  it('defaults the burst to one replica’s concurrency and a domain to the global rate and burst', () => {
    expect(rateLimitsOf(settings)).toEqual({
      globalPerSecond: 50,
      globalBurst: 8,
      domainPerSecond: 50,
      domainBurst: 8,
    });
  });

  it('takes what is set', () => {
    expect(rateLimitsOf({ ...settings, burst: 20, perDomainPerSecond: 5, perDomainBurst: 2 })).toEqual({
      globalPerSecond: 50,
      globalBurst: 20,
      domainPerSecond: 5,
      domainBurst: 2,
    });
    expect(rateLimitsOf({ ...settings, burst: 20 }).domainBurst).toBe(20);
  });
});

describe('recipientDomain', () => {
  it('is the canonical address’s domain (the part after the last at-sign)', () => {
    expect(recipientDomain('ada@example.com')).toBe('example.com');
    expect(recipientDomain('"a@b"@xn--bcher-kva.example')).toBe('xn--bcher-kva.example');
  });
});
