/**
 * Writes imported provider history (domain/history.ts) in one transaction per import: its
 * `provider_imports` row, every line in `provider_history` (duplicates included, for the report),
 * the first delivery of each (campaign, address, step) as a `sent` row of source `backfill` (so the
 * live path skips it), and the ambiguous live sends the history shows delivered, recorded `sent`
 * through the domain's LookUp transition (SendCommands.resolveFromHistory). Batches are multi-row
 * statements (unnest); the whole import commits or nothing does.
 */
import { withTransaction, type Queryable } from '@outreach/shared';
import { addressCandidateKey, sendIdFor, type EmailHashKey } from '@outreach/contracts';
import type { Pool, PoolClient } from 'pg';
import type { HistoryRow } from '../domain/history.js';
import { sqlStatuses } from './send-rows.js';

/** Records `sent` the ambiguous sends an import's history shows delivered, in its transaction (workflow/send-commands.ts). */
export interface HistoryResolver {
  resolveFromHistory(client: PoolClient, importId: string): Promise<number>;
}

export interface ImportOptions {
  readonly step: string | null;
  readonly campaignId: string | null;
  readonly allowNewSteps: boolean;
}

export interface ImportRecord extends ImportOptions {
  readonly importId: string;
  readonly contentSha256: string;
  readonly lines: number;
  readonly rowsImported: number;
  readonly newSends: number;
  readonly matchedLive: number;
  readonly resolvedAmbiguous: number;
  readonly historyFrom: Date | null;
  readonly historyTo: Date | null;
  readonly importedAt: Date;
}

export interface ImportTotals {
  readonly lines: number;
  readonly rowsImported: number;
  readonly newSends: number;
  readonly matchedLive: number;
  readonly resolvedAmbiguous: number;
}

export interface HistoryDuplicate {
  readonly campaignId: string;
  readonly step: string;
  readonly emailHash: string;
  readonly deliveries: number;
}

/** Thrown inside an import's transaction to roll it back with a refusal the caller reports. */
export class ImportRefused extends Error {
  constructor(readonly problems: readonly string[]) {
    super(`import refused: ${problems.length} problems`);
  }
}

const IMPORT_COLUMNS = `import_id AS "importId", content_sha256 AS "contentSha256", step, campaign_id AS "campaignId",
  allow_new_steps AS "allowNewSteps", lines, rows_imported AS "rowsImported", new_sends AS "newSends",
  matched_live AS "matchedLive", resolved_ambiguous AS "resolvedAmbiguous", history_from AS "historyFrom",
  history_to AS "historyTo", imported_at AS "importedAt"`;

/** One import's writes, inside its transaction. */
export class HistoryImport {
  constructor(
    private readonly client: PoolClient,
    private readonly sends: HistoryResolver,
    readonly importId: string,
    private readonly hashKey: EmailHashKey,
  ) {}

  /**
   * Writes a batch of rows: each to provider_history (its live send noted when its Message-ID names
   * one), and the rows that are no live send's delivery as backfill `sent` rows where their slot is
   * free. Returns the new sent-log entries and the rows matched to a live send.
   */
  async insert(rows: readonly HistoryRow[]): Promise<{ newSends: number; matchedLive: number }> {
    if (rows.length === 0) return { newSends: 0, matchedLive: 0 };
    const matched = await this.client.query<{ line: number; matched: boolean }>(
      `INSERT INTO provider_history (import_id, line, campaign_id, email_norm, email_hash, step, candidate_key,
                                     provider_message_id, sent_at, email_hash_key_id, send_id)
       SELECT $1, q.line, q.campaign_id, q.email_norm, q.email_hash, q.step, q.candidate_key, q.provider_message_id,
              q.sent_at, $11, s.send_id
       FROM unnest($2::int[], $3::text[], $4::text[], $5::text[], $6::text[], $7::text[], $8::text[],
                   $9::timestamptz[], $10::uuid[])
            AS q(line, campaign_id, email_norm, email_hash, step, candidate_key, provider_message_id, sent_at, send_id)
       LEFT JOIN sends s ON s.send_id = q.send_id AND s.source = 'live'
       ON CONFLICT (import_id, line) DO NOTHING
       RETURNING line, send_id IS NOT NULL AS matched`,
      [
        this.importId,
        rows.map((r) => r.line),
        rows.map((r) => r.campaignId),
        rows.map((r) => r.emailNorm),
        rows.map((r) => r.emailHash),
        rows.map((r) => r.step),
        rows.map((r) => r.candidateKey),
        rows.map((r) => r.providerMessageId),
        rows.map((r) => r.sentAt),
        rows.map((r) => r.sendId),
        this.hashKey.id,
      ],
    );
    const live = new Set(matched.rows.filter((r) => r.matched).map((r) => r.line));
    const unmatched = rows.filter((r) => !live.has(r.line));
    // No candidate id: the address stands in, by its keyed hash (never `email:<address>`).
    const keys = unmatched.map((r) => r.candidateKey ?? addressCandidateKey(r.emailNorm, this.hashKey));
    const inserted = await this.client.query(
      `INSERT INTO sends (send_id, campaign_id, candidate_id, candidate_key, email, email_norm, email_hash, step, subject, body,
                          request_id, correlation_id, source, status, provider_message_id, sent_at, claimed_at, attempts, reason,
                          email_hash_key_id)
       SELECT q.send_id, q.campaign_id, q.candidate_key, q.candidate_key, q.email, q.email_norm, q.email_hash, q.step, '', '',
              'backfill:' || $1::text || ':' || q.line, $1::text, 'backfill', ${sqlStatuses(['sent'])}, q.provider_message_id,
              q.sent_at, q.sent_at, 1, 'imported from provider history', $12::text
       FROM unnest($2::uuid[], $3::text[], $4::text[], $5::text[], $6::text[], $7::text[], $8::text[], $9::text[],
                   $10::timestamptz[], $11::int[])
            AS q(send_id, campaign_id, candidate_key, email, email_norm, email_hash, step, provider_message_id, sent_at, line)
       ON CONFLICT DO NOTHING`,
      [
        this.importId,
        unmatched.map((r, i) => sendIdFor(r.campaignId, keys[i] as string, r.step)),
        unmatched.map((r) => r.campaignId),
        keys,
        unmatched.map((r) => r.email),
        unmatched.map((r) => r.emailNorm),
        unmatched.map((r) => r.emailHash),
        unmatched.map((r) => r.step),
        unmatched.map((r) => r.providerMessageId),
        unmatched.map((r) => r.sentAt),
        unmatched.map((r) => r.line),
        this.hashKey.id,
      ],
    );
    return { newSends: inserted.rowCount ?? 0, matchedLive: live.size };
  }

  /** The steps each of `campaigns` has had, as far as the sender knows, before this import. */
  async knownSteps(campaigns: readonly string[]): Promise<Map<string, Set<string>>> {
    const { rows } = await this.client.query<{ campaignId: string; step: string }>(
      `SELECT DISTINCT campaign_id AS "campaignId", step FROM (
         SELECT campaign_id, step FROM sends
           WHERE campaign_id = ANY($1::text[]) AND NOT (source = 'backfill' AND correlation_id = $2::text)
         UNION ALL
         SELECT campaign_id, step FROM skipped_sends WHERE campaign_id = ANY($1::text[])
         UNION ALL
         SELECT campaign_id, step FROM provider_history WHERE campaign_id = ANY($1::text[]) AND import_id <> $2::uuid
       ) known`,
      [campaigns, this.importId],
    );
    const known = new Map<string, Set<string>>();
    for (const { campaignId, step } of rows) known.set(campaignId, (known.get(campaignId) ?? new Set()).add(step));
    return known;
  }

  /** The ambiguous live sends this import shows delivered, recorded sent. */
  async resolveAmbiguous(): Promise<number> {
    return this.sends.resolveFromHistory(this.client, this.importId);
  }

  /** (campaign, step, address) delivered more than once in this import (one provider message id counted once). */
  async duplicates(limit: number): Promise<{ total: number; first: HistoryDuplicate[] }> {
    return historyDuplicates(this.client, this.importId, limit);
  }

  /** Ambiguous live sends attempted before the history's end that it does not show (the blind window). */
  async unmatchedAmbiguousBefore(historyTo: Date): Promise<number> {
    const { rows } = await this.client.query<{ n: number }>(
      `SELECT count(*)::int AS n FROM sends s
       WHERE s.status IN (${sqlStatuses(['ambiguous'])}) AND s.source = 'live'
         AND coalesce(s.attempt_started_at, s.updated_at) <= $2
         AND NOT EXISTS (SELECT 1 FROM provider_history h WHERE h.import_id = $1 AND h.send_id = s.send_id)`,
      [this.importId, historyTo],
    );
    return rows[0]?.n ?? 0;
  }

  async finish(totals: ImportTotals, window: { from: Date | null; to: Date | null }): Promise<ImportRecord> {
    const { rows } = await this.client.query<ImportRecord>(
      `UPDATE provider_imports SET lines = $2, rows_imported = $3, new_sends = $4, matched_live = $5,
              resolved_ambiguous = $6, history_from = $7, history_to = $8
       WHERE import_id = $1 RETURNING ${IMPORT_COLUMNS}`,
      [
        this.importId,
        totals.lines,
        totals.rowsImported,
        totals.newSends,
        totals.matchedLive,
        totals.resolvedAmbiguous,
        window.from,
        window.to,
      ],
    );
    return rows[0] as ImportRecord;
  }
}

async function historyDuplicates(
  client: Queryable,
  importId: string,
  limit: number,
): Promise<{ total: number; first: HistoryDuplicate[] }> {
  const { rows } = await client.query<HistoryDuplicate & { total: number }>(
    `SELECT campaign_id AS "campaignId", step, min(email_hash) AS "emailHash",
            count(DISTINCT coalesce(provider_message_id, 'line:' || line))::int AS deliveries, count(*) OVER ()::int AS total
     FROM provider_history WHERE import_id = $1
     GROUP BY campaign_id, step, email_norm HAVING count(DISTINCT coalesce(provider_message_id, 'line:' || line)) > 1
     ORDER BY deliveries DESC, campaign_id, step LIMIT $2`,
    [importId, limit],
  );
  return { total: rows[0]?.total ?? 0, first: rows.map(({ total: _total, ...d }) => d) };
}

export class HistoryRepository {
  constructor(
    private readonly pool: Pool,
    private readonly sends: HistoryResolver,
    private readonly hashKey: EmailHashKey,
  ) {}

  async findImport(contentSha256: string): Promise<ImportRecord | undefined> {
    const { rows } = await this.pool.query<ImportRecord>(
      `SELECT ${IMPORT_COLUMNS} FROM provider_imports WHERE content_sha256 = $1`,
      [contentSha256],
    );
    return rows[0];
  }

  /**
   * Runs `work` in the import's transaction, after claiming the import's row: `undefined` when the
   * same file's import already exists (committed by another run meanwhile). Throwing ImportRefused
   * rolls everything back.
   */
  async run<T>(
    record: { importId: string; contentSha256: string } & ImportOptions,
    work: (writer: HistoryImport) => Promise<T>,
  ): Promise<T | undefined> {
    return withTransaction(this.pool, async (client) => {
      const claimed = await client.query(
        `INSERT INTO provider_imports (import_id, content_sha256, step, campaign_id, allow_new_steps, lines, rows_imported,
                                       new_sends, matched_live, resolved_ambiguous)
         VALUES ($1, $2, $3, $4, $5, 0, 0, 0, 0, 0) ON CONFLICT DO NOTHING`,
        [record.importId, record.contentSha256, record.step, record.campaignId, record.allowNewSteps],
      );
      if (claimed.rowCount === 0) return undefined;
      return work(new HistoryImport(client, this.sends, record.importId, this.hashKey));
    });
  }

  /** Re-run of a file already imported: settles ambiguous sends its history shows (normally none by now). */
  async resolveAmbiguous(importId: string): Promise<number> {
    return withTransaction(this.pool, (client) => this.sends.resolveFromHistory(client, importId));
  }

  async duplicates(importId: string, limit: number): Promise<{ total: number; first: HistoryDuplicate[] }> {
    return historyDuplicates(this.pool, importId, limit);
  }

  /** Fresh planner statistics after a large import, so the live path's lookups keep their indexes at once. */
  async analyze(): Promise<void> {
    await this.pool.query('ANALYZE sends, provider_history');
  }
}
