/**
 * Delivery feedback taken in (`feedback_events`, `soft_bounced_sends`), with the suppressions it
 * causes, in one transaction per request: a report is either seen and acted on, or neither (the
 * provider's retry then finds nothing and does it all). A report seen before does nothing again.
 */
import { withTransaction } from '@outreach/shared';
import { emailHash, type EmailHashKey } from '@outreach/contracts';
import type { Pool } from 'pg';
import type { DeliveryFeedback } from '../domain/feedback/index.js';
import { suppressionSourceOf, type FeedbackDecision, type SendRef } from '../domain/suppression.js';
import type { SendsRepository, SettledSend } from './sends-repository.js';
import type { SuppressionsRepository } from './suppressions-repository.js';

export interface FeedbackEntry {
  readonly feedback: DeliveryFeedback;
  /** The dedupe id (domain: feedbackEventId). */
  readonly eventId: string;
  readonly decision: FeedbackDecision;
}

export interface FeedbackApplied {
  /** Indexes of the entries seen for the first time; the rest were seen before (a provider's retry). */
  readonly fresh: ReadonlySet<number>;
  /** Addresses this request put on the suppression list. */
  readonly suppressed: number;
  /** Sends whose first soft bounce this was: one failure each toward their campaign's auto-pause. */
  readonly softBounced: readonly SendRef[];
  readonly recorded: number;
  readonly ignored: number;
  /** New delivery evidence naming a send (whether or not it settled one). */
  readonly evidence: number;
  /** Sends this request's evidence settled `sent` (ADR 009). */
  readonly settled: readonly SettledSend[];
}

export class FeedbackRepository {
  constructor(
    private readonly pool: Pool,
    private readonly suppressions: SuppressionsRepository,
    private readonly hashKey: EmailHashKey,
    /** Where delivery evidence settles sends in doubt, in this transaction. */
    private readonly sends: Pick<SendsRepository, 'settleByEvidence'>,
  ) {}

  /**
   * Forgets feedback reports received more than `retentionDays` ago, and the soft bounces counted
   * that long ago: at most `batch` rows of each per call (through their age indexes, so a statement
   * holds its locks briefly). Returns how many of each went.
   */
  async purgeOlderThan(retentionDays: number, batch: number): Promise<{ reports: number; softBounces: number }> {
    const reports = await this.pool.query(
      `DELETE FROM feedback_events WHERE ctid = ANY(ARRAY(
         SELECT ctid FROM feedback_events WHERE received_at < now() - make_interval(days => $1) LIMIT $2))`,
      [retentionDays, batch],
    );
    const softBounces = await this.pool.query(
      `DELETE FROM soft_bounced_sends WHERE send_id = ANY(ARRAY(
         SELECT send_id FROM soft_bounced_sends WHERE counted_at < now() - make_interval(days => $1) LIMIT $2))`,
      [retentionDays, batch],
    );
    return { reports: reports.rowCount ?? 0, softBounces: softBounces.rowCount ?? 0 };
  }

  async apply(entries: readonly FeedbackEntry[], correlationId: string): Promise<FeedbackApplied> {
    if (entries.length === 0)
      return { fresh: new Set(), suppressed: 0, softBounced: [], recorded: 0, ignored: 0, evidence: 0, settled: [] };
    const hashes = entries.map((e) => emailHash(e.feedback.recipient, this.hashKey));
    return withTransaction(this.pool, async (client) => {
      const { rows } = await client.query<{ source: string; event_id: string; email_hash: string }>(
        `INSERT INTO feedback_events (source, event_id, email_hash, email_hash_key_id, kind, decision, send_id,
                                      campaign_id, diagnostic, subtype, occurred_at, provider_message_id)
         SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[], $7::uuid[],
                              $8::text[], $9::text[], $10::text[], $11::timestamptz[], $12::text[])
         ON CONFLICT DO NOTHING
         RETURNING source, event_id, email_hash`,
        [
          entries.map((e) => e.feedback.source),
          entries.map((e) => e.eventId),
          hashes,
          entries.map(() => this.hashKey.id),
          entries.map((e) => e.feedback.kind),
          entries.map((e) => e.decision.kind),
          entries.map((e) => e.decision.send?.sendId ?? null),
          entries.map((e) => e.decision.send?.campaignId ?? null),
          entries.map((e) => e.feedback.diagnostic ?? null),
          entries.map((e) => e.feedback.subtype ?? null),
          entries.map((e) => e.feedback.at),
          entries.map((e) => e.feedback.providerMessageId ?? null),
        ],
      );
      const fresh = new Set(rows.map((r) => `${r.source}\u0000${r.event_id}\u0000${r.email_hash}`));
      // Evidence first: it locks the sends it names (before any suppression row), and settles those
      // in doubt. Replays settle nothing new: their first delivery did, or the send was not in doubt
      // then and the stored evidence is applied when it is (recordMany, the reconciler's sweep).
      const evidenceFor = new Set<string>();
      for (const [i, entry] of entries.entries())
        if (
          entry.decision.kind === 'evidence' &&
          fresh.has(`${entry.feedback.source}\u0000${entry.eventId}\u0000${hashes[i] as string}`)
        )
          evidenceFor.add(entry.decision.send.sendId);
      const settled = await this.sends.settleByEvidence(client, { sendIds: [...evidenceFor] });
      let evidence = 0;
      let suppressed = 0;
      let recorded = 0;
      let ignored = 0;
      const soft: SendRef[] = [];
      const firstSeen = new Set<number>();
      // Suppressions are written in the addresses' order, so two deliveries naming the same addresses in
      // different orders (a provider's concurrent batches) queue on each other instead of deadlocking.
      const inAddressOrder = [...entries.keys()].sort((a, b) => {
        const x = (entries[a] as FeedbackEntry).feedback.recipient;
        const y = (entries[b] as FeedbackEntry).feedback.recipient;
        return x < y ? -1 : x > y ? 1 : a - b;
      });
      for (const i of inAddressOrder) {
        const entry = entries[i] as FeedbackEntry;
        // Claimed once: the same report twice in one body is a duplicate too.
        const key = `${entry.feedback.source}\u0000${entry.eventId}\u0000${hashes[i] as string}`;
        if (!fresh.delete(key)) continue;
        firstSeen.add(i);
        const { decision } = entry;
        switch (decision.kind) {
          case 'suppress': {
            const source = suppressionSourceOf(entry.feedback.source);
            if (source === undefined) throw new Error(`${entry.feedback.source} feedback cannot suppress`);
            const { changed } = await this.suppressions.suppressIn(client, {
              emailNorm: entry.feedback.recipient,
              reason: decision.reason,
              source,
              note: null,
              sendId: decision.send?.sendId ?? null,
              campaignId: decision.send?.campaignId ?? null,
              correlationId,
              replace: false,
            });
            if (changed) suppressed++;
            break;
          }
          case 'count':
            soft.push(decision.send);
            break;
          case 'record':
            recorded++;
            break;
          case 'evidence':
            evidence++;
            break;
          case 'ignore':
            ignored++;
            break;
          default: {
            const exhaustive: never = decision;
            throw new Error(`unexpected decision ${JSON.stringify(exhaustive)}`);
          }
        }
      }
      const softBounced =
        soft.length === 0
          ? []
          : (
              await client.query<SendRef>(
                `INSERT INTO soft_bounced_sends (send_id, campaign_id)
                 SELECT * FROM unnest($1::uuid[], $2::text[])
                 ON CONFLICT DO NOTHING
                 RETURNING send_id AS "sendId", campaign_id AS "campaignId"`,
                [soft.map((s) => s.sendId), soft.map((s) => s.campaignId)],
              )
            ).rows;
      return { fresh: firstSeen, suppressed, softBounced, recorded, ignored, evidence, settled };
    });
  }
}
