/**
 * A `sender.sends` row as the adapters read it, and the SQL fragments every query that names a
 * status builds from domain/send.ts: statuses are the domain's typed list and transitions, never
 * spelled by a query of its own.
 */
import {
  SEND_STATUSES,
  type Lease,
  type RecordedSend,
  type SendState,
  type SendStatus,
  type Status,
  type Transition,
} from '../domain/send.js';

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
  /**
   * The identifier key the last attempt's Message-ID and ENVID were signed with (ADR 012); null for
   * a send never attempted, or attempted before identifiers were signed (its Message-ID was the bare
   * `<sendId@domain>`).
   */
  readonly messageKeyId: string | null;
  /** The last attempt became ambiguous: it may have handed the message over (delivery evidence, ADR 009). */
  readonly lastAttemptInDoubt: boolean;
  readonly claimedAt: Date;
  readonly sentAt: Date | null;
  readonly updatedAt: Date;
  readonly leaseExpiresAt: Date | null;
}

/** A row read together with what the decider needs of it: its claim token and its lease, on the database clock. */
export type DecidableRow = SendRow & { readonly token: string | null; readonly lease: Lease };

export function sendColumns(p = ''): string {
  return `${p}send_id AS "sendId", ${p}campaign_id AS "campaignId", ${p}candidate_id AS "candidateId",
  ${p}candidate_key AS "candidateKey", ${p}email, ${p}email_norm AS "emailNorm", ${p}email_hash AS "emailHash",
  ${p}email_hash_key_id AS "emailHashKeyId", ${p}step,
  ${p}experiment_id AS "experimentId", ${p}variant, ${p}subject, ${p}body, ${p}request_id AS "requestId",
  ${p}correlation_id AS "correlationId", ${p}request_event_id::text AS "causationId",
  ${p}conversation_id AS "conversationId", ${p}source, ${p}status, ${p}attempts, ${p}reason,
  ${p}provider_message_id AS "providerMessageId", ${p}message_key_id AS "messageKeyId", ${p}last_attempt_in_doubt AS "lastAttemptInDoubt", ${p}claimed_at AS "claimedAt", ${p}sent_at AS "sentAt",
  ${p}updated_at AS "updatedAt", ${p}lease_expires_at AS "leaseExpiresAt"`;
}
export const SEND_COLUMNS = sendColumns();

/** `claim_token AS token` and the lease as the domain's Lease, judged by the database's `now()`. */
export function decidableColumns(p = ''): string {
  return `${sendColumns(p)}, ${p}claim_token AS token,
  CASE WHEN ${p}lease_expires_at IS NULL THEN 'none' WHEN ${p}lease_expires_at < now() THEN 'lapsed' ELSE 'running' END
    AS lease`;
}

export function stateOf(row: DecidableRow): SendState {
  return { status: row.status, token: row.token, lease: row.lease, attempts: row.attempts };
}

/** Statuses as SQL literals for `IN (…)`: only members of SEND_STATUSES, so never from input. */
export function sqlStatuses(statuses: readonly Status[]): string {
  const known = new Set<string>(SEND_STATUSES);
  if (statuses.length === 0 || statuses.some((s) => !known.has(s)))
    throw new Error(`not a list of send statuses: ${statuses.join(', ')}`);
  return statuses.map((s) => `'${s}'`).join(', ');
}

/** A transition as SQL: `from` for `status IN (…)`, `to` for `SET status = …`. */
export function sqlTransition(t: Transition): { readonly from: string; readonly to: string } {
  return { from: sqlStatuses(t.from), to: sqlStatuses([t.to]) };
}
