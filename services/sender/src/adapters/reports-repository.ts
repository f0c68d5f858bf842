/**
 * Reports over the sent log and imported history: duplicate deliveries, and the counts the gauges
 * show an operator (ambiguous sends, held sends by campaign). Read-only.
 */
import { emailHash, type EmailHashKey } from '@outreach/shared';
import type { Pool } from 'pg';
import { sqlStatuses } from './send-rows.js';

export interface DuplicateDeliveries {
  readonly campaignId: string;
  readonly step: string;
  readonly kind: 'candidate' | 'address';
  readonly key: string;
  readonly count: number;
  readonly sources: string[];
}

export class ReportsRepository {
  constructor(
    private readonly pool: Pool,
    /** The emailHash key: an address is shown as its hash under it. */
    private readonly hashKey: EmailHashKey,
  ) {}

  /**
   * Pairs of deliveries to the same candidate or the same address within a campaign step: from the
   * sent log (which the constraints keep free of them) and from imported provider history. Grouped
   * by the canonical address, not by the stored hash (rows hashed under an older key, or before
   * keyed hashes, still group); an address is shown as its hash under the current key.
   */
  async duplicates(campaignId: string | null): Promise<DuplicateDeliveries[]> {
    const { rows } = await this.pool.query<DuplicateDeliveries>(
      `WITH delivered AS (
         SELECT campaign_id, step, candidate_key, email_norm, 'sent_log' AS source FROM sends
           WHERE status IN (${sqlStatuses(['sent'])}) AND source = 'live' AND ($1::text IS NULL OR campaign_id = $1)
         UNION ALL
         SELECT campaign_id, step, candidate_key, email_norm, 'provider_history' FROM provider_history
           WHERE $1::text IS NULL OR campaign_id = $1
       )
       SELECT campaign_id AS "campaignId", step, 'address' AS kind, email_norm AS key, count(*)::int AS count,
              array_agg(DISTINCT source) AS sources
       FROM delivered GROUP BY campaign_id, step, email_norm HAVING count(*) > 1
       UNION ALL
       SELECT campaign_id, step, 'candidate', candidate_key, count(*)::int, array_agg(DISTINCT source)
       FROM delivered WHERE candidate_key IS NOT NULL GROUP BY campaign_id, step, candidate_key HAVING count(*) > 1
       ORDER BY 1, 2, 3, 4`,
      [campaignId],
    );
    return rows.map((row) => (row.kind === 'address' ? { ...row, key: emailHash(row.key, this.hashKey) } : row));
  }

  async ambiguousCount(): Promise<number> {
    const { rows } = await this.pool.query<{ n: number }>(
      `SELECT count(*)::int AS n FROM sends WHERE status IN (${sqlStatuses(['ambiguous'])})`,
    );
    return rows[0]?.n ?? 0;
  }

  async heldByCampaign(): Promise<Array<{ campaignId: string; n: number }>> {
    const { rows } = await this.pool.query<{ campaignId: string; n: number }>(
      `SELECT campaign_id AS "campaignId", count(*)::int AS n FROM sends WHERE status IN (${sqlStatuses(['held'])})
       GROUP BY campaign_id`,
    );
    return rows;
  }
}
