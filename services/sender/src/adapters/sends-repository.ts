/**
 * The sender's SQL. Every decisive timestamp is the database's `now()`; every state transition is
 * conditional on the claim token and the current status, so a worker that lost its claim changes
 * nothing. Multi-row statements (unnest) on the hot path.
 */
import {
  emailHash,
  enqueueEvents,
  withTransaction,
  type EmailHashKey,
  type OutgoingEvent,
  type Queryable,
} from '@outreach/shared';
import type { Pool } from 'pg';
import type { ValidSend } from '../domain/request.js';
import { sendRecorded, type Outcome, type RecordedSend } from '../domain/outcomes.js';

export interface Claim {
  readonly sendId: string;
  readonly token: string;
}

export type SendStatus = 'claimed' | 'sending' | 'sent' | 'suppressed' | 'failed' | 'ambiguous' | 'held';

export interface SendRow extends RecordedSend {
  readonly candidateId: string;
  readonly email: string;
  readonly emailNorm: string;
  readonly subject: string;
  readonly body: string;
  readonly requestId: string;
  readonly source: 'live' | 'backfill';
  readonly status: SendStatus;
  readonly attempts: number;
  readonly reason: string | null;
  readonly providerMessageId: string | null;
  readonly claimedAt: Date;
  readonly sentAt: Date | null;
  readonly updatedAt: Date;
  readonly leaseExpiresAt: Date | null;
}

export interface DuplicateDeliveries {
  readonly campaignId: string;
  readonly step: string;
  readonly kind: 'candidate' | 'address';
  readonly key: string;
  readonly count: number;
  readonly sources: string[];
}

export type FenceResult =
  | { readonly kind: 'fenced'; readonly row: SendRow }
  | { readonly kind: 'lost' }
  | { readonly kind: 'held' }
  | { readonly kind: 'exposure_conflict'; readonly exposedVariant: string };

export type RecordResult =
  | { readonly outcome: 'sent'; readonly providerMessageId: string }
  | {
      readonly outcome: 'failed' | 'ambiguous';
      readonly reason: string;
      /** `ambiguous` with a late verdict still possible: the lease marks the wait (see awaitVerdict). */
      readonly verdictWithinMs?: number;
    };

export interface RecordEntry {
  readonly claim: Claim;
  readonly row: SendRow;
  readonly result: RecordResult;
}

/** How a request that could not claim relates to the row that holds its slot. */
export type Conflict =
  | { readonly kind: 'own'; readonly send: ValidSend; readonly status: SendStatus; readonly leaseExpired: boolean }
  | { readonly kind: 'duplicate'; readonly send: ValidSend; readonly existingSendId: string; readonly reason: string };

function sendColumns(p = ''): string {
  return `${p}send_id AS "sendId", ${p}campaign_id AS "campaignId", ${p}candidate_id AS "candidateId",
  ${p}candidate_key AS "candidateKey", ${p}email, ${p}email_norm AS "emailNorm", ${p}email_hash AS "emailHash",
  ${p}email_hash_key_id AS "emailHashKeyId", ${p}step,
  ${p}experiment_id AS "experimentId", ${p}variant, ${p}subject, ${p}body, ${p}request_id AS "requestId",
  ${p}correlation_id AS "correlationId", ${p}request_event_id::text AS "causationId", ${p}source, ${p}status, ${p}attempts, ${p}reason,
  ${p}provider_message_id AS "providerMessageId", ${p}claimed_at AS "claimedAt", ${p}sent_at AS "sentAt",
  ${p}updated_at AS "updatedAt", ${p}lease_expires_at AS "leaseExpiresAt"`;
}
const SEND_COLUMNS = sendColumns();

export class SendsRepository {
  constructor(
    private readonly pool: Pool,
    private readonly sendRecordedTopic: string,
    private readonly leaseMs: number,
    /** The emailHash key: re-hashes rows from before keyed hashes, and hashes report keys. */
    private readonly hashKey: EmailHashKey,
  ) {}

  private recordEvent(
    row: RecordedSend & { readonly emailNorm: string },
    outcome: Outcome,
    recordedAt: Date,
    extra: { reason?: string | null; providerMessageId?: string | null; generation?: number } = {},
  ): OutgoingEvent {
    // A row claimed before keyed hashes holds an unsalted SHA-256, which a list of addresses
    // reverses: its event gets the keyed hash instead.
    const send =
      row.emailHashKeyId === null
        ? { ...row, emailHash: emailHash(row.emailNorm, this.hashKey), emailHashKeyId: this.hashKey.id }
        : row;
    return {
      topic: this.sendRecordedTopic,
      event: sendRecorded(send, outcome, { recordedAt: recordedAt.getTime(), ...extra }),
    };
  }

  /** Claims every send whose slot is free, in one statement; the rest are returned as conflicts. */
  async claim(sends: readonly ValidSend[]): Promise<{ claimed: Claim[]; conflicts: Conflict[] }> {
    if (sends.length === 0) return { claimed: [], conflicts: [] };
    const column = <K extends keyof ValidSend>(key: K) => sends.map((s) => s[key]);
    const inserted = await this.pool.query<{ sendId: string; token: string }>(
      `INSERT INTO sends (send_id, request_id, request_event_id, correlation_id, campaign_id, candidate_id, candidate_key,
         email, email_norm, email_hash, step, experiment_id, variant, subject, body, email_hash_key_id,
         status, claim_token, lease_expires_at)
       SELECT q.*, 'claimed', gen_random_uuid(), now() + make_interval(secs => $17::float8 / 1000)
       FROM unnest($1::uuid[], $2::text[], $3::uuid[], $4::text[], $5::text[], $6::text[], $7::text[], $8::text[],
                   $9::text[], $10::text[], $11::text[], $12::text[], $13::text[], $14::text[], $15::text[],
                   $16::text[]) AS q
       ON CONFLICT DO NOTHING
       RETURNING send_id AS "sendId", claim_token AS "token"`,
      [
        column('sendId'),
        column('requestId'),
        column('requestEventId'),
        column('correlationId'),
        column('campaignId'),
        column('candidateId'),
        column('candidateKey'),
        column('email'),
        column('emailNorm'),
        column('emailHash'),
        column('step'),
        column('experimentId'),
        column('variant'),
        column('subject'),
        column('body'),
        column('emailHashKeyId'),
        this.leaseMs,
      ],
    );
    const claimedIds = new Set(inserted.rows.map((r) => r.sendId));
    const losers = sends.filter((s) => !claimedIds.has(s.sendId));
    return { claimed: inserted.rows, conflicts: await this.classify(losers) };
  }

  private async classify(losers: readonly ValidSend[]): Promise<Conflict[]> {
    if (losers.length === 0) return [];
    const { rows } = await this.pool.query<{
      idx: string;
      sendId: string;
      status: SendStatus;
      leaseExpired: boolean;
      sameCandidate: boolean;
    }>(
      `SELECT q.idx, s.send_id AS "sendId", s.status, coalesce(s.lease_expires_at < now(), false) AS "leaseExpired",
              s.candidate_key = q.candidate_key AS "sameCandidate"
       FROM unnest($1::uuid[], $2::text[], $3::text[], $4::text[], $5::text[]) WITH ORDINALITY
            AS q(send_id, campaign_id, candidate_key, email_norm, step, idx)
       JOIN sends s ON s.send_id = q.send_id
                    OR (s.campaign_id = q.campaign_id AND s.step = q.step
                        AND (s.candidate_key = q.candidate_key OR s.email_norm = q.email_norm))
       ORDER BY q.idx, (s.send_id = q.send_id) DESC`,
      [
        losers.map((s) => s.sendId),
        losers.map((s) => s.campaignId),
        losers.map((s) => s.candidateKey),
        losers.map((s) => s.emailNorm),
        losers.map((s) => s.step),
      ],
    );
    const conflicts: Conflict[] = [];
    losers.forEach((send, i) => {
      const match = rows.find((r) => Number(r.idx) === i + 1);
      if (!match) throw new Error(`claim of ${send.sendId} conflicted, but no conflicting send is visible`);
      if (match.sendId === send.sendId) {
        conflicts.push({ kind: 'own', send, status: match.status, leaseExpired: match.leaseExpired });
      } else {
        conflicts.push({
          kind: 'duplicate',
          send,
          existingSendId: match.sendId,
          reason: match.sameCandidate
            ? `candidate already has send ${match.sendId} for this campaign step`
            : `address already has send ${match.sendId} for this campaign step`,
        });
      }
    });
    return conflicts;
  }

  /** Records `skipped_duplicate` once per request; returns how many were new. */
  async recordDuplicates(duplicates: ReadonlyArray<Extract<Conflict, { kind: 'duplicate' }>>): Promise<number> {
    if (duplicates.length === 0) return 0;
    return withTransaction(this.pool, async (client) => {
      const { rows } = await client.query<{ sendId: string; recordedAt: Date }>(
        `INSERT INTO skipped_sends (send_id, duplicate_of, campaign_id, candidate_key, email_hash, step, reason, request_id,
                                    email_hash_key_id)
         SELECT * FROM unnest($1::uuid[], $2::uuid[], $3::text[], $4::text[], $5::text[], $6::text[], $7::text[], $8::text[],
                              $9::text[])
         ON CONFLICT (send_id) DO NOTHING
         RETURNING send_id AS "sendId", recorded_at AS "recordedAt"`,
        [
          duplicates.map((d) => d.send.sendId),
          duplicates.map((d) => d.existingSendId),
          duplicates.map((d) => d.send.campaignId),
          duplicates.map((d) => d.send.candidateKey),
          duplicates.map((d) => d.send.emailHash),
          duplicates.map((d) => d.send.step),
          duplicates.map((d) => d.reason),
          duplicates.map((d) => d.send.requestId),
          duplicates.map((d) => d.send.emailHashKeyId),
        ],
      );
      const events = rows.map((row) => {
        const duplicate = duplicates.find((d) => d.send.sendId === row.sendId) as (typeof duplicates)[number];
        return this.recordEvent(
          { ...duplicate.send, causationId: duplicate.send.requestEventId },
          'skipped_duplicate',
          row.recordedAt,
          {
            reason: duplicate.reason,
          },
        );
      });
      await enqueueEvents(client, events);
      return rows.length;
    });
  }

  /** A redelivered request whose earlier claim expired unsent: take it over under a new token. */
  async takeOverExpiredClaims(sendIds: readonly string[]): Promise<Claim[]> {
    if (sendIds.length === 0) return [];
    const { rows } = await this.pool.query<Claim>(
      `UPDATE sends SET claim_token = gen_random_uuid(), lease_expires_at = now() + make_interval(secs => $2::float8 / 1000),
                        updated_at = now()
       WHERE send_id = ANY($1::uuid[]) AND status = 'claimed' AND lease_expires_at < now()
       RETURNING send_id AS "sendId", claim_token AS "token"`,
      [sendIds, this.leaseMs],
    );
    return rows;
  }

  /** The reconciler's sweep of expired claims (the provider was never called): new tokens. */
  async takeOverExpired(limit: number): Promise<Claim[]> {
    const { rows } = await this.pool.query<Claim>(
      `UPDATE sends SET claim_token = gen_random_uuid(), lease_expires_at = now() + make_interval(secs => $2::float8 / 1000),
                        updated_at = now()
       WHERE send_id IN (SELECT send_id FROM sends WHERE status = 'claimed' AND lease_expires_at < now()
                         ORDER BY lease_expires_at LIMIT $1 FOR UPDATE SKIP LOCKED)
       RETURNING send_id AS "sendId", claim_token AS "token"`,
      [limit, this.leaseMs],
    );
    return rows;
  }

  /** Extends the leases of claims still waiting in a long batch (the seed's lease heartbeat). */
  async renew(claims: readonly Claim[]): Promise<void> {
    if (claims.length === 0) return;
    await this.pool.query(
      `UPDATE sends SET lease_expires_at = now() + make_interval(secs => $3::float8 / 1000)
       WHERE status = 'claimed' AND (send_id, claim_token) IN (SELECT * FROM unnest($1::uuid[], $2::uuid[]))`,
      [claims.map((c) => c.sendId), claims.map((c) => c.token), this.leaseMs],
    );
  }

  /** Gives claims back for immediate take-over (a stale batch after a rebalance, or shutdown). */
  async release(claims: readonly Claim[]): Promise<void> {
    if (claims.length === 0) return;
    await this.pool.query(
      `UPDATE sends SET lease_expires_at = now(), updated_at = now()
       WHERE status = 'claimed' AND (send_id, claim_token) IN (SELECT * FROM unnest($1::uuid[], $2::uuid[]))`,
      [claims.map((c) => c.sendId), claims.map((c) => c.token)],
    );
  }

  /**
   * The pre-send checks for claims still held: suppressed addresses and paused campaigns end here
   * (as `suppressed` / `held`, with their SendRecorded); the rest are returned, ready to fence.
   */
  async applyChecks(
    claims: readonly Claim[],
  ): Promise<{ ready: Array<Claim & { row: SendRow }>; suppressed: number; held: number }> {
    if (claims.length === 0) return { ready: [], suppressed: 0, held: 0 };
    return withTransaction(this.pool, async (client) => {
      const { rows } = await client.query<SendRow & { token: string; suppression: string | null; paused: boolean }>(
        `SELECT ${sendColumns('s.')}, s.claim_token AS token, sup.reason AS suppression, coalesce(c.paused, false) AS paused
         FROM sends s
         LEFT JOIN suppressions sup ON sup.email_norm = s.email_norm
         LEFT JOIN campaigns c ON c.campaign_id = s.campaign_id
         WHERE s.status = 'claimed' AND (s.send_id, s.claim_token) IN (SELECT * FROM unnest($1::uuid[], $2::uuid[]))
         FOR UPDATE OF s`,
        [claims.map((c) => c.sendId), claims.map((c) => c.token)],
      );
      const suppressed = rows.filter((r) => r.suppression !== null);
      const held = rows.filter((r) => r.suppression === null && r.paused);
      const ready = rows.filter((r) => r.suppression === null && !r.paused);
      const events: OutgoingEvent[] = [];
      for (const [group, status] of [
        [suppressed, 'suppressed'],
        [held, 'held'],
      ] as const) {
        if (group.length === 0) continue;
        const updated = await client.query<{ sendId: string; updatedAt: Date }>(
          `UPDATE sends SET status = $2, lease_expires_at = NULL, updated_at = now(),
                  reason = CASE WHEN $2 = 'suppressed' THEN 'address is on the suppression list' ELSE 'campaign is paused' END
           WHERE send_id = ANY($1::uuid[]) RETURNING send_id AS "sendId", updated_at AS "updatedAt"`,
          [group.map((r) => r.sendId), status],
        );
        for (const u of updated.rows) {
          const row = group.find((r) => r.sendId === u.sendId) as SendRow & { suppression: string | null };
          const reason = status === 'suppressed' ? `suppressed (${row.suppression})` : 'campaign is paused';
          events.push(this.recordEvent(row, status, u.updatedAt, { reason, generation: row.attempts }));
        }
      }
      await enqueueEvents(client, events);
      return {
        ready: ready.map((row) => ({ sendId: row.sendId, token: row.token, row })),
        suppressed: suppressed.length,
        held: held.length,
      };
    });
  }

  /**
   * The fence: claimed → sending, only under our token and only if the campaign is not paused. The
   * experiment exposure is registered in the same transaction; a candidate already exposed to
   * another variant of the experiment makes the send fail instead.
   */
  /** Fences one claim: `claimed` → `sending` under its token, unless paused (→ held) or taken over (lost). */
  async fence(claim: Claim): Promise<FenceResult> {
    return (await this.fenceMany([claim]))[0] as FenceResult;
  }

  /**
   * `fence` for many claims in one transaction (group commit): each claim's transition is still
   * conditional on its own token and status, so the result per claim is what `fence` would give.
   */
  async fenceMany(claims: readonly Claim[]): Promise<FenceResult[]> {
    if (claims.length === 0) return [];
    return withTransaction(this.pool, async (client) => {
      const ids = claims.map((c) => c.sendId);
      const tokens = claims.map((c) => c.token);
      const fenced = await client.query<SendRow>(
        `UPDATE sends SET status = 'sending', attempts = attempts + 1, updated_at = now(),
                lease_expires_at = now() + make_interval(secs => $3::float8 / 1000)
         FROM unnest($1::uuid[], $2::uuid[]) AS f(send_id, token)
         WHERE sends.send_id = f.send_id AND sends.claim_token = f.token AND sends.status = 'claimed'
           AND NOT EXISTS (SELECT 1 FROM campaigns c WHERE c.campaign_id = sends.campaign_id AND c.paused)
         RETURNING ${sendColumns('sends.')}`,
        [ids, tokens, this.leaseMs],
      );
      const rows = new Map(fenced.rows.map((row) => [row.sendId, row]));
      const unfenced = claims.filter((c) => !rows.has(c.sendId));
      const held = new Set<string>();
      if (unfenced.length > 0) {
        const heldRows = await client.query<SendRow>(
          `UPDATE sends SET status = 'held', reason = 'campaign is paused', lease_expires_at = NULL, updated_at = now()
           FROM unnest($1::uuid[], $2::uuid[]) AS f(send_id, token)
           WHERE sends.send_id = f.send_id AND sends.claim_token = f.token AND sends.status = 'claimed'
             AND EXISTS (SELECT 1 FROM campaigns c WHERE c.campaign_id = sends.campaign_id AND c.paused)
           RETURNING ${sendColumns('sends.')}`,
          [unfenced.map((c) => c.sendId), unfenced.map((c) => c.token)],
        );
        for (const row of heldRows.rows) held.add(row.sendId);
        await enqueueEvents(
          client,
          heldRows.rows.map((row) =>
            this.recordEvent(row, 'held', row.updatedAt, { reason: 'campaign is paused', generation: row.attempts }),
          ),
        );
      }
      // The exposure backstop: one variant per (experiment, candidate), whatever the batch holds.
      const exposed = [...rows.values()].filter((row) => row.experimentId !== null && row.variant !== null);
      const conflicts = new Map<string, string>();
      if (exposed.length > 0) {
        await client.query(
          `INSERT INTO exposures (experiment_id, candidate_key, variant, send_id)
           SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::uuid[]) ON CONFLICT DO NOTHING`,
          [
            exposed.map((r) => r.experimentId),
            exposed.map((r) => r.candidateKey),
            exposed.map((r) => r.variant),
            exposed.map((r) => r.sendId),
          ],
        );
        const recorded = await client.query<{ experimentId: string; candidateKey: string; variant: string }>(
          `SELECT e.experiment_id AS "experimentId", e.candidate_key AS "candidateKey", e.variant
           FROM exposures e JOIN unnest($1::text[], $2::text[]) AS k(experiment_id, candidate_key)
             ON e.experiment_id = k.experiment_id AND e.candidate_key = k.candidate_key`,
          [exposed.map((r) => r.experimentId), exposed.map((r) => r.candidateKey)],
        );
        const variantOf = new Map(recorded.rows.map((r) => [`${r.experimentId}\u0000${r.candidateKey}`, r.variant]));
        for (const row of exposed) {
          const exposedVariant = variantOf.get(`${row.experimentId}\u0000${row.candidateKey}`) ?? row.variant;
          if (exposedVariant === null || exposedVariant === row.variant) continue;
          const claim = claims.find((c) => c.sendId === row.sendId) as Claim;
          const reason = `exposure_conflict: candidate was already sent variant ${exposedVariant} of experiment ${row.experimentId}`;
          await this.finish(client, claim, row, 'failed', { reason });
          conflicts.set(row.sendId, exposedVariant);
        }
      }
      return claims.map((claim): FenceResult => {
        const conflict = conflicts.get(claim.sendId);
        if (conflict !== undefined) return { kind: 'exposure_conflict', exposedVariant: conflict };
        const row = rows.get(claim.sendId);
        if (row) return { kind: 'fenced', row };
        return held.has(claim.sendId) ? { kind: 'held' } : { kind: 'lost' };
      });
    });
  }

  /**
   * `record` for many fenced sends in one transaction (group commit): one conditional UPDATE and one
   * outbox insert for all. Returns, per entry, false if the send was taken away meanwhile.
   */
  async recordMany(entries: readonly RecordEntry[]): Promise<boolean[]> {
    if (entries.length === 0) return [];
    return withTransaction(this.pool, async (client) => {
      const updated = await client.query<{ sendId: string; at: Date }>(
        `UPDATE sends SET status = r.outcome, reason = r.reason,
                provider_message_id = coalesce(r.provider_message_id, sends.provider_message_id),
                sent_at = CASE WHEN r.outcome = 'sent' THEN now() ELSE sends.sent_at END,
                lease_expires_at = CASE WHEN r.verdict_ms > 0 THEN now() + make_interval(secs => r.verdict_ms / 1000) END,
                updated_at = now()
         FROM unnest($1::uuid[], $2::uuid[], $3::text[], $4::text[], $5::text[], $6::float8[])
           AS r(send_id, token, outcome, reason, provider_message_id, verdict_ms)
         WHERE sends.send_id = r.send_id AND sends.claim_token = r.token AND sends.status IN ('sending', 'ambiguous')
         RETURNING sends.send_id AS "sendId", sends.updated_at AS at`,
        [
          entries.map((e) => e.claim.sendId),
          entries.map((e) => e.claim.token),
          entries.map((e) => e.result.outcome),
          entries.map((e) => (e.result.outcome === 'sent' ? null : e.result.reason)),
          entries.map((e) => (e.result.outcome === 'sent' ? e.result.providerMessageId : null)),
          entries.map((e) => (e.result.outcome === 'sent' ? null : (e.result.verdictWithinMs ?? null))),
        ],
      );
      const at = new Map(updated.rows.map((r) => [r.sendId, r.at]));
      await enqueueEvents(
        client,
        entries
          .filter((e) => at.has(e.claim.sendId))
          .map((e) =>
            this.recordEvent(e.row, e.result.outcome, at.get(e.claim.sendId) as Date, {
              reason: e.result.outcome === 'sent' ? null : e.result.reason,
              providerMessageId: e.result.outcome === 'sent' ? e.result.providerMessageId : null,
              generation: e.row.attempts,
            }),
          ),
      );
      return entries.map((e) => at.has(e.claim.sendId));
    });
  }

  /** Moves a send we hold to a terminal status and enqueues its SendRecorded, in `client`'s transaction. */
  private async finish(
    client: Queryable,
    claim: Claim,
    row: SendRow,
    outcome: 'sent' | 'failed' | 'ambiguous',
    details: { reason?: string; providerMessageId?: string },
  ): Promise<boolean> {
    const updated = await client.query<{ at: Date }>(
      `UPDATE sends SET status = $3, reason = $4, provider_message_id = coalesce($5, provider_message_id),
              sent_at = CASE WHEN $3 = 'sent' THEN now() ELSE sent_at END,
              lease_expires_at = NULL, updated_at = now()
       WHERE send_id = $1 AND claim_token = $2 AND status IN ('sending', 'ambiguous')
       RETURNING updated_at AS at`,
      [claim.sendId, claim.token, outcome, details.reason ?? null, details.providerMessageId ?? null],
    );
    const at = updated.rows[0]?.at;
    if (!at) return false;
    await enqueueEvents(client, [
      this.recordEvent(row, outcome, at, {
        reason: details.reason ?? null,
        providerMessageId: details.providerMessageId ?? null,
        generation: row.attempts,
      }),
    ]);
    return true;
  }

  /** Records the provider's verdict for a fenced send. Returns false if the send was taken away. */
  async record(claim: Claim, row: SendRow, result: RecordResult): Promise<boolean> {
    return (await this.recordMany([{ claim, row, result }]))[0] as boolean;
  }

  /**
   * The provider certainly did not take it: back to claimed, retried after `retryInMs`. Also from
   * `ambiguous` under the same token: a provider's late refusal settles what the timeout left open.
   */
  async retryLater(claim: Claim, reason: string, retryInMs: number): Promise<void> {
    await this.pool.query(
      `UPDATE sends SET status = 'claimed', reason = $3, updated_at = now(),
              lease_expires_at = now() + make_interval(secs => $4::float8 / 1000)
       WHERE send_id = $1 AND claim_token = $2 AND status IN ('sending', 'ambiguous')`,
      [claim.sendId, claim.token, reason, retryInMs],
    );
  }

  /**
   * An `ambiguous` send whose provider may still answer (a late reply is awaited until `withinMs`
   * from now): its lease marks the wait, so no operator retry mails a second copy meanwhile, on any
   * instance. `withinMs` 0 ends the wait (the provider gave up without a verdict).
   */
  async awaitVerdict(claim: Claim, withinMs: number): Promise<void> {
    await this.pool.query(
      `UPDATE sends SET lease_expires_at = CASE WHEN $3::float8 > 0 THEN now() + make_interval(secs => $3::float8 / 1000) END
       WHERE send_id = $1 AND claim_token = $2 AND status = 'ambiguous'`,
      [claim.sendId, claim.token, withinMs],
    );
  }

  /** Sends whose lease expired while `sending`: the provider may or may not have them. */
  async expiredSending(limit: number): Promise<Array<Claim & { row: SendRow }>> {
    const { rows } = await this.pool.query<SendRow & { token: string }>(
      `SELECT ${SEND_COLUMNS}, claim_token AS token FROM sends
       WHERE status = 'sending' AND lease_expires_at < now() ORDER BY lease_expires_at LIMIT $1`,
      [limit],
    );
    return rows.map((row) => ({ sendId: row.sendId, token: row.token, row }));
  }

  async find(sendId: string): Promise<SendRow | undefined> {
    const { rows } = await this.pool.query<SendRow>(`SELECT ${SEND_COLUMNS} FROM sends WHERE send_id = $1`, [sendId]);
    return rows[0];
  }

  /** Sends in one status (ambiguous, held, failed, ...), optionally of one campaign, in send-id pages. */
  async list(filter: {
    status: SendRow['status'];
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

  async findSkipped(
    sendId: string,
  ): Promise<{ sendId: string; duplicateOf: string; reason: string; recordedAt: Date } | undefined> {
    const { rows } = await this.pool.query<{ sendId: string; duplicateOf: string; reason: string; recordedAt: Date }>(
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

  async pause(campaignId: string, reason: string): Promise<void> {
    await this.pool.query(
      `INSERT INTO campaigns (campaign_id, paused, paused_reason, paused_at) VALUES ($1, true, $2, now())
       ON CONFLICT (campaign_id) DO UPDATE SET paused = true, paused_reason = $2, paused_at = now(), updated_at = now()`,
      [campaignId, reason],
    );
  }

  /** Unpauses and hands every held send back as an expired claim, so the reconciler sends it once. */
  async resume(campaignId: string): Promise<number> {
    return withTransaction(this.pool, async (client) => {
      await client.query(
        `INSERT INTO campaigns (campaign_id, paused) VALUES ($1, false)
         ON CONFLICT (campaign_id) DO UPDATE SET paused = false, paused_reason = NULL, paused_at = NULL, updated_at = now()`,
        [campaignId],
      );
      const released = await client.query(
        `UPDATE sends SET status = 'claimed', claim_token = gen_random_uuid(), lease_expires_at = now(), reason = NULL,
                updated_at = now()
         WHERE campaign_id = $1 AND status = 'held'`,
        [campaignId],
      );
      return released.rowCount ?? 0;
    });
  }

  async campaign(
    campaignId: string,
  ): Promise<{ paused: boolean; pausedReason: string | null; counts: Record<string, number> }> {
    const [state, counts, skipped] = await Promise.all([
      this.pool.query<{ paused: boolean; pausedReason: string | null }>(
        'SELECT paused, paused_reason AS "pausedReason" FROM campaigns WHERE campaign_id = $1',
        [campaignId],
      ),
      this.pool.query<{ status: string; n: number }>(
        'SELECT status, count(*)::int AS n FROM sends WHERE campaign_id = $1 GROUP BY status',
        [campaignId],
      ),
      this.pool.query<{ n: number }>('SELECT count(*)::int AS n FROM skipped_sends WHERE campaign_id = $1', [
        campaignId,
      ]),
    ]);
    const result: Record<string, number> = { skipped_duplicate: skipped.rows[0]?.n ?? 0 };
    for (const row of counts.rows) result[row.status] = row.n;
    return {
      paused: state.rows[0]?.paused ?? false,
      pausedReason: state.rows[0]?.pausedReason ?? null,
      counts: result,
    };
  }

  /** Operator resolution of an ambiguous send: it was sent after all, or it may be retried. */
  async resolveAmbiguous(
    sendId: string,
    resolution: 'sent' | 'retry',
  ): Promise<'resolved' | 'not_ambiguous' | 'verdict_pending' | 'not_found'> {
    return withTransaction(this.pool, async (client) => {
      const current = await client.query<SendRow & { verdictPending: boolean }>(
        `SELECT ${SEND_COLUMNS}, coalesce(lease_expires_at > now(), false) AS "verdictPending"
         FROM sends WHERE send_id = $1 FOR UPDATE`,
        [sendId],
      );
      const row = current.rows[0];
      if (!row) return 'not_found';
      if (row.status !== 'ambiguous') return 'not_ambiguous';
      // A retry while the provider may still accept the first copy would mail the candidate twice.
      if (resolution === 'retry' && row.verdictPending) return 'verdict_pending';
      if (resolution === 'sent') {
        const updated = await client.query<{ at: Date }>(
          `UPDATE sends SET status = 'sent', sent_at = coalesce(sent_at, now()), reason = 'resolved by an operator: sent',
                  updated_at = now() WHERE send_id = $1 RETURNING updated_at AS at`,
          [sendId],
        );
        await enqueueEvents(client, [
          this.recordEvent(row, 'sent', updated.rows[0]?.at as Date, {
            reason: 'resolved by an operator',
            generation: row.attempts,
          }),
        ]);
      } else {
        await client.query(
          `UPDATE sends SET status = 'claimed', claim_token = gen_random_uuid(), lease_expires_at = now(),
                  reason = 'resolved by an operator: retry', updated_at = now() WHERE send_id = $1`,
          [sendId],
        );
      }
      return 'resolved';
    });
  }

  async suppress(emailNorm: string, reason: string, note: string | null): Promise<void> {
    await this.pool.query(
      `INSERT INTO suppressions (email_norm, reason, note) VALUES ($1, $2, $3)
       ON CONFLICT (email_norm) DO UPDATE SET reason = $2, note = $3`,
      [emailNorm, reason, note],
    );
  }

  async unsuppress(emailNorm: string): Promise<boolean> {
    const result = await this.pool.query('DELETE FROM suppressions WHERE email_norm = $1', [emailNorm]);
    return (result.rowCount ?? 0) > 0;
  }

  async suppression(emailNorm: string): Promise<{ reason: string; note: string | null; createdAt: Date } | undefined> {
    const { rows } = await this.pool.query<{ reason: string; note: string | null; createdAt: Date }>(
      'SELECT reason, note, created_at AS "createdAt" FROM suppressions WHERE email_norm = $1',
      [emailNorm],
    );
    return rows[0];
  }

  /**
   * Pairs of deliveries to the same candidate or the same address within a campaign step: from the
   * sent log (which the constraints keep free of them) and from imported provider history. Grouped
   * by the canonical address, not by the stored hash (rows hashed under an older key, or before
   * keyed hashes, still group); an address is shown as its hash under the current key.
   */
  async duplicates(campaignId: string | null): Promise<DuplicateDeliveries[]> {
    const { rows } = await this.pool.query<DuplicateDeliveries>(
      `WITH delivered AS (
         SELECT campaign_id, step, candidate_key, email_norm, 'sent_log' AS source FROM sends
           WHERE status = 'sent' AND source = 'live' AND ($1::text IS NULL OR campaign_id = $1)
         UNION ALL
         SELECT campaign_id, step, candidate_key, email_norm, 'provider_history' FROM provider_history
           WHERE $1::text IS NULL OR campaign_id = $1
       )
       SELECT campaign_id AS "campaignId", step, 'address' AS kind, email_norm AS key, count(*)::int AS count,
              array_agg(DISTINCT source) AS sources
       FROM delivered GROUP BY campaign_id, step, email_norm HAVING count(*) > 1
       UNION ALL
       SELECT campaign_id, step, 'candidate', candidate_key, count(*)::int, array_agg(DISTINCT source)
       FROM delivered WHERE candidate_key IS NOT NULL GROUP BY campaign_id, step, candidate_key HAVING count(*) > 1
       ORDER BY 1, 2, 3, 4`,
      [campaignId],
    );
    return rows.map((row) => (row.kind === 'address' ? { ...row, key: emailHash(row.key, this.hashKey) } : row));
  }

  async ambiguousCount(): Promise<number> {
    const { rows } = await this.pool.query<{ n: number }>(
      `SELECT count(*)::int AS n FROM sends WHERE status = 'ambiguous'`,
    );
    return rows[0]?.n ?? 0;
  }

  async heldByCampaign(): Promise<Array<{ campaignId: string; n: number }>> {
    const { rows } = await this.pool.query<{ campaignId: string; n: number }>(
      `SELECT campaign_id AS "campaignId", count(*)::int AS n FROM sends WHERE status = 'held' GROUP BY campaign_id`,
    );
    return rows;
  }
}
