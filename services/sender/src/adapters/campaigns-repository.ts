/**
 * Campaign pause state (`sender.campaigns`) and what an operator sees of a campaign. A pause holds
 * the campaign's sends at the checks or the fence; a resume releases them, in its own transaction,
 * through the send state machine's Resume transition.
 */
import { withTransaction } from '@outreach/shared';
import type { Pool } from 'pg';
import type { SendsRepository } from './sends-repository.js';

export interface CampaignView {
  readonly paused: boolean;
  readonly pausedReason: string | null;
  /** Sends by status, plus `skipped_duplicate` for requests whose slot another send holds. */
  readonly counts: Record<string, number>;
}

/** A campaign as the list shows it: its pause, its sends by status, and its provider error rate. */
export interface CampaignSummary {
  readonly campaignId: string;
  readonly paused: boolean;
  /** The operator's reason, or the auto-pause's (its error rate and window). */
  readonly pausedReason: string | null;
  readonly pausedAt: string | null;
  /** Sends by status (the skipped duplicates are on the campaign's own page). */
  readonly counts: Record<string, number>;
  readonly held: number;
  /** Provider attempts and failures over the auto-pause window (`provider_outcomes`). */
  readonly errors: { readonly attempts: number; readonly failures: number; readonly rate: number | null };
}

/**
 * The campaigns with a send, walked in id order by a loose index scan of `sends (campaign_id,
 * status)` (one index probe per campaign, however many sends each has: no list of campaigns is kept
 * beside the sends), merged with those `campaigns` knows (paused, or resumed, with no send yet).
 */
export const CAMPAIGN_PAGE = `
  SELECT campaign_id FROM (
    (WITH RECURSIVE walk(campaign_id) AS (
       (SELECT campaign_id FROM sends WHERE campaign_id > $1 ORDER BY campaign_id LIMIT 1)
       UNION ALL
       SELECT (SELECT n.campaign_id FROM sends n WHERE n.campaign_id > w.campaign_id ORDER BY n.campaign_id LIMIT 1)
       FROM walk w WHERE w.campaign_id IS NOT NULL)
     SELECT campaign_id FROM walk WHERE campaign_id IS NOT NULL LIMIT $2)
    UNION
    (SELECT campaign_id FROM campaigns WHERE campaign_id > $1 ORDER BY campaign_id LIMIT $2)
  ) c ORDER BY campaign_id LIMIT $2`;

export class CampaignsRepository {
  constructor(
    private readonly pool: Pool,
    private readonly sends: Pick<SendsRepository, 'releaseHeld'>,
    /** The auto-pause window the error rate is taken over (AUTO_PAUSE_WINDOW_MS). */
    private readonly errorWindowMs = 300_000,
  ) {}

  /**
   * A page of campaigns after `after` in id order (`paused`: the paused ones alone, from
   * `campaigns`). Counts go through the (campaign_id, status) index, one campaign at a time.
   */
  async list(after: string, limit: number, pausedOnly: boolean): Promise<CampaignSummary[]> {
    const ids = pausedOnly
      ? await this.pool.query<{ campaign_id: string }>(
          'SELECT campaign_id FROM campaigns WHERE paused AND campaign_id > $1 ORDER BY campaign_id LIMIT $2',
          [after, limit],
        )
      : await this.pool.query<{ campaign_id: string }>(CAMPAIGN_PAGE, [after, limit]);
    const campaignIds = ids.rows.map((r) => r.campaign_id);
    if (campaignIds.length === 0) return [];
    const [states, counts, errors] = await Promise.all([
      this.pool.query<{ campaign_id: string; paused: boolean; paused_reason: string | null; paused_at: Date | null }>(
        'SELECT campaign_id, paused, paused_reason, paused_at FROM campaigns WHERE campaign_id = ANY($1::text[])',
        [campaignIds],
      ),
      this.pool.query<{ campaign_id: string; status: string; n: number }>(
        `SELECT c.campaign_id, s.status, s.n FROM unnest($1::text[]) AS c(campaign_id)
         CROSS JOIN LATERAL (
           SELECT status, count(*)::int AS n FROM sends WHERE sends.campaign_id = c.campaign_id GROUP BY status
         ) s`,
        [campaignIds],
      ),
      this.pool.query<{ campaign_id: string; attempts: string; failures: string }>(
        `SELECT campaign_id, sum(attempts) AS attempts, sum(failures) AS failures FROM provider_outcomes
         WHERE campaign_id = ANY($1::text[]) AND second > now() - make_interval(secs => $2::double precision / 1000)
         GROUP BY campaign_id`,
        [campaignIds, this.errorWindowMs],
      ),
    ]);
    const state = new Map(states.rows.map((r) => [r.campaign_id, r]));
    const error = new Map(errors.rows.map((r) => [r.campaign_id, r]));
    const byCampaign = new Map<string, Record<string, number>>();
    for (const row of counts.rows) {
      const mine = byCampaign.get(row.campaign_id) ?? {};
      mine[row.status] = row.n;
      byCampaign.set(row.campaign_id, mine);
    }
    return campaignIds.map((campaignId) => {
      const s = state.get(campaignId);
      const e = error.get(campaignId);
      const attempts = Number(e?.attempts ?? 0);
      const failures = Number(e?.failures ?? 0);
      const mine = byCampaign.get(campaignId) ?? {};
      return {
        campaignId,
        paused: s?.paused ?? false,
        pausedReason: s?.paused_reason ?? null,
        pausedAt: s?.paused_at ? s.paused_at.toISOString() : null,
        counts: mine,
        held: mine.held ?? 0,
        errors: { attempts, failures, rate: attempts > 0 ? failures / attempts : null },
      };
    });
  }

  async pause(campaignId: string, reason: string): Promise<void> {
    await this.pool.query(
      `INSERT INTO campaigns (campaign_id, paused, paused_reason, paused_at) VALUES ($1, true, $2, now())
       ON CONFLICT (campaign_id) DO UPDATE SET paused = true, paused_reason = $2, paused_at = now(), updated_at = now()`,
      [campaignId, reason],
    );
  }

  /**
   * Pauses a campaign that is not paused yet; false when it already was (another replica's
   * auto-pause, or an operator's), so one crossing of the threshold is one alert.
   */
  async autoPause(campaignId: string, reason: string): Promise<boolean> {
    const { rowCount } = await this.pool.query(
      `INSERT INTO campaigns (campaign_id, paused, paused_reason, paused_at) VALUES ($1, true, $2, now())
       ON CONFLICT (campaign_id) DO UPDATE SET paused = true, paused_reason = $2, paused_at = now(), updated_at = now()
       WHERE NOT campaigns.paused`,
      [campaignId, reason],
    );
    return (rowCount ?? 0) > 0;
  }

  /**
   * Unpauses and hands every held send back as a lapsed claim, so the reconciler sends it once;
   * while the kill switch is on, they stay held until it is turned off.
   */
  async resume(campaignId: string): Promise<number> {
    return withTransaction(this.pool, async (client) => {
      await client.query(
        `INSERT INTO campaigns (campaign_id, paused) VALUES ($1, false)
         ON CONFLICT (campaign_id) DO UPDATE SET paused = false, paused_reason = NULL, paused_at = NULL, updated_at = now()`,
        [campaignId],
      );
      return this.sends.releaseHeld(client, campaignId);
    });
  }

  async campaign(campaignId: string): Promise<CampaignView> {
    const [state, counts, skipped] = await Promise.all([
      this.pool.query<{ paused: boolean; pausedReason: string | null }>(
        'SELECT paused, paused_reason AS "pausedReason" FROM campaigns WHERE campaign_id = $1',
        [campaignId],
      ),
      this.pool.query<{ status: string; n: number }>(
        'SELECT status, count(*)::int AS n FROM sends WHERE campaign_id = $1 GROUP BY status',
        [campaignId],
      ),
      this.pool.query<{ n: number }>('SELECT count(*)::int AS n FROM skipped_sends WHERE campaign_id = $1', [
        campaignId,
      ]),
    ]);
    const result: Record<string, number> = { skipped_duplicate: skipped.rows[0]?.n ?? 0 };
    for (const row of counts.rows) result[row.status] = row.n;
    return {
      paused: state.rows[0]?.paused ?? false,
      pausedReason: state.rows[0]?.pausedReason ?? null,
      counts: result,
    };
  }
}
