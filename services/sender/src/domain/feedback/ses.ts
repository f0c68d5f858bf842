/**
 * Amazon SES notifications (the `Message` of a verified SNS Notification): both the identity
 * feedback notifications (`notificationType`) and configuration-set event publishing (`eventType`),
 * per the SES developer guide's "Amazon SNS notification contents" and "event data" pages.
 *
 *   Bounce         bounceType Permanent -> hard_bounce; Transient, Undetermined (or another) -> soft_bounce;
 *                  one event per bouncedRecipients[].emailAddress, diagnostic from its status
 *   Complaint      complaint per complainedRecipients[].emailAddress; complaintFeedbackType
 *                  `not-spam` (the recipient said it is not spam) -> other
 *   Delivery       delivered per delivery.recipients[]
 *   DeliveryDelay  soft_bounce per deliveryDelay.delayedRecipients[].emailAddress
 *   anything else  (Send, Reject, Open, Click, Rendering Failure, Subscription, SES's setup
 *                  test message) no events, counted as ignored
 *
 * Our Message-ID comes from `mail.commonHeaders.messageId`, else the `Message-ID` of `mail.headers`
 * (SES rewrites the header when it sends, and reports the original there); `mail.messageId` is
 * SES's own id. A notification naming more than `maxRecipients` recipients is refused whole: SES
 * sends to at most 50 per message, so such a list is not SES's.
 */
import { jsonDepthProblem } from '@outreach/contracts';
import {
  bestStatus,
  enhancedStatus,
  feedback,
  instant,
  invalid,
  normalizeMessageId,
  recipientOf,
  token,
  type DeliveryFeedback,
  type FeedbackKind,
  type FeedbackParse,
} from './feedback.js';

export interface SesLimits {
  readonly maxRecipients: number;
  /** `mail.headers` entries looked through for the Message-ID. */
  readonly maxHeaders: number;
}

export const DEFAULT_SES_LIMITS: SesLimits = { maxRecipients: 100, maxHeaders: 200 };

export interface SesContext {
  readonly now: Date;
  /** The SNS MessageId: the same notification retried by SNS keeps it. */
  readonly eventId?: string;
  /** When an event carries no time of its own (the SNS Timestamp). */
  readonly fallbackAt?: Date;
}

type Json = Record<string, unknown>;

function object(value: unknown): Json | undefined {
  return typeof value === 'object' && value !== null && !Array.isArray(value) ? (value as Json) : undefined;
}

/** The feedback in one SES notification (`message` is the SNS `Message` string). */
export function parseSesNotification(
  message: string,
  context: SesContext,
  limits: SesLimits = DEFAULT_SES_LIMITS,
): FeedbackParse {
  // The Message is signed by SNS but written by SES: still bounded before JSON.parse takes any depth.
  const tooDeep = jsonDepthProblem(message);
  if (tooDeep !== undefined) return invalid(`SES notification: ${tooDeep}`);
  let value: unknown;
  try {
    value = JSON.parse(message);
  } catch {
    return invalid('SES notification is not JSON');
  }
  const notification = object(value);
  if (!notification) return invalid('SES notification is not a JSON object');
  const type = notification.notificationType ?? notification.eventType;
  if (typeof type !== 'string') return invalid('SES notification has no notificationType or eventType');
  const mail = object(notification.mail) ?? {};
  const common = {
    messageId: messageIdOf(mail, limits.maxHeaders),
    providerMessageId: token(mail.messageId, 256),
    eventId: token(context.eventId, 256),
  };
  const fallback = context.fallbackAt ?? instant(mail.timestamp, context.now);

  switch (type) {
    case 'Bounce': {
      const bounce = object(notification.bounce);
      if (!bounce) return invalid('SES Bounce has no bounce object');
      const kind: FeedbackKind = bounce.bounceType === 'Permanent' ? 'hard_bounce' : 'soft_bounce';
      const at = instant(bounce.timestamp, context.now, fallback);
      return recipients(bounce.bouncedRecipients, limits, (entry) => {
        const r = object(entry);
        const recipient = recipientOf(r?.emailAddress);
        if (!r || recipient === undefined) return undefined;
        return feedback(kind, 'ses', recipient, at, {
          ...common,
          diagnostic: bestStatus(enhancedStatus(r.status), r.diagnosticCode),
          subtype: token(bounce.bounceSubType, 64),
        });
      });
    }
    case 'Complaint': {
      const complaint = object(notification.complaint);
      if (!complaint) return invalid('SES Complaint has no complaint object');
      const feedbackType = token(complaint.complaintFeedbackType, 64);
      const kind: FeedbackKind = feedbackType === 'not-spam' ? 'other' : 'complaint';
      const at = instant(complaint.timestamp, context.now, fallback);
      return recipients(complaint.complainedRecipients, limits, (entry) => {
        const recipient = recipientOf(object(entry)?.emailAddress);
        if (recipient === undefined) return undefined;
        return feedback(kind, 'ses', recipient, at, {
          ...common,
          subtype: feedbackType ?? token(complaint.complaintSubType, 64),
        });
      });
    }
    case 'Delivery': {
      const delivery = object(notification.delivery);
      if (!delivery) return invalid('SES Delivery has no delivery object');
      const at = instant(delivery.timestamp, context.now, fallback);
      return recipients(delivery.recipients, limits, (entry) => {
        const recipient = recipientOf(entry);
        return recipient === undefined ? undefined : feedback('delivered', 'ses', recipient, at, common);
      });
    }
    case 'DeliveryDelay': {
      const delay = object(notification.deliveryDelay);
      if (!delay) return invalid('SES DeliveryDelay has no deliveryDelay object');
      const at = instant(delay.timestamp, context.now, fallback);
      return recipients(delay.delayedRecipients, limits, (entry) => {
        const r = object(entry);
        const recipient = recipientOf(r?.emailAddress);
        if (!r || recipient === undefined) return undefined;
        return feedback('soft_bounce', 'ses', recipient, at, {
          ...common,
          diagnostic: bestStatus(enhancedStatus(r.status), r.diagnosticCode),
          subtype: token(delay.delayType, 64),
        });
      });
    }
    default:
      return { kind: 'ok', events: [], ignored: 1 };
  }
}

function recipients(
  list: unknown,
  limits: SesLimits,
  toFeedback: (entry: unknown) => DeliveryFeedback | undefined,
): FeedbackParse {
  if (!Array.isArray(list)) return invalid('SES notification has no recipient list');
  if (list.length > limits.maxRecipients)
    return invalid(`SES notification names more than ${limits.maxRecipients} recipients`);
  const events: DeliveryFeedback[] = [];
  let ignored = 0;
  for (const entry of list) {
    const event = toFeedback(entry);
    if (event) events.push(event);
    else ignored++;
  }
  return { kind: 'ok', events, ignored };
}

function messageIdOf(mail: Json, maxHeaders: number): string | undefined {
  const fromCommon = normalizeMessageId(object(mail.commonHeaders)?.messageId);
  if (fromCommon !== undefined) return fromCommon;
  if (!Array.isArray(mail.headers)) return undefined;
  for (const header of mail.headers.slice(0, maxHeaders)) {
    const h = object(header);
    if (typeof h?.name === 'string' && h.name.toLowerCase() === 'message-id') return normalizeMessageId(h.value);
  }
  return undefined;
}
