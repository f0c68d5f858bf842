/**
 * Delivery feedback, from parsed reports to effects: name the send each report is about (our
 * Message-ID `<send identifier@MESSAGE_ID_DOMAIN>`, else the ENVID a DSN echoes, each naming a send
 * only when its MAC verifies, ADR 012), let the domain decide (domain/suppression.ts), apply it
 * in one transaction (suppressions and their events, the dedupe and audit rows), then count each
 * send's first soft bounce as a failure in the campaign's shared auto-pause window.
 *
 * The window is judged where every provider outcome is (the send pipeline), so a campaign whose
 * soft bounces cross the threshold is paused at its next send; one that sends nothing more needs no
 * pause. Counting happens after the commit: if it fails, the provider's retry finds the report seen
 * and the count is lost, which only delays a pause (logged); counting first could count twice.
 *
 * An identifier at our domain whose MAC does not verify (made up for someone else's sendId, a bare
 * `<sendId@domain>` of mail sent before ADR 012, a retired key) is evidence for nothing: the report
 * names no send, which for an unauthenticated DSN means it changes nothing, and it is counted
 * (`outreach_sender_feedback_unverified_ids_total`, and `unverified` in the answer).
 */
import { counter, type Counter, type Logger, type Registry } from '@outreach/shared';
import type { FeedbackApplied, FeedbackEntry, FeedbackRepository } from '../adapters/feedback-repository.js';
import type { ProviderAttempt } from '../adapters/incident-controls.js';
import type { SendQueries } from '../adapters/send-queries.js';
import type { DeliveryFeedback } from '../domain/feedback/index.js';
import type { IdentifierRefusal, MessageIdCheck, SendIdentifiers } from '../domain/identifiers.js';
import { isDeliveryEvidence } from '../domain/feedback/feedback.js';
import { decideFeedback, feedbackEventId } from '../domain/suppression.js';

export interface FeedbackIntakeOptions {
  readonly repository: Pick<FeedbackRepository, 'apply'>;
  readonly sends: Pick<SendQueries, 'named'>;
  /** The shared auto-pause window (adapters/incident-controls.ts SharedErrorWindow). */
  readonly errorWindow: { record(attempts: readonly ProviderAttempt[]): Promise<unknown> };
  /** MESSAGE_ID_DOMAIN: the domain of the Message-IDs the SMTP provider writes. */
  readonly messageIdDomain: string;
  /** Checks the MAC in a Message-ID or ENVID. */
  readonly identifiers: SendIdentifiers;
  readonly clock?: () => number;
  readonly logger: Logger;
  readonly metrics: Registry;
}

/** What a report's identifiers name: a send whose MAC verified, and why any other of ours did not. */
interface Naming {
  readonly sendId?: string;
  readonly unverified?: IdentifierRefusal;
}

export interface FeedbackTaken extends FeedbackApplied {
  /** New reports carrying an identifier of ours whose MAC did not verify (they named no send). */
  readonly unverified: number;
}

export class FeedbackIntake {
  private readonly reports: Counter;
  private readonly suppressions: Counter;
  private readonly unverified: Counter;
  private readonly evidence: Counter;
  private readonly settledByEvidence: Counter;

  constructor(private readonly options: FeedbackIntakeOptions) {
    const registry = options.metrics;
    this.reports = counter(registry, 'outreach_sender_feedback_reports_total');
    this.suppressions = counter(registry, 'outreach_sender_suppressions_added_total');
    this.unverified = counter(registry, 'outreach_sender_feedback_unverified_ids_total');
    this.evidence = counter(registry, 'outreach_sender_delivery_evidence_total');
    this.settledByEvidence = counter(registry, 'outreach_sender_settled_by_evidence_total');
  }

  /** The send a report names: by its Message-ID, else its ENVID, each only when its MAC verifies. */
  private nameOf(feedback: DeliveryFeedback, now: number): Naming {
    const { identifiers, messageIdDomain } = this.options;
    const checks: MessageIdCheck[] = [
      identifiers.checkMessageId(feedback.messageId, messageIdDomain, now),
      identifiers.checkEnvelopeId(feedback.envelopeId, now),
    ];
    const valid = checks.find((check) => check.kind === 'valid');
    if (valid) return { sendId: valid.sendId };
    const refused = checks.find((check) => check.kind === 'invalid');
    return refused ? { unverified: refused.reason } : {};
  }

  async take(events: readonly DeliveryFeedback[], correlationId: string): Promise<FeedbackTaken> {
    const now = (this.options.clock ?? Date.now)();
    const names = events.map((feedback) => this.nameOf(feedback, now));
    const named = await this.options.sends.named(names.flatMap((name) => name.sendId ?? []));
    const entries: FeedbackEntry[] = events.map((feedback, i) => {
      const { sendId } = names[i] as Naming;
      return {
        feedback,
        eventId: feedbackEventId(feedback),
        decision: decideFeedback(feedback, sendId === undefined ? undefined : named.get(sendId)),
      };
    });
    const applied = await this.options.repository.apply(entries, correlationId);
    let unverified = 0;
    const settled = new Set(applied.settled.map((s) => s.sendId));
    for (const i of applied.fresh) {
      const entry = entries[i] as FeedbackEntry;
      this.reports.inc({ source: entry.feedback.source, kind: entry.feedback.kind, decision: entry.decision.kind });
      if (entry.decision.kind === 'evidence')
        this.evidence.inc({
          source: entry.feedback.source,
          outcome: settled.has(entry.decision.send.sendId) ? 'settled' : 'kept',
        });
      else if (isDeliveryEvidence(entry.feedback.kind) && (names[i] as Naming).sendId !== undefined)
        // A verified identifier, and no stored send of it to that recipient: nothing to settle.
        this.evidence.inc({ source: entry.feedback.source, outcome: 'unmatched' });
      const refusal = (names[i] as Naming).unverified;
      if (refusal !== undefined) {
        unverified++;
        this.unverified.inc({ source: entry.feedback.source, reason: refusal });
      }
    }
    for (const send of applied.settled) this.settledByEvidence.inc({ source: send.source, from: send.from });
    if (applied.settled.length > 0)
      this.options.logger.info(
        { settled: applied.settled.map((s) => s.sendId), source: events[0]?.source, correlationId },
        'delivery evidence settled sends in doubt: recorded sent',
      );
    if (unverified > 0)
      this.options.logger.warn(
        { unverified, source: events[0]?.source, correlationId },
        'feedback named a send with an identifier whose MAC did not verify: it named no send',
      );
    const source = events[0]?.source;
    if (source !== undefined && applied.suppressed > 0) this.suppressions.inc({ source }, applied.suppressed);
    if (applied.softBounced.length > 0) {
      try {
        await this.options.errorWindow.record(
          applied.softBounced.map((s) => ({ campaignId: s.campaignId, failed: true })),
        );
      } catch (error) {
        this.options.logger.warn(
          { err: error, campaigns: [...new Set(applied.softBounced.map((s) => s.campaignId))] },
          'soft bounces could not be counted toward auto-pause',
        );
      }
    }
    return { ...applied, unverified };
  }

  /** For the unsubscribe route, which suppresses without a feedback report. */
  countSuppression(source: string): void {
    this.suppressions.inc({ source });
  }
}
