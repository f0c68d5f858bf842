/**
 * Suppressions from the outside world (#18): one-click unsubscribes, provider feedback (SES, SendGrid),
 * DSNs from the bounce mailbox, and the operator's API. What each report does is decided here, once:
 *
 *   hard_bounce  suppress (stored reason `bounce`)
 *   complaint    suppress (stored reason `complaint`)
 *   soft_bounce  a send we can name: one failure toward its campaign's auto-pause (once per message);
 *                otherwise only recorded
 *   delivered, accepted   delivery evidence for a send we can name (settles it if in doubt), else recorded
 *   other              recorded
 * A DSN is mail anyone can write: it does nothing unless its Message-ID (or ENVID) names one of our
 * sends to that same recipient, which it does only when its MAC verifies (domain/identifiers.ts). SES and SendGrid are signed, so a report we cannot tie to a send still
 * suppresses its (canonical) recipient.
 *
 * Suppressions are global per canonical address, as the send checks read them: no campaign or list
 * scope exists in the platform (docs/design.md, docs/seeds.md), so "never send to that address again" holds for
 * every campaign. The stored reason keeps the operator API's words (unsubscribe, bounce, complaint,
 * manual); `AddressSuppressed` says them in the event's words through EVENT_REASON, the one mapping.
 */
import { createHash } from 'node:crypto';
import { uuidV5, type AddressSuppressed } from '@outreach/contracts';
import type { DeliveryFeedback } from './feedback/feedback.js';

/** The stored reason (`suppressions.reason`, the operator API's vocabulary since the first migration). */
export const SUPPRESSION_REASONS = ['unsubscribe', 'bounce', 'complaint', 'manual'] as const;
export type SuppressionReason = (typeof SUPPRESSION_REASONS)[number];

/** Where a suppression came from (`suppressions.source`, `AddressSuppressed.source`). */
export const SUPPRESSION_SOURCES = ['unsubscribe', 'ses', 'sendgrid', 'dsn', 'smtp', 'api'] as const;
export type SuppressionSource = (typeof SUPPRESSION_SOURCES)[number];

/** The stored reason as `AddressSuppressed.reason` names it. */
export const EVENT_REASON = {
  unsubscribe: 'unsubscribed',
  bounce: 'hard_bounce',
  complaint: 'complaint',
  manual: 'operator',
} as const satisfies Record<SuppressionReason, AddressSuppressed['reason']>;

/** The send a report names, as the sender stored it. */
export interface SendMatch {
  readonly sendId: string;
  readonly campaignId: string;
  /** The canonical address that send went to. */
  readonly emailNorm: string;
}

export interface SendRef {
  readonly sendId: string;
  readonly campaignId: string;
}

export type FeedbackDecision =
  | { readonly kind: 'suppress'; readonly reason: 'bounce' | 'complaint'; readonly send: SendRef | null }
  /** A soft bounce of one of our messages: a failure toward its campaign's auto-pause (once per send). */
  | { readonly kind: 'count'; readonly send: SendRef }
  | { readonly kind: 'record'; readonly send: SendRef | null }
  /**
   * Delivery evidence (EVIDENCE_KINDS) for a send we can name, to that same recipient: it settles the
   * send `sent` if it is in doubt, now or when it comes to be (ADR 009, "Delivery evidence").
   */
  | { readonly kind: 'evidence'; readonly send: SendRef }
  /** Unauthenticated feedback (a DSN) about no send of ours to that recipient. */
  | { readonly kind: 'ignore'; readonly send: null };

export type FeedbackDecisionKind = FeedbackDecision['kind'];

/** What one report does, given the send its Message-ID names (whatever its recipient), if any. */
export function decideFeedback(feedback: DeliveryFeedback, named: SendMatch | undefined): FeedbackDecision {
  // A Message-ID of ours on a report about another recipient proves nothing about that recipient.
  const send = named !== undefined && named.emailNorm === feedback.recipient ? ref(named) : null;
  if (feedback.source === 'dsn' && send === null) return { kind: 'ignore', send: null };
  // Mailgun's failures are kept on Mailgun's own suppression list; ours takes the sources that
  // AddressSuppressed names (its `source` enum), so a Mailgun report suppresses nothing here yet.
  const suppresses = suppressionSourceOf(feedback.source) !== undefined;
  switch (feedback.kind) {
    case 'hard_bounce':
      return suppresses ? { kind: 'suppress', reason: 'bounce', send } : { kind: 'record', send };
    case 'complaint':
      return suppresses ? { kind: 'suppress', reason: 'complaint', send } : { kind: 'record', send };
    case 'soft_bounce':
      return send === null ? { kind: 'record', send } : { kind: 'count', send };
    case 'delivered':
    case 'accepted':
      return send === null ? { kind: 'record', send } : { kind: 'evidence', send };
    case 'other':
      return { kind: 'record', send };
    default: {
      const exhaustive: never = feedback.kind;
      throw new Error(`unexpected feedback kind ${String(exhaustive)}`);
    }
  }
}

/** The suppression source a feedback source writes, or undefined for one that suppresses nothing. */
export function suppressionSourceOf(source: DeliveryFeedback['source']): SuppressionSource | undefined {
  return (SUPPRESSION_SOURCES as readonly string[]).includes(source) ? (source as SuppressionSource) : undefined;
}

function ref(send: SendMatch): SendRef {
  return { sendId: send.sendId, campaignId: send.campaignId };
}

/**
 * The report's id for deduplication: the source's own (SNS MessageId, sg_event_id, a hash of the
 * DSN's Message-ID), or, for a report without one, a digest of what it says, so the same report
 * delivered twice is still one.
 */
export function feedbackEventId(feedback: DeliveryFeedback): string {
  if (feedback.eventId !== undefined) return feedback.eventId;
  const digest = createHash('sha256')
    .update(
      JSON.stringify([
        feedback.kind,
        feedback.messageId ?? null,
        feedback.envelopeId ?? null,
        feedback.providerMessageId ?? null,
        feedback.at.getTime(),
        feedback.diagnostic ?? null,
        feedback.subtype ?? null,
      ]),
    )
    .digest('hex');
  return `derived:${digest.slice(0, 40)}`;
}

export interface SuppressionFact {
  readonly emailHash: string;
  readonly emailHashKeyId: string;
  readonly reason: SuppressionReason;
  readonly source: SuppressionSource;
  readonly campaignId: string | null;
  readonly sendId: string | null;
  readonly correlationId: string;
  /** The database time the suppression was written. */
  readonly suppressedAt: number;
}

/**
 * The event for a suppression that was written (a new one, or an operator's change of reason). Its
 * id is derived from the write, so recording the same write twice yields one event.
 */
export function addressSuppressed(fact: SuppressionFact): AddressSuppressed {
  return {
    type: 'AddressSuppressed',
    eventId: uuidV5('address-suppressed', fact.emailHash, fact.reason, fact.source, String(fact.suppressedAt)),
    occurredAt: fact.suppressedAt,
    producer: 'sender',
    correlationId: fact.correlationId,
    causationId: null,
    emailHash: fact.emailHash,
    emailHashKeyId: fact.emailHashKeyId,
    reason: EVENT_REASON[fact.reason],
    source: fact.source,
    campaignId: fact.campaignId,
    sendId: fact.sendId,
  };
}
