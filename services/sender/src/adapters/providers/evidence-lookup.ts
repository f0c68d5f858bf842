/**
 * The delivery lookup of a provider that reports every message it takes (ADR 009, "Delivery
 * evidence"): our own store of its evidence (`feedback_events` of a delivered or accepted kind, each
 * naming a send whose identifier verified) is the search. `PROVIDER_LOOKUP=evidence` says the operator
 * has set the provider or relay up to report every accepted message (SES Delivery events, SendGrid
 * `processed`, Mailgun `accepted`, success DSNs from the relay), within DELIVERY_EVIDENCE_WINDOW_MS:
 * so no evidence past that window is the provider's statement that it never took the message.
 *
 * Evidence reaches us only while our webhooks answer: a provider queues its reports while every
 * replica is down and retries them later. So absence is trusted only from a replica that has been
 * listening for a whole window: until then "not there" is `unavailable` (asked again later), and a
 * restart after an outage never retries a send whose evidence is still queued at the provider.
 * (An outage longer than the provider's own retry schedule needs a window that covers it: docs.)
 *
 * The Message-ID it is asked about is the one the attempt went out with; its sendId is the local part
 * up to the first dot (ADR 012). A Message-ID of another shape, or a database that does not answer, is
 * `unavailable`, never `not_found`.
 */
import type { Pool } from 'pg';
import { EVIDENCE_KINDS } from '../../domain/feedback/feedback.js';
import { bareMessageId, type DeliveryLookup, type LookupQuery, type LookupResult } from './lookup.js';

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

export class EvidenceLookup implements DeliveryLookup {
  readonly name = 'evidence';

  constructor(
    private readonly pool: Pool,
    /** DELIVERY_EVIDENCE_WINDOW_MS: how long after acceptance the evidence may still be on its way. */
    readonly settleMs: number,
    private readonly clock: () => number = Date.now,
    /** When this replica started taking evidence in (its webhooks answer from its start on). */
    private readonly listeningSince: number = clock(),
  ) {}

  async find(query: LookupQuery): Promise<LookupResult> {
    const sendId = bareMessageId(query.messageId).split('@')[0]?.split('.')[0] ?? '';
    if (!UUID.test(sendId)) return { kind: 'unavailable', reason: 'evidence: not one of our Message-IDs' };
    try {
      const { rows } = await this.pool.query<{ at: Date; providerId: string | null }>(
        // Only evidence received since the attempt asked about started (as the settling rule).
        `SELECT e.occurred_at AS at, e.provider_message_id AS "providerId" FROM feedback_events e
         JOIN sends s ON s.send_id = e.send_id
         WHERE e.send_id = $1 AND e.decision = 'evidence' AND e.kind = ANY($2::text[])
           AND e.received_at >= s.attempt_started_at
         ORDER BY e.occurred_at LIMIT 1`,
        [sendId, EVIDENCE_KINDS],
      );
      const row = rows[0];
      if (row === undefined)
        return this.clock() - this.listeningSince < this.settleMs
          ? { kind: 'unavailable', reason: 'evidence: listening for less than the window since this replica started' }
          : { kind: 'not_found' };
      return { kind: 'found', at: row.at, ...(row.providerId === null ? {} : { providerId: row.providerId }) };
    } catch {
      return { kind: 'unavailable', reason: 'evidence: database unavailable' };
    }
  }
}
