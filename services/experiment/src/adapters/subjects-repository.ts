/**
 * The experiment service's part of a data subject's export and erasure (ADR 014). An erased
 * candidate's assignments, memberships, exposures, contaminations and replies keep their rows (the
 * experiment's counts and its sticky variants stay true) under a pseudonym the planner made
 * (`erased:<hash under the suppression key>`), never the candidate key again.
 */
import {
  erasedPseudonym,
  erasureStatus,
  exportTables,
  recordErasure,
  withTransaction,
  type SubjectPartEraseAnswer,
  type SubjectPartEraseBody,
  type SubjectPartExportAnswer,
  type SubjectPartExportBody,
  type SubjectTable,
} from '@outreach/shared';
import type { Pool } from 'pg';

const TABLES = ['assignments', 'group_memberships', 'exposure_events', 'contaminations', 'reply_events'] as const;

const EXPORT: readonly SubjectTable[] = TABLES.map((name) => ({
  name,
  sql: `SELECT * FROM ${name} WHERE candidate_key = ANY($1::text[]) ORDER BY candidate_key, ${
    name === 'group_memberships'
      ? 'exclusion_group'
      : name === 'exposure_events' || name === 'reply_events'
        ? 'event_id'
        : 'experiment_id'
  }`,
}));

export class SubjectsRepository {
  constructor(private readonly pool: Pool) {}

  exportPart(body: SubjectPartExportBody): Promise<SubjectPartExportAnswer> {
    return exportTables(this.pool, EXPORT, [body.candidates.map((c) => c.key)], body.limit, body.page);
  }

  erase(body: SubjectPartEraseBody): Promise<SubjectPartEraseAnswer> {
    return withTransaction(this.pool, async (client) => {
      const keys = body.candidates.map((c) => c.key);
      const pseudonyms = body.candidates.map((c) => erasedPseudonym(c.hash));
      const rows: Record<string, number> = {};
      for (const table of TABLES) {
        const result = await client.query(
          `UPDATE ${table} t SET candidate_key = k.pseudonym
           FROM unnest($1::text[], $2::text[]) AS k(key, pseudonym) WHERE t.candidate_key = k.key`,
          [keys, pseudonyms],
        );
        rows[table] = result.rowCount ?? 0;
      }
      const changed = Object.values(rows).reduce((a, b) => a + b, 0);
      const before = await recordErasure(client, [body.subject, ...body.candidates.map((c) => c.hash)], changed > 0);
      return { status: erasureStatus(changed, before), rows, candidateKeys: [] };
    });
  }
}
