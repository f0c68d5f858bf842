/**
 * Reports over the sent log and imported history: duplicate deliveries, and the counts the gauges
 * show an operator (ambiguous sends, held sends by campaign). Read-only.
 */
import { emailHash, type EmailHashKey } from '@outreach/contracts';
import type { Pool } from 'pg';
import { sqlStatuses } from './send-rows.js';

/** One delivery in a duplicates group: when, and whether the sent log (live) or imported history (backfill) holds it. */
export interface Delivery {
  readonly at: Date;
  readonly source: 'live' | 'backfill';
}

export interface DuplicateDeliveries {
  readonly campaignId: string;
  readonly step: string;
  readonly kind: 'candidate' | 'address';
  readonly key: string;
  readonly count: number;
  readonly sources: Array<Delivery['source']>;
  /** The window the deliveries fall in: the first and the last, and the time between them. */
  readonly firstAt: Date;
  readonly lastAt: Date;
  readonly windowMs: number;
  /** Each delivery, in time order. */
  readonly deliveries: Delivery[];
}

export class ReportsRepository {
  constructor(
    private readonly pool: Pool,
    /** The emailHash key: an address is shown as its hash under it. */
    private readonly hashKey: EmailHashKey,
  ) {}

  /**
   * Deliveries to the same candidate or the same address within a campaign step: from the sent log
   * (which the constraints keep free of them) and from imported provider history. Each delivery is
   * counted once: a history row that carries a live send's Message-ID is that send's delivery, and
   * one provider message id in several imports (overlapping exports) is one delivery. Grouped by
   * the canonical address, not by the stored hash (rows hashed under an older key, or before keyed
   * hashes, still group); an address is shown as its hash under the current key.
   */
  async duplicates(campaignId: string | null): Promise<DuplicateDeliveries[]> {
    const { rows } = await this.pool.query<
      Omit<DuplicateDeliveries, 'deliveries' | 'windowMs'> & {
        deliveries: Array<{ at: string; source: Delivery['source'] }>;
      }
    >(
      `WITH live AS (
         SELECT campaign_id, step, candidate_key, email_norm, 'live' AS source, sent_at AS at FROM sends
           WHERE status IN (${sqlStatuses(['sent'])}) AND source = 'live' AND ($1::text IS NULL OR campaign_id = $1)
       ), history AS (
         SELECT DISTINCT ON (coalesce(h.provider_message_id, h.import_id::text || ':' || h.line))
                h.campaign_id, h.step, h.candidate_key, h.email_norm, 'backfill' AS source, h.sent_at AS at
         FROM provider_history h
         WHERE ($1::text IS NULL OR h.campaign_id = $1)
           AND NOT EXISTS (SELECT 1 FROM sends s WHERE s.send_id = h.send_id AND s.source = 'live'
                             AND s.status IN (${sqlStatuses(['sent'])}))
         ORDER BY coalesce(h.provider_message_id, h.import_id::text || ':' || h.line), h.sent_at
       ), delivered AS (SELECT * FROM live UNION ALL SELECT * FROM history)
       SELECT campaign_id AS "campaignId", step, 'address' AS kind, email_norm AS key, count(*)::int AS count,
              array_agg(DISTINCT source ORDER BY source) AS sources, min(at) AS "firstAt", max(at) AS "lastAt",
              json_agg(json_build_object('at', at, 'source', source) ORDER BY at, source) AS deliveries
       FROM delivered GROUP BY campaign_id, step, email_norm HAVING count(*) > 1
       UNION ALL
       SELECT campaign_id, step, 'candidate', candidate_key, count(*)::int, array_agg(DISTINCT source ORDER BY source),
              min(at), max(at), json_agg(json_build_object('at', at, 'source', source) ORDER BY at, source)
       FROM delivered WHERE candidate_key IS NOT NULL GROUP BY campaign_id, step, candidate_key HAVING count(*) > 1
       ORDER BY 1, 2, 3, 4`,
      [campaignId],
    );
    return rows.map((row) => ({
      ...row,
      key: row.kind === 'address' ? emailHash(row.key, this.hashKey) : row.key,
      windowMs: row.lastAt.getTime() - row.firstAt.getTime(),
      deliveries: row.deliveries.map((d) => ({ at: new Date(d.at), source: d.source })),
    }));
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
