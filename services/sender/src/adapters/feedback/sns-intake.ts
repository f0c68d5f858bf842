/**
 * SES feedback delivered by SNS to an HTTPS endpoint: one call per request, from raw body to
 * feedback. The order is the domain's (domain/feedback/sns.ts): parse the envelope, refuse a
 * topic not on the allow-list and a certificate URL off SNS's host (nothing fetched for either),
 * refuse a message whose signed Timestamp is outside the window (a replay; nothing fetched either),
 * fetch the certificate (cached), verify the signature, and only then read the SES notification.
 *
 * A SubscriptionConfirmation for an allowed topic is confirmed by a GET of the URL the domain
 * builds from the topic's region and the signed Token (never the SubscribeURL as sent), unless
 * `confirmSubscriptions` is false: then the URL is returned for an operator to open.
 *
 * Results: `invalid` (400: not an SNS message, or a verified one whose content is unreadable),
 * `refused` (403: topic, certificate URL, time window or signature), and the rest 200. Fetch failures (the
 * certificate, the confirmation) throw AppError UNAVAILABLE (503), which SNS retries.
 */
import { AppError } from '@outreach/shared';
import type { DeliveryFeedback } from '../../domain/feedback/feedback.js';
import { DEFAULT_SES_LIMITS, parseSesNotification, type SesLimits } from '../../domain/feedback/ses.js';
import {
  checkSnsOrigin,
  checkSnsTimestamp,
  DEFAULT_SNS_LIMITS,
  DEFAULT_SNS_TIME_WINDOW,
  parseSnsEnvelope,
  snsConfirmationUrl,
  verifySnsSignature,
  type SnsLimits,
  type SnsTimeWindow,
} from '../../domain/feedback/sns.js';
import type { SnsCertificateSource } from './sns-certificates.js';

export interface SnsFeedbackIntakeOptions {
  /** The topics SES publishes our feedback to (SES_SNS_TOPIC_ARNS); nothing else is accepted. */
  readonly topicArns: Iterable<string>;
  readonly certificates: SnsCertificateSource;
  /** Confirm subscriptions of allowed topics (default true). */
  readonly confirmSubscriptions?: boolean;
  /** For the confirmation GET; tests route it to a local server. */
  readonly fetch?: typeof globalThis.fetch;
  readonly confirmTimeoutMs?: number;
  readonly snsLimits?: SnsLimits;
  readonly sesLimits?: SesLimits;
  /** How old (and how far ahead) a message's signed Timestamp may be. */
  readonly timeWindow?: SnsTimeWindow;
}

export type SnsIntakeResult =
  | {
      readonly kind: 'feedback';
      readonly topicArn: string;
      readonly snsMessageId: string;
      readonly events: readonly DeliveryFeedback[];
      readonly ignored: number;
    }
  | { readonly kind: 'subscribed'; readonly topicArn: string }
  | { readonly kind: 'subscription'; readonly topicArn: string; readonly confirmationUrl: string }
  | { readonly kind: 'unsubscribed'; readonly topicArn: string }
  | { readonly kind: 'invalid'; readonly reason: string }
  | { readonly kind: 'refused'; readonly reason: string };

export class SnsFeedbackIntake {
  private readonly topicArns: ReadonlySet<string>;
  private readonly fetchImpl: typeof globalThis.fetch;

  constructor(private readonly options: SnsFeedbackIntakeOptions) {
    this.topicArns = new Set(options.topicArns);
    if (this.topicArns.size === 0) throw new Error('SnsFeedbackIntake needs at least one allowed topic ARN');
    this.fetchImpl = options.fetch ?? globalThis.fetch;
  }

  async receive(body: string | Uint8Array, now: Date): Promise<SnsIntakeResult> {
    const parsed = parseSnsEnvelope(body, this.options.snsLimits ?? DEFAULT_SNS_LIMITS);
    if (parsed.kind === 'invalid') return parsed;
    const { envelope } = parsed;
    const origin = checkSnsOrigin(envelope, this.topicArns);
    if (origin.kind === 'refused') return origin;
    const time = checkSnsTimestamp(envelope, now, this.options.timeWindow ?? DEFAULT_SNS_TIME_WINDOW);
    if (time.kind !== 'within') return time;
    const certificate = await this.options.certificates.get(origin.certificateUrl);
    const check = verifySnsSignature(envelope, certificate, now);
    if (check.kind === 'refused') return check;

    switch (envelope.type) {
      case 'Notification': {
        const fallbackAt = new Date(envelope.timestamp);
        const result = parseSesNotification(
          envelope.message,
          {
            now,
            eventId: envelope.messageId,
            ...(Number.isNaN(fallbackAt.getTime()) ? {} : { fallbackAt }),
          },
          this.options.sesLimits ?? DEFAULT_SES_LIMITS,
        );
        if (result.kind === 'invalid') return result;
        return {
          kind: 'feedback',
          topicArn: envelope.topicArn,
          snsMessageId: envelope.messageId,
          events: result.events,
          ignored: result.ignored,
        };
      }
      case 'SubscriptionConfirmation': {
        const confirmationUrl = snsConfirmationUrl(envelope);
        if (confirmationUrl === undefined)
          return { kind: 'invalid', reason: 'SNS confirmation without a usable Token' };
        if (this.options.confirmSubscriptions === false)
          return { kind: 'subscription', topicArn: envelope.topicArn, confirmationUrl };
        await this.confirm(confirmationUrl);
        return { kind: 'subscribed', topicArn: envelope.topicArn };
      }
      case 'UnsubscribeConfirmation':
        return { kind: 'unsubscribed', topicArn: envelope.topicArn };
    }
  }

  private async confirm(url: string): Promise<void> {
    const timeoutMs = this.options.confirmTimeoutMs ?? 5_000;
    const signal = AbortSignal.timeout(timeoutMs);
    let status: number;
    try {
      const response = await this.fetchImpl(url, { redirect: 'error', signal });
      status = response.status;
      // The answer is a small XML document we do not need; only its status matters.
      await response.body?.cancel().catch(() => undefined);
    } catch (error) {
      const failure = new AppError(
        'UNAVAILABLE',
        `SNS subscription confirmation: ${signal.aborted ? `no answer within ${timeoutMs} ms` : 'request failed'}`,
      );
      (failure as { cause?: unknown }).cause = error;
      throw failure;
    }
    if (status !== 200) throw new AppError('UNAVAILABLE', `SNS subscription confirmation: HTTP ${status}`);
  }
}
