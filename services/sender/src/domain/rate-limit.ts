/**
 * The send rate's settings and the key it is counted by. Pure: the token buckets themselves live in
 * PostgreSQL (adapters/incident-controls.ts, SharedRateLimiter), shared by every replica, so how
 * many replicas run does not change how fast the provider or one receiving domain is mailed.
 */
export interface RateSettings {
  /** SEND_RATE_PER_SECOND: provider calls per second across every replica. */
  readonly ratePerSecond: number;
  /** SEND_RATE_BURST: calls that may go at once after a quiet spell; 0: SEND_CONCURRENCY. */
  readonly burst: number;
  /** SEND_RATE_PER_DOMAIN_PER_SECOND: calls per second to one recipient domain; 0: the global rate. */
  readonly perDomainPerSecond: number;
  /** SEND_RATE_PER_DOMAIN_BURST: calls to one domain at once after a quiet spell; 0: the global burst. */
  readonly perDomainBurst: number;
  /** SEND_CONCURRENCY: the provider calls one replica makes at once. */
  readonly concurrency: number;
}

export interface RateLimits {
  readonly globalPerSecond: number;
  readonly globalBurst: number;
  readonly domainPerSecond: number;
  readonly domainBurst: number;
}

/**
 * The limits from the settings, with their defaults: a burst of one replica's concurrency (each
 * replica can fill its provider calls at once, no more), and a domain limited only by the global
 * rate unless one is set. A burst is at least 1, or nothing would ever be granted.
 */
export function rateLimitsOf(settings: RateSettings): RateLimits {
  const globalBurst = Math.max(1, settings.burst || settings.concurrency);
  const domainPerSecond = settings.perDomainPerSecond || settings.ratePerSecond;
  return {
    globalPerSecond: settings.ratePerSecond,
    globalBurst,
    domainPerSecond,
    domainBurst: Math.max(1, settings.perDomainBurst || globalBurst),
  };
}

/**
 * The recipient domain a send is counted under: the domain of its canonical address (`email_norm`:
 * IDNA to lower-case ASCII), so `Ada@Bücher.example` and `ada@xn--bcher-kva.example` share a bucket.
 */
export function recipientDomain(emailNorm: string): string {
  return emailNorm.slice(emailNorm.lastIndexOf('@') + 1);
}
