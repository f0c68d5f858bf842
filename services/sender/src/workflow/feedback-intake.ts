/**
 * Delivery feedback, from parsed reports to effects: name the send each report is about (our
 * Message-ID `<sendId@MESSAGE_ID_DOMAIN>`), let the domain decide (domain/suppression.ts), apply it
 * in one transaction (suppressions and their events, the dedupe and audit rows), then count each
 * send's first soft bounce as a failure in the campaign's shared auto-pause window.
 *
 * The window is judged where every provider outcome is (the send pipeline), so a campaign whose
 * soft bounces cross the threshold is paused at its next send; one that sends nothing more needs no
 * pause. Counting happens after the commit: if it fails, the provider's retry finds the report seen
 * and the count is lost, which only delays a pause (logged); counting first could count twice.
 */
import { counter, type Counter, type Logger, type Registry } from '@outreach/shared';
import type { FeedbackApplied, FeedbackEntry, FeedbackRepository } from '../adapters/feedback-repository.js';
import type { ProviderAttempt } from '../adapters/incident-controls.js';
import type { SendQueries } from '../adapters/send-queries.js';
import type { DeliveryFeedback } from '../domain/feedback/index.js';
import { decideFeedback, feedbackEventId, sendIdOfMessageId } from '../domain/suppression.js';

export interface FeedbackIntakeOptions {
  readonly repository: Pick<FeedbackRepository, 'apply'>;
  readonly sends: Pick<SendQueries, 'named'>;
  /** The shared auto-pause window (adapters/incident-controls.ts SharedErrorWindow). */
  readonly errorWindow: { record(attempts: readonly ProviderAttempt[]): Promise<unknown> };
  /** MESSAGE_ID_DOMAIN: the domain of the Message-IDs the SMTP provider writes. */
  readonly messageIdDomain: string;
  readonly logger: Logger;
  readonly metrics: Registry;
}

export class FeedbackIntake {
  private readonly reports: Counter;
  private readonly suppressions: Counter;

  constructor(private readonly options: FeedbackIntakeOptions) {
    const registry = options.metrics;
    this.reports = counter(registry, 'outreach_sender_feedback_reports_total');
    this.suppressions = counter(registry, 'outreach_sender_suppressions_added_total');
  }

  async take(events: readonly DeliveryFeedback[], correlationId: string): Promise<FeedbackApplied> {
    const { messageIdDomain } = this.options;
    const named = await this.options.sends.named(
      events.flatMap((e) => sendIdOfMessageId(e.messageId, messageIdDomain) ?? []),
    );
    const entries: FeedbackEntry[] = events.map((feedback) => {
      const sendId = sendIdOfMessageId(feedback.messageId, messageIdDomain);
      return {
        feedback,
        eventId: feedbackEventId(feedback),
        decision: decideFeedback(feedback, sendId === undefined ? undefined : named.get(sendId)),
      };
    });
    const applied = await this.options.repository.apply(entries, correlationId);
    for (const i of applied.fresh) {
      const entry = entries[i] as FeedbackEntry;
      this.reports.inc({ source: entry.feedback.source, kind: entry.feedback.kind, decision: entry.decision.kind });
    }
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
    return applied;
  }

  /** For the unsubscribe route, which suppresses without a feedback report. */
  countSuppression(source: string): void {
    this.suppressions.inc({ source });
  }
}
