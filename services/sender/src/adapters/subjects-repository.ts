/**
 * The sender's part of a data subject's export and erasure (ADR 014).
 *
 * Erasure, in one transaction: the person's addresses are suppressed as keyed hashes first
 * (`suppression_hashes`, under the suppression key), their plain suppressions deleted; then their
 * sends are locked in send-id order, like any transition takes a send's row lock, so an erasure
 * waits for a fence or an outcome in progress and they wait for it. A claim not yet fenced ends
 * `suppressed` (reason `erasure`, its SendRecorded published) and its token is gone, so its worker
 * can no longer fence it; a send already past its fence keeps its status and token: it goes or not,
 * exactly once, as the fence decided. Every row then loses the address and the content (address,
 * canonical address, candidate id, subject, body) and keeps pseudonymous keys only: the send id,
 * campaign, step and status (so "never two copies" still holds for the slot: the send id is the
 * same for the same candidate, campaign and step), the keyed emailHash, and `erased:<hash>` where a
 * candidate key, an address or a conversation id was (hashes under the suppression key).
 */
import type { KeyObject } from 'node:crypto';
import {
  enqueueEvents,
  erasedPseudonym,
  erasureStatus,
  exportTables,
  recordErasure,
  subjectHash,
  withTransaction,
  type OutgoingEvent,
  type SubjectPartEraseAnswer,
  type SubjectPartEraseBody,
  type SubjectPartExportAnswer,
  type SubjectPartExportBody,
  type SubjectTable,
} from '@outreach/shared';
import { emailHash, type EmailHashKey } from '@outreach/contracts';
import type { Pool, PoolClient } from 'pg';
import { sendRecorded } from '../domain/send.js';
import { sendColumns, sqlStatuses, type SendRow } from './send-rows.js';

/**
 * The person's sends: by candidate key ($1) or canonical address ($2). `sends` has no index by either
 * alone, on purpose: each would cost every send an index entry at its claim and at each of its two
 * status changes (the bench's hottest table), for a request that comes rarely. Its two unique keys
 * lead with the campaign, so the campaigns are walked through the index (one probe each, a loose
 * index scan) and each is probed by candidate key and by address: campaigns × 3 index probes.
 */
export const PERSON_SENDS = `FROM sends WHERE send_id IN (
  WITH RECURSIVE campaigns(campaign_id) AS (
    (SELECT campaign_id FROM sends ORDER BY campaign_id LIMIT 1)
    UNION ALL
    SELECT (SELECT n.campaign_id FROM sends n WHERE n.campaign_id > c.campaign_id ORDER BY n.campaign_id LIMIT 1)
    FROM campaigns c WHERE c.campaign_id IS NOT NULL)
  SELECT p.send_id FROM campaigns c CROSS JOIN LATERAL (
    SELECT send_id FROM sends WHERE campaign_id = c.campaign_id AND candidate_key = ANY($1::text[])
    UNION
    SELECT send_id FROM sends WHERE campaign_id = c.campaign_id AND email_norm = ANY($2::text[])) p
  WHERE c.campaign_id IS NOT NULL)`;

const EXPORT: readonly SubjectTable[] = [
  { name: 'sends', sql: `SELECT * ${PERSON_SENDS} ORDER BY send_id` },
  {
    name: 'skipped_sends',
    sql: `SELECT * FROM skipped_sends WHERE candidate_key = ANY($1::text[]) OR email_hash = ANY($3::text[])
          ORDER BY send_id`,
  },
  {
    name: 'suppressions',
    sql: `SELECT email_norm, reason, note, source, send_id, campaign_id, created_at FROM suppressions
          WHERE email_norm = ANY($2::text[]) ORDER BY email_norm`,
  },
  {
    name: 'suppression_hashes',
    sql: 'SELECT * FROM suppression_hashes WHERE address_hash = ANY($4::text[]) ORDER BY address_hash',
  },
  {
    name: 'provider_history',
    sql: `SELECT * FROM provider_history WHERE email_norm = ANY($2::text[]) OR candidate_key = ANY($1::text[])
          ORDER BY id`,
  },
  {
    name: 'feedback_events',
    sql: 'SELECT * FROM feedback_events WHERE email_hash = ANY($3::text[]) ORDER BY received_at, event_id',
  },
  {
    name: 'soft_bounced_sends',
    sql: `SELECT * FROM soft_bounced_sends WHERE send_id IN (SELECT send_id ${PERSON_SENDS}) ORDER BY send_id`,
  },
  { name: 'exposures', sql: 'SELECT * FROM exposures WHERE candidate_key = ANY($1::text[]) ORDER BY experiment_id' },
];

const CLAIMED = sqlStatuses(['claimed']);

interface FoundSend {
  readonly sendId: string;
  readonly candidateKey: string;
  readonly emailNorm: string;
  readonly conversationId: string | null;
  readonly status: string;
}

export class SubjectsRepository {
  constructor(
    private readonly pool: Pool,
    private readonly hashKey: EmailHashKey,
    private readonly suppressionKey: KeyObject | undefined,
    private readonly sendRecordedTopic: string,
  ) {}

  /** Without a suppression key nothing can be erased (nor an export's hashed suppressions read). */
  get configured(): boolean {
    return this.suppressionKey !== undefined;
  }

  private hash(kind: 'address' | 'candidate' | 'conversation', value: string): string {
    if (!this.suppressionKey) throw new Error('no suppression key');
    return subjectHash(this.suppressionKey, kind, value);
  }

  /**
   * The backfill's rebuild filter (ADR 014): the rows of a provider-history batch that belong to an
   * erased person, by the address's hash (its kept objection, or an erasure's record) or the
   * candidate key's; one keyed lookup per batch. Without a suppression key, none.
   */
  async erasedRows<R extends { readonly emailNorm: string; readonly candidateKey: string | null }>(
    rows: readonly R[],
  ): Promise<Set<R>> {
    if (!this.suppressionKey || rows.length === 0) return new Set();
    const hashed = rows.map((row) => ({
      row,
      address: this.hash('address', row.emailNorm),
      candidate: row.candidateKey === null ? null : this.hash('candidate', row.candidateKey),
    }));
    const all = [...new Set(hashed.flatMap((h) => (h.candidate === null ? [h.address] : [h.address, h.candidate])))];
    const { rows: found } = await this.pool.query<{ hash: string }>(
      `SELECT address_hash AS hash FROM suppression_hashes WHERE address_hash = ANY($1::text[])
       UNION SELECT subject_hash FROM subject_erasures WHERE subject_hash = ANY($1::text[])`,
      [all],
    );
    const erased = new Set(found.map((f) => f.hash));
    return new Set(
      hashed
        .filter((h) => erased.has(h.address) || (h.candidate !== null && erased.has(h.candidate)))
        .map((h) => h.row),
    );
  }

  exportPart(body: SubjectPartExportBody): Promise<SubjectPartExportAnswer> {
    const emails = body.addresses.map((a) => a.email);
    return exportTables(
      this.pool,
      EXPORT,
      [
        body.candidates.map((c) => c.key),
        emails,
        emails.map((e) => emailHash(e, this.hashKey)),
        body.addresses.map((a) => a.hash),
      ],
      body.limit,
      body.page,
    );
  }

  erase(body: SubjectPartEraseBody): Promise<SubjectPartEraseAnswer> {
    return withTransaction(this.pool, (client) => this.eraseIn(client, body));
  }

  private async eraseIn(client: PoolClient, body: SubjectPartEraseBody): Promise<SubjectPartEraseAnswer> {
    // The person's keys, closed over one hop: an address's sends name candidate keys, a candidate's
    // sends name addresses (the planner asked by one of them).
    const keys = new Set(body.candidates.map((c) => c.key));
    const emails = new Set(body.addresses.map((a) => a.email));
    const found = await client.query<{ candidateKey: string; emailNorm: string }>(
      `SELECT DISTINCT candidate_key AS "candidateKey", email_norm AS "emailNorm" ${PERSON_SENDS}`,
      [[...keys], [...emails]],
    );
    for (const row of found.rows) {
      if (!row.candidateKey.startsWith('erased:')) keys.add(row.candidateKey);
      if (!row.emailNorm.startsWith('erased:')) emails.add(row.emailNorm);
    }
    const keyList = [...keys];
    const emailList = [...emails];
    const addressHashes = emailList.map((e) => this.hash('address', e));
    const rows: Record<string, number> = {};

    // 1. The objection, kept as a keyed hash, before any send is looked at: whatever fences after
    // this commits is stopped by the gate's keyed lookup.
    await client.query(
      `INSERT INTO suppression_hashes (address_hash, reason)
       SELECT h.address_hash, coalesce(s.reason, 'erasure')
       FROM unnest($1::text[], $2::text[]) AS h(address_hash, email_norm)
       LEFT JOIN suppressions s ON s.email_norm = h.email_norm
       ORDER BY h.address_hash
       ON CONFLICT (address_hash) DO NOTHING`,
      [addressHashes, emailList],
    );
    const plain = await client.query('DELETE FROM suppressions WHERE email_norm = ANY($1::text[])', [emailList]);
    rows.suppressions = plain.rowCount ?? 0;

    // 2. The sends, locked in send-id order (the order every batch statement locks in).
    const sends = await client.query<FoundSend>(
      `SELECT send_id AS "sendId", candidate_key AS "candidateKey", email_norm AS "emailNorm",
              conversation_id AS "conversationId", status
       ${PERSON_SENDS} ORDER BY send_id FOR UPDATE`,
      [keyList, emailList],
    );
    const live = sends.rows.filter((s) => !s.emailNorm.startsWith('erased:'));
    const ended = await this.endClaims(
      client,
      live.filter((s) => s.status === 'claimed').map((s) => s.sendId),
    );
    rows.claims_ended = ended;
    const updated = await client.query(
      `UPDATE sends s SET email = '', email_norm = u.email_norm, candidate_id = '', candidate_key = u.candidate_key,
              subject = '', body = '', conversation_id = u.conversation_id, address_hash = u.address_hash,
              updated_at = now()
       FROM unnest($1::uuid[], $2::text[], $3::text[], $4::text[], $5::text[])
            AS u(send_id, email_norm, candidate_key, conversation_id, address_hash)
       WHERE s.send_id = u.send_id`,
      [
        live.map((s) => s.sendId),
        live.map((s) => erasedPseudonym(this.hash('address', s.emailNorm))),
        live.map((s) => erasedPseudonym(this.hash('candidate', s.candidateKey))),
        live.map((s) =>
          s.conversationId === null ? null : erasedPseudonym(this.hash('conversation', s.conversationId)),
        ),
        live.map((s) => this.hash('address', s.emailNorm)),
      ],
    );
    rows.sends = updated.rowCount ?? 0;

    // 3. The other tables: candidate keys, addresses and conversation ids become pseudonyms.
    const keyPseudonyms = keyList.map((k) => erasedPseudonym(this.hash('candidate', k)));
    const skipped = await client.query(
      `UPDATE skipped_sends t SET candidate_key = k.pseudonym,
              conversation_id = CASE WHEN t.conversation_id IS NULL THEN NULL ELSE k.pseudonym END
       FROM unnest($1::text[], $2::text[]) AS k(key, pseudonym) WHERE t.candidate_key = k.key`,
      [keyList, keyPseudonyms],
    );
    rows.skipped_sends = skipped.rowCount ?? 0;
    const history = await client.query(
      `UPDATE provider_history t SET email_norm = a.pseudonym,
              candidate_key = CASE WHEN t.candidate_key IS NULL THEN NULL ELSE a.pseudonym END
       FROM unnest($1::text[], $2::text[]) AS a(email_norm, pseudonym) WHERE t.email_norm = a.email_norm`,
      [emailList, addressHashes.map(erasedPseudonym)],
    );
    const historyByKey = await client.query(
      `UPDATE provider_history t SET candidate_key = k.pseudonym
       FROM unnest($1::text[], $2::text[]) AS k(key, pseudonym) WHERE t.candidate_key = k.key`,
      [keyList, keyPseudonyms],
    );
    rows.provider_history = (history.rowCount ?? 0) + (historyByKey.rowCount ?? 0);
    const exposures = await client.query(
      `UPDATE exposures t SET candidate_key = k.pseudonym
       FROM unnest($1::text[], $2::text[]) AS k(key, pseudonym) WHERE t.candidate_key = k.key`,
      [keyList, keyPseudonyms],
    );
    rows.exposures = exposures.rowCount ?? 0;

    const changed = rows.suppressions + rows.sends + rows.skipped_sends + rows.provider_history + rows.exposures;
    const before = await recordErasure(
      client,
      [body.subject, ...keyList.map((k) => this.hash('candidate', k)), ...addressHashes],
      changed > 0,
    );
    return {
      status: erasureStatus(changed, before),
      rows,
      candidateKeys: keyList.slice(0, 50),
    };
  }

  /**
   * Claims not yet fenced end `suppressed` (reason `erasure`), their tokens gone: the worker that
   * holds one finds no claim to fence. Their SendRecorded is published like any outcome's, with the
   * pseudonyms the row is about to get.
   */
  private async endClaims(client: PoolClient, sendIds: readonly string[]): Promise<number> {
    if (sendIds.length === 0) return 0;
    const { rows } = await client.query<SendRow & { at: Date }>(
      `UPDATE sends SET status = 'suppressed', reason = 'erasure', claim_token = NULL, lease_expires_at = NULL,
              updated_at = now()
       WHERE send_id = ANY($1::uuid[]) AND status IN (${CLAIMED})
       RETURNING ${sendColumns('sends.')}, now() AS at`,
      [sendIds],
    );
    const events: OutgoingEvent[] = rows.map((row) => ({
      topic: this.sendRecordedTopic,
      event: sendRecorded(
        {
          ...row,
          candidateKey: erasedPseudonym(this.hash('candidate', row.candidateKey)),
          conversationId:
            row.conversationId === null ? null : erasedPseudonym(this.hash('conversation', row.conversationId)),
          emailHash: row.emailHashKeyId === null ? emailHash(row.emailNorm, this.hashKey) : row.emailHash,
          emailHashKeyId: row.emailHashKeyId ?? this.hashKey.id,
        },
        'suppressed',
        { recordedAt: row.at.getTime(), reason: 'erasure', generation: row.attempts },
      ),
    }));
    await enqueueEvents(client, events);
    return rows.length;
  }
}
