/**
 * What the API reads of sends: one send, a status page for an operator, the agent's pre-check, and
 * skipped duplicates. Read-only; the state machine's writes are SendsRepository's.
 */
import type { Pool } from 'pg';
import type { SendStatus } from '../domain/send.js';
import type { SendMatch } from '../domain/suppression.js';
import { SEND_COLUMNS, type SendRow } from './send-rows.js';

export interface SkippedSend {
  readonly sendId: string;
  readonly duplicateOf: string;
  readonly reason: string;
  readonly recordedAt: Date;
}

export class SendQueries {
  constructor(private readonly pool: Pool) {}

  async find(sendId: string): Promise<SendRow | undefined> {
    const { rows } = await this.pool.query<SendRow>(`SELECT ${SEND_COLUMNS} FROM sends WHERE send_id = $1`, [sendId]);
    return rows[0];
  }

  /** Sends in one status (ambiguous, held, failed, ...), optionally of one campaign, in send-id pages. */
  async list(filter: {
    status: SendStatus;
    campaignId: string | null;
    after: string | null;
    limit: number;
  }): Promise<SendRow[]> {
    const { rows } = await this.pool.query<SendRow>(
      `SELECT ${SEND_COLUMNS} FROM sends
       WHERE status = $1 AND ($2::text IS NULL OR campaign_id = $2) AND ($3::uuid IS NULL OR send_id > $3)
       ORDER BY send_id LIMIT $4`,
      [filter.status, filter.campaignId, filter.after, filter.limit],
    );
    return rows;
  }

  /** The sends these ids name (feedback's Message-IDs, unsubscribe tokens): campaign and address identity. */
  async named(sendIds: readonly string[]): Promise<Map<string, SendMatch>> {
    if (sendIds.length === 0) return new Map();
    const { rows } = await this.pool.query<SendMatch>(
      `SELECT send_id AS "sendId", campaign_id AS "campaignId", email_norm AS "emailNorm"
       FROM sends WHERE send_id = ANY($1::uuid[])`,
      [[...new Set(sendIds)]],
    );
    return new Map(rows.map((row) => [row.sendId, row]));
  }

  async findSkipped(sendId: string): Promise<SkippedSend | undefined> {
    const { rows } = await this.pool.query<SkippedSend>(
      `SELECT send_id AS "sendId", duplicate_of AS "duplicateOf", reason, recorded_at AS "recordedAt"
       FROM skipped_sends WHERE send_id = $1`,
      [sendId],
    );
    return rows[0];
  }

  /** The agent's check before composing: any send (live or backfilled) for this slot. */
  async check(
    campaignId: string,
    candidateKey: string,
    step: string,
    emailNorm: string | null,
  ): Promise<SendRow | undefined> {
    const { rows } = await this.pool.query<SendRow>(
      `SELECT ${SEND_COLUMNS} FROM sends
       WHERE campaign_id = $1 AND step = $3 AND (candidate_key = $2 OR email_norm = $4)
       ORDER BY claimed_at LIMIT 1`,
      [campaignId, candidateKey, step, emailNorm],
    );
    return rows[0];
  }
}
