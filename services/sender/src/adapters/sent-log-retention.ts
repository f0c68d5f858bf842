/**
 * The sent log's retention (ADR 014, "Retention you can set"): SENT_LOG_RETENTION_DAYS after a send
 * ended (`sent`, `suppressed`, `failed`) and last changed, its row keeps only what "never two copies"
 * needs and loses the rest. The row is not deleted: its primary key (the send id) and its
 * (campaign, candidate key, step) constraint are what refuse a repeat of the same send, so it stays
 * as a tombstone: send id, campaign, step, status, reason, times, the candidate key (the ATS's opaque
 * candidate id, or the HMAC of one that is an address, ADR 007) and the keyed `email_hash`. The address as written, its
 * canonical form (now `retained:<email_hash>`), the candidate id, the subject and the body are gone.
 *
 * No index serves it (each would cost every send an entry): it walks the table in primary-key order,
 * a page per statement, and changes only the rows of the page that qualify. Rows still in flight
 * (`claimed`, `sending`, `ambiguous`, `held`) and rows an erasure already scrubbed are left alone.
 */
import type { Pool } from 'pg';

/** What the canonical address of a retained row becomes: its keyed hash, never the address. */
export const RETAINED_PREFIX = 'retained:';

export interface SentLogPage {
  /** The last send id of the page (the walk's next cursor), or null when the walk reached the end. */
  readonly next: string | null;
  readonly scrubbed: number;
}

export class SentLogRetention {
  constructor(private readonly pool: Pool) {}

  /** One page of the walk: the `page` sends after `after` (null: from the start), those due scrubbed. */
  async scrubPage(retentionDays: number, after: string | null, page: number): Promise<SentLogPage> {
    const { rows } = await this.pool.query<{ last: string | null; seen: number; scrubbed: number }>(
      `WITH page AS (
         SELECT send_id FROM sends WHERE $2::uuid IS NULL OR send_id > $2::uuid ORDER BY send_id LIMIT $3),
       scrubbed AS (
         UPDATE sends s SET email = '', email_norm = '${RETAINED_PREFIX}' || s.email_hash, candidate_id = '',
                            subject = '', body = ''
         FROM page
         WHERE s.send_id = page.send_id AND s.status IN ('sent', 'suppressed', 'failed')
           AND s.updated_at < now() - make_interval(days => $1)
           AND s.email_norm NOT LIKE '${RETAINED_PREFIX}%' AND s.email_norm NOT LIKE 'erased:%'
         RETURNING 1)
       SELECT (SELECT send_id::text FROM page ORDER BY send_id DESC LIMIT 1) AS last,
              (SELECT count(*) FROM page)::int AS seen, (SELECT count(*) FROM scrubbed)::int AS scrubbed`,
      [retentionDays, after, page],
    );
    const row = rows[0];
    return { next: row && row.seen === page ? row.last : null, scrubbed: row?.scrubbed ?? 0 };
  }
}
