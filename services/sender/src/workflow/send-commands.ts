/**
 * The send state machine's decisions on rows the repository loads (domain/send.ts decides,
 * adapters/sends-repository.ts loads and applies): each runs between a locked load and the apply,
 * in one transaction, with one statement per step for the whole batch (never one per row).
 * - a request whose slot another send holds: Claim → SkippedAsDuplicate;
 * - the checks: Check → Suppressed / Held on the facts read with the rows;
 * - the fence: Fenced set-based where the gate is clear (its SQL generated from GATE), then Fence →
 *   Suppressed / Held for the rest on their facts, and CheckExposure → ExposureConflicted for the
 *   fenced sends of an experiment whose candidate was sent another variant;
 * - an imported provider history: LookUp → Sent;
 * - an operator's resolution: Resolve, through the command seam (runCommands).
 */
import { randomUUID } from 'node:crypto';
import { runCommands, type AggregateStore } from '@outreach/shared';
import type { PoolClient } from 'pg';
import type { ValidSend } from '../domain/request.js';
import { decide, initialState, sendDecider, type Decision, type SendCommand, type SendState } from '../domain/send.js';
import { stateOf, type DecidableRow, type SendRow } from '../adapters/send-rows.js';
import type {
  Claim,
  ClaimConflict,
  Conflict,
  Ending,
  FenceResult,
  FreshClaim,
  SendsRepository,
} from '../adapters/sends-repository.js';

export type Resolution = 'resolved' | 'not_ambiguous' | 'verdict_pending' | 'evidence_pending' | 'not_found';

export class SendCommands {
  constructor(
    private readonly repository: SendsRepository,
    /** DELIVERY_EVIDENCE_WINDOW_MS: an operator's retry waits for it after the last attempt (ADR 009). */
    private readonly evidenceWindowMs = 0,
  ) {}

  /** Claims every send whose slot is free; a request whose slot another send holds is decided a duplicate. */
  async claim(sends: readonly ValidSend[]): Promise<{ claimed: FreshClaim[]; conflicts: Conflict[] }> {
    const { claimed, conflicts } = await this.repository.claim(sends);
    return { claimed, conflicts: conflicts.map(duplicateOf) };
  }

  /**
   * The pre-send checks for claims still held: the decider ends suppressed addresses, and holds
   * paused campaigns' sends and every send while the kill switch is on (with their SendRecorded);
   * the rest are returned, ready to wait for a rate token and fence.
   */
  async applyChecks(
    claims: readonly Claim[],
  ): Promise<{ ready: Array<Claim & { row: SendRow }>; suppressed: number; held: number }> {
    if (claims.length === 0) return { ready: [], suppressed: 0, held: 0 };
    return this.repository.transaction(async (client) => {
      const ready: Array<Claim & { row: SendRow }> = [];
      const ended: Ending[] = [];
      for (const { row, facts } of await this.repository.loadFacts(client, claims, 'Check')) {
        const token = row.token as string;
        const [event] = decide(stateOf(row), { type: 'Check', token, ...facts });
        if (event === undefined) ready.push({ sendId: row.sendId, token, row });
        else if (event.type !== 'Refused') ended.push({ command: 'Check', row, token, event });
      }
      await this.repository.end(client, ended);
      return {
        ready,
        suppressed: ended.filter((d) => d.event.type === 'Suppressed').length,
        held: ended.filter((d) => d.event.type === 'Held').length,
      };
    });
  }

  /**
   * Fences claims in one transaction (group commit): each claim's transition is still conditional
   * on its own token and status, so the result per claim is what fencing it alone would give:
   * `fenced`; `suppressed` if its address was suppressed meanwhile; `held` if its campaign or
   * sending is paused; `exposure_conflict` (failed) if its candidate was already sent another
   * variant of the experiment (the backstop: the exposure is registered in the same transaction);
   * and `lost` if it was taken over. Each fenced send records `messageKeyId`, the identifier key its
   * attempt's Message-ID is signed with.
   */
  async fenceMany(claims: readonly Claim[], messageKeyId: string): Promise<FenceResult[]> {
    if (claims.length === 0) return [];
    return this.repository.transaction(async (client) => {
      // The decider's Fenced, applied where every fact it needs is clear (gateOf is null).
      const rows = new Map(
        (await this.repository.fenceClear(client, claims, messageKeyId)).map((row) => [row.sendId, row]),
      );
      const unfenced = claims.filter((c) => !rows.has(c.sendId));
      const stopped = new Map<string, 'held' | 'suppressed'>();
      // The rest, still held under their tokens, are decided on their facts: suppressed or held.
      // One decided Fenced here had its pause or suppression lifted between the two statements:
      // it is left claimed, and its lapsing lease hands it to the reconciler.
      const ended: Ending[] = [];
      for (const { row, facts } of await this.repository.loadFacts(client, unfenced, 'Fence')) {
        const token = row.token as string;
        const [event] = decide(stateOf(row), { type: 'Fence', token, ...facts });
        if (event?.type !== 'Held' && event?.type !== 'Suppressed') continue;
        ended.push({ command: 'Fence', row, token, event });
        stopped.set(row.sendId, event.type === 'Held' ? 'held' : 'suppressed');
      }
      await this.repository.end(client, ended);
      const conflicts = await this.checkExposures(client, claims, [...rows.values()]);
      return claims.map((claim): FenceResult => {
        const conflict = conflicts.get(claim.sendId);
        if (conflict !== undefined) return { kind: 'exposure_conflict', exposedVariant: conflict };
        const row = rows.get(claim.sendId);
        if (row) return { kind: 'fenced', row };
        return { kind: stopped.get(claim.sendId) ?? 'lost' };
      });
    });
  }

  /** The exposure backstop: one variant per (experiment, candidate), whatever the batch holds. */
  private async checkExposures(
    client: PoolClient,
    claims: readonly Claim[],
    fenced: readonly SendRow[],
  ): Promise<Map<string, string>> {
    const conflicts = new Map<string, string>();
    const ended: Ending[] = [];
    for (const { row, exposedVariant } of await this.repository.registerExposures(client, fenced)) {
      const token = (claims.find((c) => c.sendId === row.sendId) as Claim).token;
      const state: SendState = { status: row.status, token, lease: 'running', attempts: row.attempts };
      const experimentId = row.experimentId as string;
      const variant = row.variant as string;
      const [event] = decide(state, { type: 'CheckExposure', token, experimentId, variant, exposedVariant });
      if (event?.type !== 'ExposureConflicted') continue;
      ended.push({ command: 'CheckExposure', row: { ...row, token, lease: state.lease }, token, event });
      conflicts.set(row.sendId, event.exposedVariant);
    }
    await this.repository.end(client, ended);
    return conflicts;
  }

  /**
   * Ambiguous sends that the imported provider history `importId` shows delivered: recorded `sent`
   * through the LookUp transition, in the import's transaction (`client`). Returns how many.
   */
  async resolveFromHistory(client: PoolClient, importId: string): Promise<number> {
    const deliveries = await this.repository.loadHistoryDeliveries(client, importId);
    const decided = deliveries.flatMap(({ row, providerMessageId, sentAt }) => {
      const lookup = { kind: 'sent', providerMessageId } as const;
      // A delivery the history shows is `sent` whatever the retry policy: it is never consulted.
      const policy = { maxAttempts: row.attempts, retryBackoffMs: 0, leaseMs: this.repository.leaseMs };
      const [event] = decide(stateOf(row), { type: 'LookUp', token: row.token as string, lookup, policy });
      return event?.type === 'Sent' ? [{ row, event, sentAt }] : [];
    });
    return this.repository.recordHistorySent(client, decided);
  }

  /** Operator resolution of an ambiguous send: it was sent after all, or it may be retried. */
  async resolveAmbiguous(sendId: string, resolution: 'sent' | 'retry'): Promise<Resolution> {
    // A fact of time, read before the lock: the window only ever closes, so a stale read errs towards waiting.
    const evidenceDueMs =
      resolution === 'retry' && this.evidenceWindowMs > 0
        ? await this.repository.evidenceDueMs(sendId, this.evidenceWindowMs)
        : 0;
    const command: SendCommand =
      resolution === 'sent'
        ? { type: 'Resolve', resolution }
        : { type: 'Resolve', resolution, newToken: randomUUID(), evidenceDueMs };
    const rows = new Map<string, DecidableRow>();
    const store: AggregateStore<string, SendState, SendCommand, Decision, Resolution> = {
      keyOf: () => sendId,
      load: async (client, keys) => {
        for (const [key, row] of await this.repository.lockRows(client, keys)) rows.set(key, row);
        return new Map([...rows].map(([key, row]) => [key, stateOf(row)]));
      },
      apply: async (client, decided) => {
        const row = rows.get(sendId);
        if (!row) return 'not_found';
        const event = decided[0]?.events[0];
        if (event?.type === 'Refused')
          return event.why === 'verdict_pending' || event.why === 'evidence_pending' ? event.why : 'not_ambiguous';
        if (event?.type !== 'ResolvedAsSent' && event?.type !== 'ResolvedForRetry')
          throw new Error(`resolving ${sendId} decided ${event?.type}`);
        await this.repository.applyResolution(client, row, event);
        return 'resolved';
      },
    };
    return runCommands(this.repository.pool, sendDecider, store, [command]);
  }
}

/** A request whose slot is taken: the request's own row (a redelivery), or a duplicate as the decider says. */
function duplicateOf(conflict: ClaimConflict): Conflict {
  if (conflict.kind === 'own') return conflict;
  const [event] = decide(initialState, { type: 'Claim', newToken: conflict.newToken, heldBy: conflict.heldBy });
  if (event?.type !== 'SkippedAsDuplicate') throw new Error(`a taken slot decided ${event?.type}`);
  return { kind: 'duplicate', send: conflict.send, event };
}
