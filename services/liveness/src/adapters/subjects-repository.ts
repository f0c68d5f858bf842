/**
 * The liveness service's part of a data subject's export and erasure (ADR 014). Conversations hold
 * message events and serve stall alerts about a person; nothing here backs a guarantee once the
 * person is forgotten, so an erasure deletes their conversations, events and planned steps.
 */
import {
  erasureStatus,
  exportTables,
  lockForErasure,
  recordErasure,
  withTransaction,
  type SubjectPartEraseAnswer,
  type SubjectPartEraseBody,
  type SubjectPartExportAnswer,
  type SubjectPartExportBody,
  type SubjectTable,
} from '@outreach/shared';
import type { Pool } from 'pg';

/** The person's conversations: theirs by candidate key. */
const CONVERSATIONS = 'SELECT conversation_id FROM conversations WHERE candidate_key = ANY($1::text[])';
const EVENTS = `FROM conversation_events
  WHERE conversation_id IN (${CONVERSATIONS}) OR route_candidate_key = ANY($1::text[])`;

const EXPORT: readonly SubjectTable[] = [
  {
    name: 'conversations',
    sql: 'SELECT * FROM conversations WHERE candidate_key = ANY($1::text[]) ORDER BY conversation_id',
  },
  { name: 'conversation_events', sql: `SELECT * ${EVENTS} ORDER BY event_time, event_id` },
  {
    name: 'planned_steps',
    sql: 'SELECT * FROM planned_steps WHERE candidate_key = ANY($1::text[]) ORDER BY campaign_id, step',
  },
];

export class SubjectsRepository {
  constructor(private readonly pool: Pool) {}

  exportPart(body: SubjectPartExportBody): Promise<SubjectPartExportAnswer> {
    return exportTables(this.pool, EXPORT, [body.candidates.map((c) => c.key)], body.limit, body.page);
  }

  erase(body: SubjectPartEraseBody): Promise<SubjectPartEraseAnswer> {
    return withTransaction(this.pool, async (client) => {
      // First, against the projector: a batch being projected now commits first (and is deleted
      // here); one after this commits sees the erasure (workflow/projector.ts).
      await lockForErasure(client);
      const keys = [body.candidates.map((c) => c.key)];
      // Conversations first, locked: the projector's writes to them wait, and see them gone.
      const conversations = await client.query<{ conversation_id: string }>(`${CONVERSATIONS} FOR UPDATE`, keys);
      const ids = conversations.rows.map((r) => r.conversation_id);
      const events = await client.query(
        `DELETE FROM conversation_events
         WHERE conversation_id = ANY($2::text[]) OR route_candidate_key = ANY($1::text[])`,
        [keys[0], ids],
      );
      const deleted = await client.query('DELETE FROM conversations WHERE conversation_id = ANY($1::text[])', [ids]);
      const planned = await client.query('DELETE FROM planned_steps WHERE candidate_key = ANY($1::text[])', keys);
      const rows = {
        conversations: deleted.rowCount ?? 0,
        conversation_events: events.rowCount ?? 0,
        planned_steps: planned.rowCount ?? 0,
      };
      const changed = rows.conversations + rows.conversation_events + rows.planned_steps;
      const before = await recordErasure(client, [body.subject, ...body.candidates.map((c) => c.hash)], changed > 0);
      return { status: erasureStatus(changed, before), rows, candidateKeys: [] };
    });
  }
}
