/**
 * Controls shared by every replica through PostgreSQL (issue #18, migration 1766000000000): the
 * global kill switch, the send rate (global and per recipient domain) and the auto-pause error
 * window. A pod's own memory decides none of them, so scaling 3 → 12 replicas does not multiply the
 * provider rate, and a restart does not forget the errors that were about to pause a campaign.
 */
import { AppError, withTransaction } from '@outreach/shared';
import type { Pool } from 'pg';
import type { RateLimits } from '../domain/rate-limit.js';
import type { SendsRepository } from './sends-repository.js';

export type { RateLimits } from '../domain/rate-limit.js';

export interface SendingControl {
  readonly paused: boolean;
  readonly reason: string | null;
  readonly changedAt: Date;
  readonly changedBy: string | null;
}

/** A change of the switch: the state after it, with what it did to sends. */
export interface SendingChange extends SendingControl {
  /** Held sends a resume handed back (each goes out once); 0 for a pause. */
  readonly released: number;
  /**
   * After a pause: sends already past the fence, whose provider call may still deliver. When the
   * pause returns, each send that can still go out is `sending`, and no later fence on any replica
   * lets one through (see `set`).
   */
  readonly inFlight: number;
}

/**
 * The global kill switch (`sending_control`, one row). While it is on, the checks and the fence of
 * every replica hold sends like a paused campaign's (domain/send.ts, `holdOf`); turning it off
 * releases, in the same transaction, every held send whose campaign is not paused itself, once.
 */
export class KillSwitch {
  constructor(
    private readonly pool: Pool,
    private readonly sends: Pick<SendsRepository, 'releaseHeld' | 'inFlightCount'>,
    private readonly lockTimeoutMs = 10_000,
  ) {}

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

  /**
   * Sets the switch; returns the state after the change (a repeated call changes nothing but the
   * reason). The checks and the fence read the switch in their own transactions, and a plain read
   * locks its table (ACCESS SHARE) until the transaction ends; the change takes ACCESS EXCLUSIVE
   * first, so it waits for every check and fence that read the old value to commit, and the ones
   * that come later queue behind it (table locks are granted in order) and read the new value. So a
   * pause returns only when the sends that passed the fence are all `sending`, and a resume's release
   * sees every send a check or fence held just before it. A resume releases held sends in the same
   * transaction, so a crash cannot leave the switch off with sends still held by it. A transaction
   * that holds the table for long (an analyst's open session) makes the change fail after
   * `lockTimeoutMs` instead of stalling every fence behind it.
   */
  async set(paused: boolean, reason: string | null, changedBy: string | null): Promise<SendingChange> {
    const released = await withTransaction(this.pool, async (client) => {
      await client.query(`SET LOCAL lock_timeout = ${Math.round(this.lockTimeoutMs)}`);
      try {
        await client.query('LOCK TABLE sending_control IN ACCESS EXCLUSIVE MODE');
      } catch (error) {
        if ((error as { code?: unknown }).code === '55P03')
          throw new AppError('UNAVAILABLE', 'the kill switch is locked by another transaction; try again');
        throw error;
      }
      await client.query(
        `UPDATE sending_control SET paused = $1, reason = $2, changed_by = $3,
           changed_at = CASE WHEN paused = $1 THEN changed_at ELSE now() END`,
        [paused, reason, changedBy],
      );
      return paused ? 0 : this.sends.releaseHeld(client, null);
    });
    const inFlight = paused ? await this.sends.inFlightCount() : 0;
    return { ...(await this.get()), released, inFlight };
  }
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
      if (waiting.length === 0) return;
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
      // Closed while the tokens were being taken: nobody may send any more, granted or not.
      if (this.closed) {
        for (const waiter of waiting) waiter.reject(new Error('rate limiter closed'));
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
