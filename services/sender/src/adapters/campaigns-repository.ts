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

export class CampaignsRepository {
  constructor(
    private readonly pool: Pool,
    private readonly sends: Pick<SendsRepository, 'releaseHeld'>,
  ) {}

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
