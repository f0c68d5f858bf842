/**
 * Applies the send state machine (domain/send.ts) to `sender.sends`. Each transition is a
 * conditional update built from its row of TRANSITIONS (`WHERE status IN (from) AND claim_token =
 * token`), so a worker whose claim was taken over, or whose send was settled elsewhere, changes
 * nothing. It decides nothing: where the choice needs the row (the checks, the fence's stopped
 * sends, the exposure backstop, a history import, an operator's resolution), it loads the rows
 * locked, the workflow decides (workflow/send-commands.ts), and it applies the decided events in the
 * same transaction. The fence's set-based Fenced applies the gate as SQL generated from the domain's
 * GATE (gate-sql.ts). Every decisive timestamp is the database's `now()`; the hot path is multi-row
 * statements (unnest); a transition that publishes a SendRecorded enqueues it in the outbox in the
 * same transaction.
 */
import { randomUUID } from 'node:crypto';
import {
  enqueueEvents,
  erasedPseudonym,
  withTransaction,
  type OutgoingEvent,
  type Queryable,
  type SubjectHashKind,
} from '@outreach/shared';
import { emailHash, type EmailHashKey } from '@outreach/contracts';
import type { Pool, PoolClient } from 'pg';
import { EVIDENCE_KINDS } from '../domain/feedback/feedback.js';
import type { ValidSend } from '../domain/request.js';
import type { SuppressionsRepository } from './suppressions-repository.js';
import {
  decide,
  reasonOf,
  recordedOf,
  sendRecorded,
  statusesFor,
  transition,
  type CommandType,
  type EvidenceSource,
  type RecordedSend,
  type ResultEvent,
  type SendFacts,
  type SendState,
  type SlotHolder,
  type TransitionEvent,
} from '../domain/send.js';
import { gateClearSql, holdClearSql, sendGateFactsSql } from './gate-sql.js';
import {
  decidableColumns,
  sendColumns,
  sqlStatuses,
  sqlTransition,
  stateOf,
  type DecidableRow,
  type SendRow,
} from './send-rows.js';

export interface Claim {
  readonly sendId: string;
  readonly token: string;
}

/**
 * A claim as its INSERT returned it, with what the gate said at that moment: `gateClear` (no
 * suppression, pause or kill switch) lets it skip the checks' transaction and go straight to its
 * rate token and the fence, which decides on the facts again under its lock.
 */
export interface FreshClaim extends Claim {
  readonly emailNorm: string;
  readonly gateClear: boolean;
}

export type FenceResult =
  | { readonly kind: 'fenced'; readonly row: SendRow }
  | { readonly kind: 'lost' }
  | { readonly kind: 'held' }
  | { readonly kind: 'suppressed' }
  | { readonly kind: 'exposure_conflict'; readonly exposedVariant: string };

/** A provider's verdict on a fenced send, as the command that produced it: see TRANSITIONS. */
export interface RecordEntry {
  readonly claim: Claim;
  readonly row: SendRow;
  readonly command: Extract<CommandType, 'RecordResult' | 'ExpireSendingLease' | 'LookUp'>;
  readonly event: Exclude<ResultEvent, { type: 'RetryScheduled' }>;
}

type Skipped = Extract<TransitionEvent, { type: 'SkippedAsDuplicate' }>;

/** A request that could not claim, and the row that holds its slot: its own (a redelivery), or another send. */
export type ClaimConflict =
  | { readonly kind: 'own'; readonly send: ValidSend }
  | { readonly kind: 'taken'; readonly send: ValidSend; readonly newToken: string; readonly heldBy: SlotHolder };

/** How a request that could not claim relates to the row that holds its slot, once decided. */
export type Conflict =
  | { readonly kind: 'own'; readonly send: ValidSend }
  | { readonly kind: 'duplicate'; readonly send: ValidSend; readonly event: Skipped };

/** A claim's row locked with the facts the checks and the fence decide on. */
export interface FactsRow {
  readonly row: DecidableRow;
  readonly facts: SendFacts;
}

/** A fenced send of an experiment, with the variant its candidate was first sent (this one, if it is the first). */
export interface ExposedRow {
  readonly row: SendRow;
  readonly exposedVariant: string;
}

/** An ambiguous send locked with the delivery an imported provider history shows for it. */
export interface HistoryDelivery {
  readonly row: DecidableRow;
  readonly providerMessageId: string;
  readonly sentAt: Date;
}

// A claim starts from no row: its condition is the INSERT's ON CONFLICT DO NOTHING.
const CLAIMED = sqlStatuses([transition('Claim', 'Claimed').to]);
const TAKE_OVER = sqlTransition(transition('TakeOverClaim', 'ClaimTakenOver'));
const RENEW = sqlTransition(transition('RenewLease', 'LeaseRenewed'));
const RELEASE = sqlTransition(transition('ReleaseClaim', 'ClaimReleased'));
// The fence reads the suppression list, the campaign's pause and the kill switch in its own
// statement, so a suppression or a pause written after the checks (while a claim waited for its rate
// token) still stops the send.
const FENCE = sqlTransition(transition('Fence', 'Fenced'));
const FENCE_GATE_CLEAR = gateClearSql(sendGateFactsSql('sends'));
/** The gate as a claim's INSERT sees it: a hint only (no lock held); the fence decides again. */
const CLAIM_GATE_CLEAR = `(${gateClearSql(sendGateFactsSql('sends'))})`;
const FENCEABLE = sqlStatuses(statusesFor('Fence'));
/** Past the fence, not yet recorded: the provider call may still deliver. */
const IN_FLIGHT = sqlStatuses([transition('Fence', 'Fenced').to]);
const AWAIT_VERDICT = sqlTransition(transition('AwaitVerdict', 'VerdictAwaited'));
const RESUME = sqlTransition(transition('Resume', 'Resumed'));
const RESUME_HOLD_CLEAR = holdClearSql(sendGateFactsSql('sends'));
const CHECKABLE = sqlStatuses(statusesFor('Check'));
const SENDING_LEASES = sqlStatuses(statusesFor('ExpireSendingLease'));
const LOOKUP_STATUSES = sqlStatuses(statusesFor('LookUp'));
/**
 * When the attempt in flight started (rows fenced by a version before the column: their last
 * update, which is never earlier), and the database's clock, for the lookup's timing rule.
 */
const IN_FLIGHT_TIMES = `coalesce(attempt_started_at, updated_at) AS "attemptStartedAt", now() AS "dbNow"`;

const SETTLE_BY_EVIDENCE = sqlTransition(transition('SettleByEvidence', 'SettledByEvidence'));
const EVIDENCE = EVIDENCE_KINDS.map((kind) => `'${kind}'`).join(', ');
/**
 * The first delivery evidence stored for the send `s` since its last attempt started, if any
 * (feedback_events_send_idx; database clock on both sides). Evidence received before that attempt
 * is about no message of it: before the first attempt nothing existed, and a retry waits for its
 * fence only after an attempt that was in doubt (whose start is still `attempt_started_at`).
 */
const FIRST_EVIDENCE = `SELECT e.source, e.provider_message_id FROM feedback_events e
  WHERE e.send_id = s.send_id AND e.decision = 'evidence' AND e.kind IN (${EVIDENCE})
    AND e.received_at >= s.attempt_started_at
  ORDER BY e.occurred_at LIMIT 1`;

/** Which sends to settle from their stored evidence: those named, or the reconciler's sweep. */
export type EvidenceScope =
  | { readonly sendIds: readonly string[] }
  /**
   * The sweep: lapsed attempts and retries of sends already attempted. (An ambiguous send gets its
   * evidence where the evidence arrives or where it becomes ambiguous, both under its row lock.)
   */
  | { readonly limit: number };

/** A send settled by delivery evidence. */
export interface SettledSend {
  readonly sendId: string;
  readonly campaignId: string;
  readonly source: EvidenceSource;
  /** The status it was settled from. */
  readonly from: string;
}

type InFlightRow = DecidableRow & { readonly attemptStartedAt: Date; readonly dbNow: Date };

/** A send in flight as the reconciler settles it: its claim, its row, its state, and its timing. */
export interface InFlightSend extends Claim {
  readonly row: SendRow;
  readonly state: SendState;
  readonly attemptStartedAt: Date;
  /** The database's now() when the row was read. */
  readonly now: Date;
}

function inFlightSend({ attemptStartedAt, dbNow, ...row }: InFlightRow): InFlightSend {
  return { sendId: row.sendId, token: row.token as string, row, state: stateOf(row), attemptStartedAt, now: dbNow };
}

/**
 * The facts the checks and the fence decide on, for claims still held under their tokens: the
 * suppression list's reason, the campaign's pause and the kill switch, rows locked.
 */
function factsQuery(statuses: string): string {
  // One key lookup per claim, locked in the claims' order, and one per suppression and campaign: a
  // shape the planner cannot turn into scans of growing tables (docs/design.md, "Keyed batch statements").
  return `SELECT ${decidableColumns('s.')}, sup.reason AS suppression, coalesce(c.paused, false) AS paused,
            ctl.paused AS "sendingPaused"
     FROM unnest($1::uuid[], $2::uuid[]) WITH ORDINALITY AS k(send_id, token, n)
     CROSS JOIN LATERAL (
       SELECT * FROM sends WHERE send_id = k.send_id AND claim_token = k.token AND status IN (${statuses}) FOR UPDATE) s
     LEFT JOIN LATERAL (
       SELECT reason FROM suppressions WHERE email_norm = s.email_norm
       UNION ALL SELECT reason FROM suppression_hashes WHERE address_hash = s.address_hash
       LIMIT 1) sup ON true
     LEFT JOIN LATERAL (SELECT paused FROM campaigns WHERE campaign_id = s.campaign_id OFFSET 0) c ON true
     CROSS JOIN sending_control ctl
     ORDER BY k.n`;
}

/** A decided transition of a row this transaction holds: applied only from the status it was decided in. */
export interface Ending {
  readonly command: CommandType;
  readonly row: DecidableRow;
  readonly token: string;
  readonly event: TransitionEvent;
}

export class SendsRepository {
  constructor(
    readonly pool: Pool,
    private readonly sendRecordedTopic: string,
    readonly leaseMs: number,
    /** The emailHash key: re-hashes rows from before keyed hashes. */
    private readonly hashKey: EmailHashKey,
    /** Where a hard bounce suppresses its address, in the transaction that records it. */
    private readonly suppressions?: Pick<SuppressionsRepository, 'suppressIn'>,
    /**
     * Hashes under the suppression key (ADR 014): a claim's address hash, stored on its row for the
     * gate's keyed lookup, and the pseudonyms of an erased person's request; absent without a key.
     */
    private readonly subjectHashOf?: (kind: SubjectHashKind, value: string) => string,
  ) {}

  /** Told of sends settled by evidence inside this repository's own transactions (for the counters). */
  onSettled?: (settled: readonly SettledSend[]) => void;

  /** The SendRecorded `event` publishes, if any, for `row` at `recordedAt`. */
  private recordEvent(
    row: RecordedSend & { readonly emailNorm: string },
    event: TransitionEvent,
    recordedAt: Date,
    generation?: number,
  ): OutgoingEvent[] {
    const recorded = recordedOf(event);
    if (!recorded) return [];
    // A row claimed before keyed hashes holds an unsalted SHA-256, which a list of addresses
    // reverses: its event gets the keyed hash instead.
    const send =
      row.emailHashKeyId === null
        ? { ...row, emailHash: emailHash(row.emailNorm, this.hashKey), emailHashKeyId: this.hashKey.id }
        : row;
    const { outcome, reason, providerMessageId } = recorded;
    return [
      {
        topic: this.sendRecordedTopic,
        event: sendRecorded(send, outcome, {
          recordedAt: recordedAt.getTime(),
          reason,
          providerMessageId,
          ...(generation === undefined ? {} : { generation }),
        }),
      },
    ];
  }

  /**
   * Claims every send whose slot is free, in one statement; the rest are returned as conflicts, with
   * the send that holds their slot (the workflow decides what a taken slot makes of them).
   *
   * A request for an erased person (ADR 014: its address's keyed hash is in `suppression_hashes`, or
   * its candidate's in `subject_erasures`; two primary-key probes in the same statement) is one that
   * was on its way when the erasure ran: its row is written already scrubbed, as the erasure would
   * leave it (no address, candidate id or content; `erased:<hash>` for the candidate key, the address
   * and the conversation id), its address's objection is kept as a hash (a candidate erased under
   * another address), and it is not gate-clear: the checks end it `suppressed` and publish its
   * SendRecorded with the pseudonyms. A request that loses its slot is classified with the same
   * pseudonyms, so its duplicate record holds no more than the row it lost to.
   */
  async claim(sends: readonly ValidSend[]): Promise<{ claimed: FreshClaim[]; conflicts: ClaimConflict[] }> {
    if (sends.length === 0) return { claimed: [], conflicts: [] };
    const tokens = sends.map(() => randomUUID());
    const column = <K extends keyof ValidSend>(key: K) => sends.map((s) => s[key]);
    const hashOf = this.subjectHashOf;
    const hashes = sends.map((s) =>
      hashOf
        ? {
            address: hashOf('address', s.emailNorm),
            candidate: hashOf('candidate', s.candidateKey),
            conversation: s.conversationId === null ? null : hashOf('conversation', s.conversationId),
          }
        : { address: null, candidate: null, conversation: null },
    );
    const { rows } = await this.pool.query<FreshClaim & { inserted: boolean; erased: boolean; idx: string }>(
      `WITH q AS (
         SELECT u.*, u.address_hash IS NOT NULL AND (
                  EXISTS (SELECT 1 FROM suppression_hashes h WHERE h.address_hash = u.address_hash)
                  OR EXISTS (SELECT 1 FROM subject_erasures x WHERE x.subject_hash = u.candidate_hash)) AS erased
         FROM unnest($1::uuid[], $2::text[], $3::uuid[], $4::text[], $5::text[], $6::text[], $7::text[], $8::text[],
                     $9::text[], $10::text[], $11::text[], $12::text[], $13::text[], $14::text[], $15::text[],
                     $16::text[], $17::uuid[], $19::text[], $20::text[], $21::text[], $22::text[]) WITH ORDINALITY
           AS u(send_id, request_id, request_event_id, correlation_id, campaign_id, candidate_id, candidate_key,
                email, email_norm, email_hash, step, experiment_id, variant, subject, body, email_hash_key_id,
                claim_token, conversation_id, address_hash, candidate_hash, conversation_hash, idx)),
       objection AS (
         INSERT INTO suppression_hashes (address_hash, reason)
         SELECT DISTINCT address_hash, 'erasure' FROM q WHERE erased ORDER BY address_hash
         ON CONFLICT (address_hash) DO NOTHING),
       claimed AS (
         INSERT INTO sends (send_id, request_id, request_event_id, correlation_id, campaign_id, candidate_id,
           candidate_key, email, email_norm, email_hash, step, experiment_id, variant, subject, body,
           email_hash_key_id, claim_token, conversation_id, address_hash, status, lease_expires_at)
         SELECT send_id, request_id, request_event_id, correlation_id, campaign_id,
                CASE WHEN erased THEN '' ELSE candidate_id END,
                CASE WHEN erased THEN 'erased:' || candidate_hash ELSE candidate_key END,
                CASE WHEN erased THEN '' ELSE email END,
                CASE WHEN erased THEN 'erased:' || address_hash ELSE email_norm END,
                email_hash, step, experiment_id, variant,
                CASE WHEN erased THEN '' ELSE subject END,
                CASE WHEN erased THEN '' ELSE body END,
                email_hash_key_id, claim_token,
                CASE WHEN erased AND conversation_id IS NOT NULL THEN 'erased:' || conversation_hash
                     ELSE conversation_id END,
                address_hash, ${CLAIMED}, now() + make_interval(secs => $18::float8 / 1000)
         FROM q
         ON CONFLICT DO NOTHING
         RETURNING send_id, claim_token, email_norm,
                   sends.email_norm NOT LIKE 'erased:%' AND ${CLAIM_GATE_CLEAR} AS gate_clear)
       SELECT q.idx, q.erased, c.send_id IS NOT NULL AS inserted, c.send_id AS "sendId", c.claim_token AS "token",
              c.email_norm AS "emailNorm", c.gate_clear AS "gateClear"
       FROM q LEFT JOIN claimed c ON c.send_id = q.send_id AND c.claim_token = q.claim_token
       ORDER BY q.idx`,
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
        tokens,
        this.leaseMs,
        column('conversationId'),
        hashes.map((h) => h.address),
        hashes.map((h) => h.candidate),
        hashes.map((h) => h.conversation),
      ],
    );
    const claimed: FreshClaim[] = [];
    const losers: Array<{ send: ValidSend; token: string; plain: ValidSend }> = [];
    for (const row of rows) {
      const i = Number(row.idx) - 1;
      if (row.inserted) {
        claimed.push({ sendId: row.sendId, token: row.token, emailNorm: row.emailNorm, gateClear: row.gateClear });
        continue;
      }
      const send = sends[i] as ValidSend;
      const hash = hashes[i] as (typeof hashes)[number];
      losers.push({
        send: row.erased
          ? {
              ...send,
              candidateId: '',
              candidateKey: erasedPseudonym(hash.candidate as string),
              email: '',
              emailNorm: erasedPseudonym(hash.address as string),
              subject: '',
              body: '',
              conversationId: hash.conversation === null ? null : erasedPseudonym(hash.conversation),
            }
          : send,
        token: tokens[i] as string,
        plain: send,
      });
    }
    return { claimed, conflicts: await this.classify(losers) };
  }

  /**
   * The rows that hold the losers' slots. An erased person's request is matched by its pseudonyms
   * (the rows an erasure left) and by its plain keys (a row the erasure did not see).
   */
  private async classify(
    losers: ReadonlyArray<{ send: ValidSend; token: string; plain: ValidSend }>,
  ): Promise<ClaimConflict[]> {
    if (losers.length === 0) return [];
    const { rows } = await this.pool.query<{ idx: string; sendId: string; sameCandidate: boolean }>(
      `SELECT q.idx, s.send_id AS "sendId", s.candidate_key IN (q.candidate_key, q.plain_key) AS "sameCandidate"
       FROM unnest($1::uuid[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[], $7::text[]) WITH ORDINALITY
            AS q(send_id, campaign_id, candidate_key, email_norm, step, plain_key, plain_norm, idx)
       JOIN sends s ON s.send_id = q.send_id
                    OR (s.campaign_id = q.campaign_id AND s.step = q.step
                        AND (s.candidate_key IN (q.candidate_key, q.plain_key)
                             OR s.email_norm IN (q.email_norm, q.plain_norm)))
       ORDER BY q.idx, (s.send_id = q.send_id) DESC`,
      [
        losers.map((l) => l.send.sendId),
        losers.map((l) => l.send.campaignId),
        losers.map((l) => l.send.candidateKey),
        losers.map((l) => l.send.emailNorm),
        losers.map((l) => l.send.step),
        losers.map((l) => l.plain.candidateKey),
        losers.map((l) => l.plain.emailNorm),
      ],
    );
    return losers.map(({ send, token }, i): ClaimConflict => {
      const match = rows.find((r) => Number(r.idx) === i + 1);
      if (!match) throw new Error(`claim of ${send.sendId} conflicted, but no conflicting send is visible`);
      // The request's own row: a redelivery (the pipeline takes it over if its lease lapsed unsent).
      if (match.sendId === send.sendId) return { kind: 'own', send };
      return {
        kind: 'taken',
        send,
        newToken: token,
        heldBy: { sendId: match.sendId, sameCandidate: match.sameCandidate },
      };
    });
  }

  /** Records `skipped_duplicate` once per request; returns how many were new. */
  async recordDuplicates(duplicates: ReadonlyArray<Extract<Conflict, { kind: 'duplicate' }>>): Promise<number> {
    if (duplicates.length === 0) return 0;
    return withTransaction(this.pool, async (client) => {
      const { rows } = await client.query<{ sendId: string; recordedAt: Date }>(
        `INSERT INTO skipped_sends (send_id, duplicate_of, campaign_id, candidate_key, email_hash, step, reason, request_id,
                                    email_hash_key_id, conversation_id)
         SELECT * FROM unnest($1::uuid[], $2::uuid[], $3::text[], $4::text[], $5::text[], $6::text[], $7::text[], $8::text[],
                              $9::text[], $10::text[])
         ON CONFLICT (send_id) DO NOTHING
         RETURNING send_id AS "sendId", recorded_at AS "recordedAt"`,
        [
          duplicates.map((d) => d.send.sendId),
          duplicates.map((d) => d.event.duplicateOf),
          duplicates.map((d) => d.send.campaignId),
          duplicates.map((d) => d.send.candidateKey),
          duplicates.map((d) => d.send.emailHash),
          duplicates.map((d) => d.send.step),
          duplicates.map((d) => reasonOf(d.event)),
          duplicates.map((d) => d.send.requestId),
          duplicates.map((d) => d.send.emailHashKeyId),
          duplicates.map((d) => d.send.conversationId),
        ],
      );
      const events = rows.flatMap((row) => {
        const duplicate = duplicates.find((d) => d.send.sendId === row.sendId) as (typeof duplicates)[number];
        return this.recordEvent(
          { ...duplicate.send, causationId: duplicate.send.requestEventId },
          duplicate.event,
          row.recordedAt,
        );
      });
      await enqueueEvents(client, events);
      return rows.length;
    });
  }

  /** Redelivered requests whose earlier claim lapsed unsent: taken over under new tokens. */
  async takeOverExpiredClaims(sendIds: readonly string[]): Promise<Claim[]> {
    if (sendIds.length === 0) return [];
    const { rows } = await this.pool.query<Claim>(
      `UPDATE sends SET status = ${TAKE_OVER.to}, claim_token = gen_random_uuid(),
                        lease_expires_at = now() + make_interval(secs => $2::float8 / 1000), updated_at = now()
       WHERE send_id = ANY($1::uuid[]) AND status IN (${TAKE_OVER.from}) AND lease_expires_at < now()
       RETURNING send_id AS "sendId", claim_token AS "token"`,
      [sendIds, this.leaseMs],
    );
    return rows;
  }

  /** The reconciler's sweep of lapsed claims (the provider was never called): new tokens. */
  async takeOverExpired(limit: number): Promise<Claim[]> {
    const { rows } = await this.pool.query<Claim>(
      `UPDATE sends SET status = ${TAKE_OVER.to}, claim_token = gen_random_uuid(),
                        lease_expires_at = now() + make_interval(secs => $2::float8 / 1000), updated_at = now()
       WHERE send_id IN (SELECT send_id FROM sends WHERE status IN (${TAKE_OVER.from}) AND lease_expires_at < now()
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
      `UPDATE sends SET status = ${RENEW.to}, lease_expires_at = now() + make_interval(secs => $3::float8 / 1000)
       WHERE status IN (${RENEW.from}) AND (send_id, claim_token) IN (SELECT * FROM unnest($1::uuid[], $2::uuid[]))`,
      [claims.map((c) => c.sendId), claims.map((c) => c.token), this.leaseMs],
    );
  }

  /** Gives claims back for immediate take-over (a stale batch after a rebalance, or shutdown). */
  async release(claims: readonly Claim[]): Promise<void> {
    if (claims.length === 0) return;
    await this.pool.query(
      `UPDATE sends SET status = ${RELEASE.to}, lease_expires_at = now(), updated_at = now()
       WHERE status IN (${RELEASE.from}) AND (send_id, claim_token) IN (SELECT * FROM unnest($1::uuid[], $2::uuid[]))`,
      [claims.map((c) => c.sendId), claims.map((c) => c.token)],
    );
  }

  /** Runs `work` in one transaction on this repository's pool. */
  async transaction<T>(work: (client: PoolClient) => Promise<T>): Promise<T> {
    return withTransaction(this.pool, work);
  }

  /**
   * Ends decided rows this transaction holds (a check, the fence or the exposure backstop ended
   * them): status, reason, no lease, and their SendRecorded. Each row only from the status it was
   * decided in.
   */
  async end(client: Queryable, decided: readonly Ending[]): Promise<void> {
    if (decided.length === 0) return;
    const updated = await client.query<{ sendId: string; updatedAt: Date }>(
      `UPDATE sends SET status = a.to_status, reason = a.reason, lease_expires_at = NULL, updated_at = now()
       FROM unnest($1::uuid[], $2::uuid[], $3::text[], $4::text[], $5::text[])
         AS a(send_id, token, from_status, to_status, reason)
       WHERE sends.send_id = a.send_id AND sends.claim_token = a.token AND sends.status = a.from_status
       RETURNING sends.send_id AS "sendId", sends.updated_at AS "updatedAt"`,
      [
        decided.map((d) => d.row.sendId),
        decided.map((d) => d.token),
        decided.map((d) => d.row.status),
        decided.map((d) => transition(d.command, d.event.type).to),
        decided.map((d) => reasonOf(d.event) ?? null),
      ],
    );
    const at = new Map(updated.rows.map((u) => [u.sendId, u.updatedAt]));
    await enqueueEvents(
      client,
      decided.flatMap((d) => {
        const updatedAt = at.get(d.row.sendId);
        return updatedAt ? this.recordEvent(d.row, d.event, updatedAt, d.row.attempts) : [];
      }),
    );
  }

  /**
   * The claims still held under their tokens, in a status `command` applies in, locked, with the
   * facts the checks and the fence decide on: the suppression list's reason, the campaign's pause
   * and the kill switch.
   */
  async loadFacts(client: Queryable, claims: readonly Claim[], command: 'Check' | 'Fence'): Promise<FactsRow[]> {
    if (claims.length === 0) return [];
    const { rows } = await client.query<DecidableRow & SendFacts>(
      factsQuery(command === 'Check' ? CHECKABLE : FENCEABLE),
      [claims.map((c) => c.sendId), claims.map((c) => c.token)],
    );
    return rows.map(({ suppression, paused, sendingPaused, ...row }) => ({
      row,
      facts: { suppression, paused, sendingPaused },
    }));
  }

  /**
   * The decider's Fenced, applied set-based where the gate lets it through (gateOf is null, as
   * gate-sql.ts generates it from GATE): `claimed` → `sending` under each claim's token, one more
   * attempt, a lease, and the identifier key the attempt's Message-ID is signed with. Returns the
   * fenced rows; the rest are the workflow's to decide on their facts.
   */
  async fenceClear(client: Queryable, claims: readonly Claim[], messageKeyId: string): Promise<SendRow[]> {
    if (claims.length === 0) return [];
    const { rows } = await client.query<SendRow>(
      `UPDATE sends SET status = ${FENCE.to}, attempts = attempts + 1, updated_at = now(), attempt_started_at = now(),
              last_attempt_in_doubt = false,
              lease_expires_at = now() + make_interval(secs => $3::float8 / 1000), message_key_id = $4
       FROM unnest($1::uuid[], $2::uuid[]) AS f(send_id, token)
       WHERE sends.send_id = f.send_id AND sends.claim_token = f.token AND sends.status IN (${FENCE.from})
         AND ${FENCE_GATE_CLEAR}
       RETURNING ${sendColumns('sends.')}`,
      [claims.map((c) => c.sendId), claims.map((c) => c.token), this.leaseMs, messageKeyId],
    );
    return rows;
  }

  /**
   * The exposure backstop's facts: registers the experiment exposure of every fenced send of an
   * experiment (one variant per experiment and candidate, whatever the batch holds), and returns
   * each with the variant its candidate was first sent.
   */
  async registerExposures(client: Queryable, fenced: readonly SendRow[]): Promise<ExposedRow[]> {
    const exposed = fenced.filter((row) => row.experimentId !== null && row.variant !== null);
    if (exposed.length === 0) return [];
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
    return exposed.map((row) => ({
      row,
      exposedVariant:
        variantOf.get(`${row.experimentId as string}\u0000${row.candidateKey}`) ?? (row.variant as string),
    }));
  }

  /**
   * `record` for many fenced sends in one transaction (group commit): one conditional UPDATE and one
   * outbox insert for all. Returns, per entry, false if the send was taken away meanwhile.
   */
  async recordMany(entries: readonly RecordEntry[]): Promise<boolean[]> {
    if (entries.length === 0) return [];
    let settled: readonly SettledSend[] = [];
    const recorded = await withTransaction(this.pool, async (client) => {
      const moves = entries.map((e) => transition(e.command, e.event.type));
      const updated = await client.query<{ sendId: string; at: Date }>(
        `UPDATE sends SET status = r.to_status, reason = r.reason,
                provider_message_id = coalesce(r.provider_message_id, sends.provider_message_id),
                sent_at = CASE WHEN r.accepted THEN now() ELSE sends.sent_at END,
                lease_expires_at = CASE WHEN r.verdict_ms > 0 THEN now() + make_interval(secs => r.verdict_ms / 1000) END,
                last_attempt_in_doubt = sends.last_attempt_in_doubt OR r.to_status = 'ambiguous',
                updated_at = now()
         FROM unnest($1::uuid[], $2::uuid[], $3::text[], $4::text[], $5::text[], $6::text[], $7::bool[], $8::float8[])
           AS r(send_id, token, from_statuses, to_status, reason, provider_message_id, accepted, verdict_ms)
         WHERE sends.send_id = r.send_id AND sends.claim_token = r.token
           AND sends.status = ANY(string_to_array(r.from_statuses, ','))
         RETURNING sends.send_id AS "sendId", sends.updated_at AS at`,
        [
          entries.map((e) => e.claim.sendId),
          entries.map((e) => e.claim.token),
          moves.map((t) => t.from.join(',')),
          moves.map((t) => t.to),
          entries.map((e) => reasonOf(e.event) ?? null),
          entries.map((e) => (e.event.type === 'Sent' ? e.event.providerMessageId : null)),
          entries.map((e) => e.event.type === 'Sent'),
          entries.map((e) => (e.event.type === 'Ambiguous' ? e.event.verdictWithinMs : null)),
        ],
      );
      const at = new Map(updated.rows.map((r) => [r.sendId, r.at]));
      await enqueueEvents(
        client,
        entries.flatMap((e) => {
          const recordedAt = at.get(e.claim.sendId);
          return recordedAt ? this.recordEvent(e.row, e.event, recordedAt, e.row.attempts) : [];
        }),
      );
      await this.suppressBounced(
        client,
        entries.filter((e) => at.has(e.claim.sendId)),
      );
      // Evidence that came while the send was in the provider call is applied as it becomes ambiguous.
      const madeAmbiguous = entries.filter((e) => e.event.type === 'Ambiguous' && at.has(e.claim.sendId));
      if (madeAmbiguous.length > 0)
        settled = await this.settleByEvidence(client, { sendIds: madeAmbiguous.map((e) => e.claim.sendId) });
      return entries.map((e) => at.has(e.claim.sendId));
    });
    if (settled.length > 0) this.onSettled?.(settled);
    return recorded;
  }

  /**
   * A failure the decider says suppresses the address (a hard bounce) writes the suppression with
   * the record, in its transaction; an address already on the list keeps its reason.
   */
  private async suppressBounced(client: Queryable, recorded: readonly RecordEntry[]): Promise<void> {
    for (const { event, row } of recorded) {
      if (event.type !== 'Failed' || event.suppress === undefined) continue;
      if (!this.suppressions) throw new Error('a hard bounce to record, and no suppression list to write it to');
      await this.suppressions.suppressIn(client, {
        emailNorm: row.emailNorm,
        reason: event.suppress,
        source: 'smtp',
        note: event.reason,
        sendId: row.sendId,
        campaignId: row.campaignId,
        correlationId: row.correlationId,
        replace: false,
      });
    }
  }

  /**
   * Delivery evidence applied (ADR 009): the sends in `scope` that have evidence stored
   * (feedback_events of an EVIDENCE_KINDS kind naming them), locked, each decided by SettleByEvidence
   * and settled `sent` with its SendRecorded, in the caller's transaction. Named sends are locked
   * whatever their status, so a worker recording the same send waits for this transaction and then
   * sees its evidence (recordMany settles what it made ambiguous). The sweep skips locked rows.
   */
  async settleByEvidence(client: Queryable, scope: EvidenceScope): Promise<SettledSend[]> {
    const named = 'sendIds' in scope;
    if (named && scope.sendIds.length === 0) return [];
    const { rows } = await client.query<DecidableRow & { evidenceSource: EvidenceSource; evidenceId: string | null }>(
      named
        ? `SELECT ${decidableColumns('s.')}, ev.source AS "evidenceSource", ev.provider_message_id AS "evidenceId"
           FROM sends s CROSS JOIN LATERAL (${FIRST_EVIDENCE}) ev
           WHERE s.send_id = ANY($1::uuid[]) ORDER BY s.send_id FOR UPDATE OF s`
        : // No ORDER BY: ordered by send_id the planner walks the primary key through every row.
          `SELECT ${decidableColumns('s.')}, ev.source AS "evidenceSource", ev.provider_message_id AS "evidenceId"
           FROM sends s CROSS JOIN LATERAL (${FIRST_EVIDENCE}) ev
           WHERE s.status IN ('claimed', 'sending') AND s.lease_expires_at < now() AND s.attempts > 0
           LIMIT $1 FOR UPDATE OF s SKIP LOCKED`,
      named ? [scope.sendIds] : [scope.limit],
    );
    const decided = rows.flatMap(({ evidenceSource, evidenceId, ...row }) => {
      const [event] = decide(stateOf(row), {
        type: 'SettleByEvidence',
        source: evidenceSource,
        providerMessageId: evidenceId,
        lastAttemptInDoubt: row.lastAttemptInDoubt,
      });
      return event?.type === 'SettledByEvidence' ? [{ row, event }] : [];
    });
    if (decided.length === 0) return [];
    const updated = await client.query<{ sendId: string; at: Date; from: string }>(
      `UPDATE sends SET status = ${SETTLE_BY_EVIDENCE.to}, reason = r.reason, lease_expires_at = NULL,
              provider_message_id = coalesce(r.provider_message_id, sends.provider_message_id),
              sent_at = coalesce(sends.sent_at, now()), updated_at = now()
       FROM unnest($1::uuid[], $2::text[], $3::text[], $4::text[]) AS r(send_id, from_status, reason, provider_message_id)
       WHERE sends.send_id = r.send_id AND sends.status = r.from_status
       RETURNING sends.send_id AS "sendId", sends.updated_at AS at, r.from_status AS from`,
      [
        decided.map((d) => d.row.sendId),
        decided.map((d) => d.row.status),
        decided.map((d) => reasonOf(d.event) ?? null),
        decided.map((d) => d.event.providerMessageId),
      ],
    );
    const at = new Map(updated.rows.map((u) => [u.sendId, u]));
    await enqueueEvents(
      client,
      decided.flatMap((d) => {
        const done = at.get(d.row.sendId);
        return done ? this.recordEvent(d.row, d.event, done.at, d.row.attempts) : [];
      }),
    );
    return decided.flatMap((d) => {
      const done = at.get(d.row.sendId);
      return done
        ? [{ sendId: d.row.sendId, campaignId: d.row.campaignId, source: d.event.source, from: done.from }]
        : [];
    });
  }

  /**
   * How much longer delivery evidence may arrive for the send's last attempt: `windowMs` after it
   * started, on the database clock; 0 when it has passed (or the send was never attempted).
   */
  async evidenceDueMs(sendId: string, windowMs: number): Promise<number> {
    const { rows } = await this.pool.query<{ ms: number | null }>(
      `SELECT greatest(0, extract(epoch FROM (attempt_started_at + make_interval(secs => $2::float8 / 1000) - now())) * 1000)::float8 AS ms
       FROM sends WHERE send_id = $1`,
      [sendId, windowMs],
    );
    return Math.ceil(rows[0]?.ms ?? 0);
  }

  /** The reconciler's evidence sweep (EvidenceScope), in its own transaction: the sends it settled. */
  async settleStoredEvidence(limit: number): Promise<readonly SettledSend[]> {
    const settled = await withTransaction(this.pool, (client) => this.settleByEvidence(client, { limit }));
    if (settled.length > 0) this.onSettled?.(settled);
    return settled;
  }

  /** Records the provider's verdict for a fenced send. Returns false if the send was taken away. */
  async record(entry: RecordEntry): Promise<boolean> {
    return (await this.recordMany([entry]))[0] as boolean;
  }

  /**
   * The provider certainly did not take it: back to claimed, retried after `retryInMs`. From
   * `ambiguous` too under the same token: a provider's late refusal settles what the timeout left open.
   */
  async retryLater(
    claim: Claim,
    command: RecordEntry['command'],
    event: Extract<ResultEvent, { type: 'RetryScheduled' }>,
  ): Promise<boolean> {
    const move = sqlTransition(transition(command, event.type));
    const result = await this.pool.query(
      `UPDATE sends SET status = ${move.to}, reason = $3, updated_at = now(),
              lease_expires_at = now() + make_interval(secs => $4::float8 / 1000)
       WHERE send_id = $1 AND claim_token = $2 AND status IN (${move.from})`,
      [claim.sendId, claim.token, reasonOf(event) ?? null, event.retryInMs],
    );
    return (result.rowCount ?? 0) > 0;
  }

  /**
   * An `ambiguous` send whose provider may still answer (a late reply is awaited until `withinMs`
   * from now): its lease marks the wait, so no operator retry mails a second copy meanwhile, on any
   * instance. `withinMs` 0 ends the wait (the provider gave up without a verdict).
   */
  async awaitVerdict(claim: Claim, event: Extract<TransitionEvent, { type: 'VerdictAwaited' }>): Promise<void> {
    await this.pool.query(
      `UPDATE sends SET status = ${AWAIT_VERDICT.to},
              lease_expires_at = CASE WHEN $3::float8 > 0 THEN now() + make_interval(secs => $3::float8 / 1000) END
       WHERE send_id = $1 AND claim_token = $2 AND status IN (${AWAIT_VERDICT.from})`,
      [claim.sendId, claim.token, event.withinMs],
    );
  }

  /** Sends whose lease lapsed while `sending`: the provider may or may not have them. */
  async expiredSending(limit: number): Promise<InFlightSend[]> {
    const { rows } = await this.pool.query<InFlightRow>(
      `SELECT ${decidableColumns()}, ${IN_FLIGHT_TIMES} FROM sends
       WHERE status IN (${SENDING_LEASES}) AND lease_expires_at < now() ORDER BY lease_expires_at LIMIT $1`,
      [limit],
    );
    return rows.map(inFlightSend);
  }

  /**
   * Ambiguous sends a delivery lookup may settle (ADR 009): no late verdict awaited (no running
   * lease), and an attempt that started within `giveUpAfterMs` (older ones are an operator's, and
   * a provider's search may have forgotten them). Oldest first, at most `limit`.
   */
  async ambiguousToLookUp(limit: number, giveUpAfterMs: number): Promise<InFlightSend[]> {
    const { rows } = await this.pool.query<InFlightRow>(
      `SELECT ${decidableColumns()}, ${IN_FLIGHT_TIMES} FROM sends
       WHERE status IN (${LOOKUP_STATUSES}) AND (lease_expires_at IS NULL OR lease_expires_at < now())
         AND attempt_started_at > now() - make_interval(secs => $2::float8 / 1000)
       ORDER BY attempt_started_at LIMIT $1`,
      [limit, giveUpAfterMs],
    );
    return rows.map(inFlightSend);
  }

  /**
   * A send in flight whose lookup cannot decide yet: its lease is pushed `withinMs`, so no sweep (on
   * any instance) asks again before. For an ambiguous send the lease also says a verdict is awaited,
   * which keeps an operator's retry waiting for the lookup's answer (domain/send.ts).
   */
  async extendLease(
    claim: Claim,
    command: Extract<CommandType, 'ExpireSendingLease' | 'LookUp'>,
    event: Extract<TransitionEvent, { type: 'LookupDeferred' | 'VerdictAwaited' }>,
  ): Promise<boolean> {
    const move = sqlTransition(transition(command, event.type));
    const result = await this.pool.query(
      `UPDATE sends SET status = ${move.to}, lease_expires_at = now() + make_interval(secs => $3::float8 / 1000)
       WHERE send_id = $1 AND claim_token = $2 AND status IN (${move.from})`,
      [claim.sendId, claim.token, event.withinMs],
    );
    return (result.rowCount ?? 0) > 0;
  }

  /**
   * Hands held sends back as lapsed claims, so the reconciler sends each once: a campaign's (after
   * its resume), or every campaign's (`null`, after the kill switch's). The decider's Resumed,
   * applied where nothing holds the send any more (holdOf is null, as gate-sql.ts generates it from
   * GATE): its campaign is not paused and the switch is off, as this transaction sees them; a send
   * another pause still holds stays held.
   */
  async releaseHeld(client: Queryable, campaignId: string | null): Promise<number> {
    // Resumed leaves no reason (reasonOf): the pause's reason no longer holds.
    const released = await client.query(
      `UPDATE sends SET status = ${RESUME.to}, claim_token = gen_random_uuid(), lease_expires_at = now(), reason = NULL,
              updated_at = now()
       WHERE status IN (${RESUME.from}) AND ($1::text IS NULL OR campaign_id = $1) AND ${RESUME_HOLD_CLEAR}`,
      [campaignId],
    );
    return released.rowCount ?? 0;
  }

  /**
   * Ambiguous sends that the imported provider history `importId` shows delivered (the history row
   * carries the send's Message-ID), locked, each with the delivery it shows first.
   */
  async loadHistoryDeliveries(client: Queryable, importId: string): Promise<HistoryDelivery[]> {
    const { rows } = await client.query<DecidableRow & { historyMessageId: string; historySentAt: Date }>(
      `SELECT ${decidableColumns('s.')}, h.provider_message_id AS "historyMessageId", h.sent_at AS "historySentAt"
       FROM sends s
       JOIN LATERAL (SELECT provider_message_id, sent_at FROM provider_history
                     WHERE import_id = $1 AND send_id = s.send_id ORDER BY sent_at, line LIMIT 1) h ON true
       WHERE s.status IN (${LOOKUP_STATUSES})
       ORDER BY s.send_id
       FOR UPDATE OF s`,
      [importId],
    );
    return rows.map(({ historyMessageId, historySentAt, ...row }) => ({
      row,
      providerMessageId: historyMessageId,
      sentAt: historySentAt,
    }));
  }

  /**
   * Records the decided LookUp → Sent of sends a history shows delivered, at the time the history
   * gives, with their SendRecorded, in the import's transaction. Returns how many.
   */
  async recordHistorySent(
    client: Queryable,
    decided: ReadonlyArray<{
      readonly row: DecidableRow;
      readonly event: Extract<TransitionEvent, { type: 'Sent' }>;
      readonly sentAt: Date;
    }>,
  ): Promise<number> {
    if (decided.length === 0) return 0;
    const move = sqlTransition(transition('LookUp', 'Sent'));
    const updated = await client.query<{ sendId: string; at: Date }>(
      `UPDATE sends SET status = ${move.to}, reason = NULL, provider_message_id = r.provider_message_id,
              sent_at = r.sent_at, lease_expires_at = NULL, updated_at = now()
       FROM unnest($1::uuid[], $2::uuid[], $3::text[], $4::timestamptz[]) AS r(send_id, token, provider_message_id, sent_at)
       WHERE sends.send_id = r.send_id AND sends.claim_token = r.token AND sends.status IN (${move.from})
       RETURNING sends.send_id AS "sendId", sends.updated_at AS at`,
      [
        decided.map((d) => d.row.sendId),
        decided.map((d) => d.row.token),
        decided.map((d) => d.event.providerMessageId),
        decided.map((d) => d.sentAt),
      ],
    );
    const at = new Map(updated.rows.map((u) => [u.sendId, u.at]));
    await enqueueEvents(
      client,
      decided.flatMap((d) => {
        const recordedAt = at.get(d.row.sendId);
        return recordedAt ? this.recordEvent(d.row, d.event, recordedAt, d.row.attempts) : [];
      }),
    );
    return updated.rows.length;
  }

  /** Sends past the fence whose provider call has not been recorded: they may still deliver. */
  async inFlightCount(): Promise<number> {
    const { rows } = await this.pool.query<{ n: number }>(
      `SELECT count(*)::int AS n FROM sends WHERE status IN (${IN_FLIGHT})`,
    );
    return rows[0]?.n ?? 0;
  }

  /** The rows of `sendIds`, locked for the transaction; a send not stored is absent. */
  async lockRows(client: Queryable, sendIds: readonly string[]): Promise<Map<string, DecidableRow>> {
    const { rows } = await client.query<DecidableRow>(
      `SELECT ${decidableColumns()} FROM sends WHERE send_id = ANY($1::uuid[]) FOR UPDATE`,
      [sendIds],
    );
    return new Map(rows.map((row) => [row.sendId, row]));
  }

  /** Applies an operator's decided resolution of an ambiguous send this transaction holds. */
  async applyResolution(
    client: Queryable,
    row: DecidableRow,
    event: Extract<TransitionEvent, { type: 'ResolvedAsSent' | 'ResolvedForRetry' }>,
  ): Promise<void> {
    const move = sqlTransition(transition('Resolve', event.type));
    if (event.type === 'ResolvedAsSent') {
      const updated = await client.query<{ at: Date }>(
        `UPDATE sends SET status = ${move.to}, sent_at = coalesce(sent_at, now()), reason = $2, updated_at = now()
         WHERE send_id = $1 AND status IN (${move.from}) RETURNING updated_at AS at`,
        [row.sendId, reasonOf(event) ?? null],
      );
      await enqueueEvents(client, this.recordEvent(row, event, updated.rows[0]?.at as Date, row.attempts));
    } else {
      await client.query(
        `UPDATE sends SET status = ${move.to}, claim_token = $2, lease_expires_at = now(), reason = $3, updated_at = now()
         WHERE send_id = $1 AND status IN (${move.from})`,
        [row.sendId, event.token, reasonOf(event) ?? null],
      );
    }
  }
}
