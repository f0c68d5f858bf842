/**
 * The planner's own part of a data subject's export and erasure (ADR 014), and the audit of every
 * subject request (`subject_requests`). Scheduled steps and sequences hold the address and the
 * content (`send`, `template`, `follow_ups`); an erasure cancels what is still scheduled or active
 * (reason `erasure`) and keeps each row's slot under pseudonyms only: its send id, campaign and step,
 * `erased:<hash>` for the candidate key and the conversation id, and no content.
 */
import type { KeyObject } from 'node:crypto';
import {
  erasedPseudonym,
  erasureStatus,
  exportTables,
  lockForErasure,
  recordErasure,
  subjectHash,
  withTransaction,
  type ErasureStatus,
  type SubjectPartExportAnswer,
  type SubjectTable,
} from '@outreach/shared';
import type { Pool } from 'pg';

const EXPORT: readonly SubjectTable[] = [
  {
    name: 'scheduled_steps',
    sql: `SELECT * FROM scheduled_steps WHERE candidate_key = ANY($1::text[]) OR send ->> 'emailNorm' = ANY($2::text[])
          ORDER BY campaign_id, step, candidate_key`,
  },
  {
    name: 'sequences',
    sql: `SELECT * FROM sequences WHERE candidate_key = ANY($1::text[]) OR template ->> 'emailNorm' = ANY($2::text[])
          ORDER BY campaign_id, head_step, candidate_key`,
  },
  {
    name: 'request_sends',
    sql: 'SELECT * FROM request_sends WHERE candidate_key = ANY($1::text[]) ORDER BY request_id, ord',
  },
];

export interface AuditRow {
  readonly id: string;
  readonly kind: 'export' | 'erase';
  readonly byAddress: boolean;
  readonly actor: string;
  readonly subjectHash: string;
  readonly stores: Readonly<Record<string, unknown>>;
}

/** A request read from the requests topic, as the erased-request probe needs it. */
export interface ArrivingRequest {
  readonly candidateKey: string;
  readonly emailNorm: string;
  /** When the request was made (its event's occurredAt, ms). */
  readonly occurredAt: number;
}

/**
 * Which of a batch of requests read from the topic were made before an erasure of their person
 * (ADR 014, "a request on its way during the erasure"): their candidate key's or their address's
 * hash under the suppression key is in `subject_erasures`, recorded at or after the request's time.
 * One keyed lookup per batch (primary-key probes). A request made after the latest erasure is a new
 * request (the sender's hashed suppression still stops it unless the address opted back in).
 */
export async function erasedBefore(
  db: { query: (sql: string, params: unknown[]) => Promise<{ rows: unknown[] }> },
  key: KeyObject,
  requests: readonly ArrivingRequest[],
): Promise<Set<number>> {
  if (requests.length === 0) return new Set();
  const { rows } = await db.query(
    `SELECT u.i - 1 AS i FROM unnest($1::text[], $2::text[], $3::float8[]) WITH ORDINALITY AS u(a, c, at, i)
     WHERE EXISTS (SELECT 1 FROM subject_erasures x
                   WHERE x.subject_hash IN (u.a, u.c) AND x.erased_at >= to_timestamp(u.at / 1000.0))`,
    [
      requests.map((r) => subjectHash(key, 'address', r.emailNorm)),
      requests.map((r) => subjectHash(key, 'candidate', r.candidateKey)),
      requests.map((r) => r.occurredAt),
    ],
  );
  return new Set((rows as Array<{ i: string | number }>).map((r) => Number(r.i)));
}

export class SubjectsRepository {
  constructor(
    private readonly pool: Pool,
    private readonly key: KeyObject,
  ) {}

  /** The person's candidate keys and addresses as the planner's own rows know them. */
  async resolve(keys: readonly string[], emails: readonly string[]): Promise<{ keys: string[]; emails: string[] }> {
    const { rows } = await this.pool.query<{ key: string; email: string | null }>(
      `SELECT candidate_key AS key, send ->> 'emailNorm' AS email FROM scheduled_steps
       WHERE candidate_key = ANY($1::text[]) OR send ->> 'emailNorm' = ANY($2::text[])
       UNION SELECT candidate_key, template ->> 'emailNorm' FROM sequences
       WHERE candidate_key = ANY($1::text[]) OR template ->> 'emailNorm' = ANY($2::text[])`,
      [keys, emails],
    );
    const k = new Set(keys);
    const e = new Set(emails);
    for (const row of rows) {
      if (!row.key.startsWith('erased:')) k.add(row.key);
      if (row.email !== null) e.add(row.email);
    }
    return { keys: [...k], emails: [...e] };
  }

  exportPart(
    keys: readonly string[],
    emails: readonly string[],
    limit: number,
    page: number,
  ): Promise<SubjectPartExportAnswer> {
    return exportTables(this.pool, EXPORT, [keys, emails], limit, page);
  }

  async erase(
    subject: string,
    keys: readonly string[],
    emails: readonly string[],
  ): Promise<{ status: ErasureStatus; rows: Record<string, number>; candidateKeys: string[] }> {
    const pseudonym = (kind: 'candidate' | 'conversation', value: string) =>
      erasedPseudonym(subjectHash(this.key, kind, value));
    return withTransaction(this.pool, async (client) => {
      // First, against the intake: a request being planned now is planned first (and erased here),
      // one planned after this commits sees the erasure (outreach-requests.ts).
      await lockForErasure(client);
      // Locked like the scheduler locks what it emits: a step being emitted now is emitted first.
      const steps = await client.query<{
        campaign_id: string;
        candidate_key: string;
        step: string;
        conversation_id: string;
      }>(
        `SELECT campaign_id, candidate_key, step, conversation_id FROM scheduled_steps
         WHERE candidate_key = ANY($1::text[]) OR send ->> 'emailNorm' = ANY($2::text[])
         ORDER BY campaign_id, candidate_key, step FOR UPDATE`,
        [keys, emails],
      );
      const scheduled = await client.query(
        `UPDATE scheduled_steps t SET candidate_key = u.candidate_key, conversation_id = u.conversation_id,
                send = jsonb_build_object('sendId', t.send_id, 'campaignId', t.campaign_id, 'step', t.step),
                status = CASE WHEN t.status = 'scheduled' THEN 'cancelled' ELSE t.status END,
                reason = CASE WHEN t.status = 'scheduled' THEN 'erasure' ELSE t.reason END, updated_at = now()
         FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[])
              AS u(campaign_id, old_key, step, candidate_key, conversation_id)
         WHERE t.campaign_id = u.campaign_id AND t.candidate_key = u.old_key AND t.step = u.step`,
        [
          steps.rows.map((r) => r.campaign_id),
          steps.rows.map((r) => r.candidate_key),
          steps.rows.map((r) => r.step),
          steps.rows.map((r) => pseudonym('candidate', r.candidate_key)),
          steps.rows.map((r) => pseudonym('conversation', r.conversation_id)),
        ],
      );
      const seqs = await client.query<{
        campaign_id: string;
        candidate_key: string;
        head_step: string;
        conversation_id: string;
      }>(
        `SELECT campaign_id, candidate_key, head_step, conversation_id FROM sequences
         WHERE candidate_key = ANY($1::text[]) OR template ->> 'emailNorm' = ANY($2::text[])
         ORDER BY campaign_id, candidate_key, head_step FOR UPDATE`,
        [keys, emails],
      );
      const sequences = await client.query(
        `UPDATE sequences t SET candidate_key = u.candidate_key, conversation_id = u.conversation_id,
                template = '{}'::jsonb, follow_ups = '[]'::jsonb,
                status = CASE WHEN t.status = 'active' THEN 'stopped' ELSE t.status END,
                stop_reason = CASE WHEN t.status = 'active' THEN 'erasure' ELSE t.stop_reason END, updated_at = now()
         FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[])
              AS u(campaign_id, old_key, head_step, candidate_key, conversation_id)
         WHERE t.campaign_id = u.campaign_id AND t.candidate_key = u.old_key AND t.head_step = u.head_step`,
        [
          seqs.rows.map((r) => r.campaign_id),
          seqs.rows.map((r) => r.candidate_key),
          seqs.rows.map((r) => r.head_step),
          seqs.rows.map((r) => pseudonym('candidate', r.candidate_key)),
          seqs.rows.map((r) => pseudonym('conversation', r.conversation_id)),
        ],
      );
      const requestSends = await client.query(
        `UPDATE request_sends t SET candidate_key = k.pseudonym
         FROM unnest($1::text[], $2::text[]) AS k(key, pseudonym) WHERE t.candidate_key = k.key`,
        [keys, keys.map((k) => pseudonym('candidate', k))],
      );
      const rows = {
        scheduled_steps: scheduled.rowCount ?? 0,
        sequences: sequences.rowCount ?? 0,
        request_sends: requestSends.rowCount ?? 0,
      };
      const changed = rows.scheduled_steps + rows.sequences + rows.request_sends;
      const before = await recordErasure(
        client,
        [subject, ...keys.map((k) => subjectHash(this.key, 'candidate', k))],
        changed > 0,
      );
      // The keys found by address too: a request planned after the erasure resolved the person
      // names candidates the experiment and liveness services must be told of.
      const found = [...new Set([...steps.rows, ...seqs.rows].map((r) => r.candidate_key))];
      return {
        status: erasureStatus(changed, before),
        rows,
        candidateKeys: found.filter((k) => !k.startsWith('erased:')),
      };
    });
  }

  async audit(row: AuditRow): Promise<void> {
    await this.pool.query(
      `INSERT INTO subject_requests (id, kind, by_address, actor, subject_hash, stores) VALUES ($1, $2, $3, $4, $5, $6)`,
      [row.id, row.kind, row.byAddress, row.actor, row.subjectHash, JSON.stringify(row.stores)],
    );
  }
}
