import type { Pool } from 'pg';

export interface AuditEntry {
  readonly actor: string;
  readonly via: 'local' | 'proxy';
  readonly action: string;
  readonly target: string;
  readonly reason: string | null;
  readonly outcome: 'done' | 'refused' | 'failed';
  readonly detail: string | null;
}

export interface AuditRow extends AuditEntry {
  readonly id: string;
  readonly at: Date;
}

/** The console's audit table (migrations/): appended to, read newest first, paged by id. */
export class AuditRepository {
  constructor(private readonly pool: Pool) {}

  async record(entry: AuditEntry): Promise<void> {
    await this.pool.query(
      `INSERT INTO audit (actor, via, action, target, reason, outcome, detail) VALUES ($1, $2, $3, $4, $5, $6, $7)`,
      [entry.actor, entry.via, entry.action, entry.target, entry.reason, entry.outcome, entry.detail],
    );
  }

  /**
   * Up to `limit` rows older than `before` (an id), newest first; `next` is the cursor of the page
   * after. Ordered by the column, `audit.id`: a bare `id` would name the text output column, whose
   * order puts 99999 before 100000 (and 9 before 10), and would sort the whole table for it.
   */
  async page(before: string | null, limit: number): Promise<{ rows: AuditRow[]; next: string | null }> {
    const { rows } = await this.pool.query<AuditRow>(
      `SELECT audit.id::text AS id, at, actor, via, action, target, reason, outcome, detail
         FROM audit WHERE ($1::bigint IS NULL OR audit.id < $1::bigint) ORDER BY audit.id DESC LIMIT $2`,
      [before, limit + 1],
    );
    const more = rows.length > limit;
    const page = rows.slice(0, limit);
    return { rows: page, next: more ? (page.at(-1)?.id ?? null) : null };
  }
}
