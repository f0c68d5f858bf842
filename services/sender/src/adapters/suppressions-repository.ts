/**
 * The suppression list (`sender.suppressions`), by canonical address; the checks read it before every
 * send. Every write that suppresses an address, or changes why, enqueues an `AddressSuppressed` in the
 * same transaction (the outbox), so the topic says exactly what the list did.
 */
import { enqueueEvents, erasedPseudonym, withTransaction, type Queryable } from '@outreach/shared';
import { emailHash, type EmailHashKey } from '@outreach/contracts';
import type { Pool } from 'pg';
import { PERSON_SENDS } from './subjects-repository.js';
import { addressSuppressed, type SuppressionReason, type SuppressionSource } from '../domain/suppression.js';

export interface Suppression {
  readonly reason: string;
  readonly note: string | null;
  readonly source: string;
  readonly createdAt: Date;
}

export interface SuppressionWrite {
  readonly emailNorm: string;
  readonly reason: SuppressionReason;
  readonly source: SuppressionSource;
  readonly note: string | null;
  readonly sendId: string | null;
  readonly campaignId: string | null;
  readonly correlationId: string;
  /**
   * An operator's write replaces an existing entry's reason and note. Any other source leaves an
   * existing entry as it is: the address is suppressed already, and its first reason stays.
   */
  readonly replace: boolean;
}

export class SuppressionsRepository {
  constructor(
    private readonly pool: Pool,
    private readonly topic: string,
    private readonly hashKey: EmailHashKey,
    /** An address's hash under the suppression key (ADR 014), to lift an erased person's suppression. */
    private readonly addressHashOf?: (emailNorm: string) => string,
  ) {}

  /** Suppresses an address; `changed` when the list changed (and an event was enqueued). */
  async suppress(write: SuppressionWrite): Promise<{ readonly changed: boolean }> {
    return withTransaction(this.pool, (client) => this.suppressIn(client, write));
  }

  /** The same, inside a caller's transaction (feedback intake writes its audit row alongside). */
  async suppressIn(client: Queryable, write: SuppressionWrite): Promise<{ readonly changed: boolean }> {
    const { rows } = await client.query<{ at: Date; previous: string | null }>(
      write.replace
        ? `WITH old AS (SELECT reason FROM suppressions WHERE email_norm = $1)
           INSERT INTO suppressions (email_norm, reason, note, source, send_id, campaign_id)
           VALUES ($1, $2, $3, $4, $5, $6)
           ON CONFLICT (email_norm) DO UPDATE
             SET reason = excluded.reason, note = excluded.note, source = excluded.source,
                 send_id = excluded.send_id, campaign_id = excluded.campaign_id
           RETURNING now() AS at, (SELECT reason FROM old) AS previous`
        : `INSERT INTO suppressions (email_norm, reason, note, source, send_id, campaign_id)
           VALUES ($1, $2, $3, $4, $5, $6)
           ON CONFLICT (email_norm) DO NOTHING
           RETURNING now() AS at, NULL::text AS previous`,
      [write.emailNorm, write.reason, write.note, write.source, write.sendId, write.campaignId],
    );
    const row = rows[0];
    // No row: suppressed already (DO NOTHING). A row with the same reason: an operator's note edit.
    if (!row || row.previous === write.reason) return { changed: false };
    const event = addressSuppressed({
      emailHash: emailHash(write.emailNorm, this.hashKey),
      emailHashKeyId: this.hashKey.id,
      reason: write.reason,
      source: write.source,
      campaignId: write.campaignId,
      sendId: write.sendId,
      correlationId: write.correlationId,
      suppressedAt: row.at.getTime(),
    });
    await enqueueEvents(client, [{ topic: this.topic, event }]);
    return { changed: true };
  }

  /**
   * Lifts the address's suppression: the plain entry, and an erased person's hashed one (ADR 014:
   * a person opting back in), with the erasure's record of the address and of the candidate keys its
   * erased sends carry, so a new request for them is claimed as anyone's again. Says what it lifted.
   */
  async unsuppress(emailNorm: string): Promise<{ plain: boolean; hashed: boolean }> {
    return withTransaction(this.pool, async (client) => {
      const plain = await client.query('DELETE FROM suppressions WHERE email_norm = $1', [emailNorm]);
      if (!this.addressHashOf) return { plain: (plain.rowCount ?? 0) > 0, hashed: false };
      const hash = this.addressHashOf(emailNorm);
      const hashed = await client.query('DELETE FROM suppression_hashes WHERE address_hash = $1', [hash]);
      const keys = await client.query<{ key: string }>(
        `SELECT DISTINCT candidate_key AS key ${PERSON_SENDS} AND candidate_key LIKE 'erased:%'`,
        [[], [erasedPseudonym(hash)]],
      );
      await client.query('DELETE FROM subject_erasures WHERE subject_hash = ANY($1::text[])', [
        [hash, ...keys.rows.map((r) => r.key.slice('erased:'.length))],
      ]);
      return { plain: (plain.rowCount ?? 0) > 0, hashed: (hashed.rowCount ?? 0) > 0 };
    });
  }

  async suppression(emailNorm: string): Promise<Suppression | undefined> {
    const { rows } = await this.pool.query<Suppression>(
      'SELECT reason, note, source, created_at AS "createdAt" FROM suppressions WHERE email_norm = $1',
      [emailNorm],
    );
    return rows[0];
  }
}
