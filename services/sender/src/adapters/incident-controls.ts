/**
 * Controls shared by every replica through PostgreSQL (issue #18, migration 1766000000000): the
 * global kill switch, the send rate (global and per recipient domain) and the auto-pause error
 * window. A pod's own memory decides none of them, so scaling 3 → 12 replicas does not multiply the
 * provider rate, and a restart does not forget the errors that were about to pause a campaign.
 */
import type { Pool } from 'pg';

export interface SendingControl {
  readonly paused: boolean;
  readonly reason: string | null;
  readonly changedAt: Date;
  readonly changedBy: string | null;
}

export class KillSwitch {
  constructor(private readonly pool: Pool) {}

  async get(): Promise<SendingControl> {
    const { rows } = await this.pool.query<{
      paused: boolean;
      reason: string | null;
      changed_at: Date;
      changed_by: string | null;
    }>('SELECT paused, reason, changed_at, changed_by FROM sending_control');
    const row = rows[0];
    if (!row) throw new Error('sending_control has no row: the sender schema is not migrated');
    return { paused: row.paused, reason: row.reason, changedAt: row.changed_at, changedBy: row.changed_by };
  }

  /** Sets the switch; returns the state after the change (a repeated call changes nothing but the reason). */
  async set(paused: boolean, reason: string | null, changedBy: string | null): Promise<SendingControl> {
    await this.pool.query(
      `UPDATE sending_control SET paused = $1, reason = $2, changed_by = $3,
         changed_at = CASE WHEN paused = $1 THEN changed_at ELSE now() END`,
      [paused, reason, changedBy],
    );
    return this.get();
  }
}

export interface RateLimits {
  /** Provider calls per second across every replica. */
  readonly globalPerSecond: number;
  readonly globalBurst: number;
  /** Provider calls per second per recipient domain across every replica. */
  readonly domainPerSecond: number;
  readonly domainBurst: number;
}

interface Waiter {
  readonly domain: string;
  readonly resolve: () => void;
  readonly reject: (error: unknown) => void;
}

/**
 * Waiters for a token queue up; one round trip grants tokens to all of them that the global and
 * their domain's bucket allow (the `take_send_tokens` function locks the buckets in key order). The
 * rest wait as long as the database said and ask again. No tokens are taken ahead of need, so none
 * are held by a pod that then stalls: at any moment the sends granted over a window T are at most
 * burst + rate × T, however many replicas ask.
 */
export class SharedRateLimiter {
  private queue: Waiter[] = [];
  private running = false;
  private timer: NodeJS.Timeout | undefined;
  private closed = false;

  constructor(
    private readonly pool: Pool,
    private readonly limits: RateLimits,
  ) {}

  /** Resolves when one send to `domain` may go out. */
  take(domain: string): Promise<void> {
    if (this.closed) return Promise.reject(new Error('rate limiter closed'));
    return new Promise<void>((resolve, reject) => {
      this.queue.push({ domain: domain.toLowerCase(), resolve, reject });
      if (!this.timer) this.schedule(0);
    });
  }

  /** Rejects every waiter (the pipeline releases their claims). */
  close(): void {
    this.closed = true;
    if (this.timer) clearTimeout(this.timer);
    this.timer = undefined;
    for (const waiter of this.queue.splice(0)) waiter.reject(new Error('rate limiter closed'));
  }

  private schedule(ms: number): void {
    this.timer = setTimeout(() => {
      this.timer = undefined;
      void this.flush();
    }, ms);
  }

  private async flush(): Promise<void> {
    if (this.running || this.closed) return;
    this.running = true;
    let retryIn = 0;
    try {
      const waiting = this.queue.splice(0);
      const byDomain = new Map<string, Waiter[]>();
      for (const waiter of waiting) {
        const list = byDomain.get(waiter.domain);
        if (list) list.push(waiter);
        else byDomain.set(waiter.domain, [waiter]);
      }
      const domains = [...byDomain.keys()].sort();
      let rows: Array<{ granted: number; wait_ms: number }>;
      try {
        ({ rows } = await this.pool.query<{ granted: number; wait_ms: number }>(
          'SELECT granted, wait_ms FROM take_send_tokens($1::text[], $2::int[], $3, $4, $5, $6)',
          [
            domains,
            domains.map((d) => byDomain.get(d)?.length ?? 0),
            this.limits.globalPerSecond,
            this.limits.globalBurst,
            this.limits.domainPerSecond,
            this.limits.domainBurst,
          ],
        ));
      } catch (error) {
        for (const waiter of waiting) waiter.reject(error);
        return;
      }
      const left: Waiter[] = [];
      domains.forEach((domain, i) => {
        const list = byDomain.get(domain) ?? [];
        const row = rows[i];
        const granted = row?.granted ?? 0;
        for (const waiter of list.slice(0, granted)) waiter.resolve();
        left.push(...list.slice(granted));
        if (granted < list.length) retryIn = Math.max(retryIn, Math.max(1, row?.wait_ms ?? 1000));
      });
      this.queue.unshift(...left);
    } finally {
      this.running = false;
    }
    if (this.queue.length > 0 && !this.timer && !this.closed) this.schedule(retryIn);
  }
}

export interface ProviderAttempt {
  readonly campaignId: string;
  readonly failed: boolean;
}

/**
 * The auto-pause window, shared: provider outcomes are counted per campaign per second in the
 * database. `record` adds a batch and returns each touched campaign's counts over the window, for
 * the domain's threshold rule to judge. `reset` forgets a campaign's window (after it is paused, so
 * resuming does not pause it again on the errors that paused it).
 */
export class SharedErrorWindow {
  constructor(
    private readonly pool: Pool,
    private readonly windowMs: number,
  ) {}

  async record(
    attempts: readonly ProviderAttempt[],
  ): Promise<Map<string, { readonly attempts: number; readonly failures: number }>> {
    const result = new Map<string, { attempts: number; failures: number }>();
    if (attempts.length === 0) return result;
    const campaigns = attempts.map((a) => a.campaignId);
    await this.pool.query(
      `INSERT INTO provider_outcomes (campaign_id, second, attempts, failures)
       SELECT campaign_id, date_trunc('second', now()), count(*), count(*) FILTER (WHERE failed)
       FROM unnest($1::text[], $2::boolean[]) AS a(campaign_id, failed)
       GROUP BY campaign_id
       ON CONFLICT (campaign_id, second) DO UPDATE
         SET attempts = provider_outcomes.attempts + excluded.attempts,
             failures = provider_outcomes.failures + excluded.failures`,
      [campaigns, attempts.map((a) => a.failed)],
    );
    const { rows } = await this.pool.query<{ campaign_id: string; attempts: string; failures: string }>(
      `WITH gone AS (
         DELETE FROM provider_outcomes WHERE campaign_id = ANY($1::text[])
           AND second < now() - make_interval(secs => $2::double precision / 1000) - interval '1 second'
       )
       SELECT campaign_id, sum(attempts) AS attempts, sum(failures) AS failures
       FROM provider_outcomes
       WHERE campaign_id = ANY($1::text[]) AND second > now() - make_interval(secs => $2::double precision / 1000)
       GROUP BY campaign_id`,
      [[...new Set(campaigns)], this.windowMs],
    );
    for (const row of rows) {
      result.set(row.campaign_id, { attempts: Number(row.attempts), failures: Number(row.failures) });
    }
    return result;
  }

  async reset(campaignId: string): Promise<void> {
    await this.pool.query('DELETE FROM provider_outcomes WHERE campaign_id = $1', [campaignId]);
  }
}
