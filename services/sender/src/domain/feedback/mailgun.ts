/**
 * Mailgun's webhooks: their signature and their events (Mailgun docs, "Securing Webhooks" and the
 * webhook event payloads). One event per POST, as JSON:
 *
 *   { "signature":  { "timestamp": "<unix s>", "token": "<50 random characters>", "signature": "<hex>" },
 *     "event-data": { "event", "id", "timestamp", "recipient", "severity", "reason",
 *                     "message": { "headers": { "message-id" } }, "delivery-status": { ... } } }
 *
 * Signature: lower-case hex HMAC-SHA256, under the account's HTTP webhook signing key, of the
 * timestamp's text followed by the token, compared in constant time. Refused: a signature object
 * missing or of the wrong shape, a timestamp that is not Unix seconds or is outside the replay window
 * around `now`, a token that is not 16 to 128 letters and digits, a signature that is not 64 lower-case
 * hex digits, any other key.
 *
 * **The signature does not cover `event-data`.** Whoever holds one signed (timestamp, token) can post
 * it with any event until its timestamp leaves the window. The window bounds that; a route should
 * also take each token once (adapters/feedback/mailgun-intake.ts keeps the tokens it took within the
 * window). What a forged event could do is bounded besides: evidence acts only on a send named by a
 * Message-ID carrying our MAC (ADR 012), and Mailgun's failures suppress nothing here
 * (domain/suppression.ts).
 *
 * Events (anything else, opened, clicked, stored, rejected, ..., is ignored):
 *   accepted       accepted (Mailgun took the message for delivery: delivery evidence, ADR 009)
 *   delivered      delivered
 *   failed         severity `permanent` -> hard_bounce, `temporary` -> soft_bounce, other -> other;
 *                  subtype: Mailgun's reason (`bounce`, `suppress-bounce`, `generic`, ...)
 *   complained     complaint
 *   unsubscribed   other, subtype `unsubscribe`
 * The Message-ID is `message.headers.message-id` (ours: the sender sets `h:Message-Id`), the event id
 * `event-data.id`, the time `event-data.timestamp` (Unix seconds, fractional). The fields an event is
 * judged by must have their documented types and bounded sizes, else the body is refused (invalid);
 * a recipient that is no address the platform sends to makes the event ignored; the status detail
 * (`delivery-status.enhanced-code`) is read when it is a status code, and never its prose.
 */
import { createHmac, createSecretKey, timingSafeEqual, type KeyObject } from 'node:crypto';
import {
  enhancedStatus,
  feedback,
  instant,
  invalid,
  normalizeMessageId,
  parseJsonBody,
  recipientOf,
  refused,
  token,
  type DeliveryFeedback,
  type FeedbackKind,
  type SignatureCheck,
} from './feedback.js';

export interface MailgunLimits {
  /** One event per POST: a few KB; headroom for user variables and tags. */
  readonly maxBytes: number;
}

export const DEFAULT_MAILGUN_LIMITS: MailgunLimits = { maxBytes: 256 * 1024 };

/** The signing key as Mailgun shows it (its text's UTF-8 bytes are the HMAC key). */
export function mailgunSigningKey(text: string): KeyObject {
  return createSecretKey(Buffer.from(text, 'utf8'));
}

/**
 * How far the signed timestamp may be from `now`, either way, by default: SendGrid's window
 * (DEFAULT_SENDGRID_TOLERANCE_MS). Mailgun warns that its deliveries can be delayed; a wider window
 * would also keep a captured signature usable longer, with any event (see above).
 */
export const DEFAULT_MAILGUN_TOLERANCE_MS = 10 * 60 * 1000;

/** Bounds of the strings read from an event (longer is refused, never cut). */
const MAX_EVENT_NAME_CHARS = 64;
/**
 * Mailgun's event ids are 22 characters of base64url (`CPgfbmQMTCKtHW6uIWtuVe`, with `-` and `_`):
 * token()'s characters plus `_`, bounded, and never an at-sign (ids travel where addresses may not).
 */
const MAILGUN_EVENT_ID = /^[A-Za-z0-9_.:+=/-]{1,256}$/;
const MAX_RECIPIENT_CHARS = 320;
const MAX_MESSAGE_ID_CHARS = 1000;

type Json = Record<string, unknown>;

const isObject = (value: unknown): value is Json =>
  typeof value === 'object' && value !== null && !Array.isArray(value);

export interface MailgunVerification {
  /** The HTTP webhook signing key, as the text Mailgun shows (mailgunSigningKey). */
  readonly signingKey: KeyObject;
  readonly now: Date;
  readonly toleranceMs?: number;
}

/** A signature that verified: what was signed, for naming the delivery (rate limits) and taking its token once. */
export interface MailgunSigned {
  /** The timestamp's text as signed. */
  readonly timestamp: string;
  readonly token: string;
  /** The signed timestamp, epoch ms. */
  readonly signedAt: number;
}

/** The `signature` object of a Mailgun webhook body checked under `signingKey`; `reason` is ours. */
export function verifyMailgunSignature(
  signature: unknown,
  options: MailgunVerification,
): (SignatureCheck & { readonly kind: 'refused' }) | ({ readonly kind: 'verified' } & MailgunSigned) {
  if (!isObject(signature)) return refused('Mailgun signature missing');
  const { timestamp: rawTimestamp, token: rawToken, signature: hex } = signature;
  // Documented as an integer, sent as a string: either, as long as its text is plain Unix seconds.
  const timestamp =
    typeof rawTimestamp === 'number' && Number.isSafeInteger(rawTimestamp) && rawTimestamp >= 0
      ? String(rawTimestamp)
      : rawTimestamp;
  if (typeof timestamp !== 'string' || !/^\d{1,12}$/.test(timestamp))
    return refused('Mailgun signature timestamp is not Unix seconds');
  const signedAt = Number(timestamp) * 1000;
  const tolerance = options.toleranceMs ?? DEFAULT_MAILGUN_TOLERANCE_MS;
  if (Math.abs(signedAt - options.now.getTime()) > tolerance)
    return refused('Mailgun signature timestamp is outside the replay window');
  if (typeof rawToken !== 'string' || !/^[A-Za-z0-9]{16,128}$/.test(rawToken))
    return refused('Mailgun signature token is not 16 to 128 letters and digits');
  if (typeof hex !== 'string' || !/^[0-9a-f]{64}$/.test(hex))
    return refused('Mailgun signature is not 64 lower-case hex digits');
  const expected = createHmac('sha256', options.signingKey).update(`${timestamp}${rawToken}`, 'utf8').digest();
  // Both 32 bytes: the regex above fixed the length, so the comparison leaks nothing but the verdict.
  if (!timingSafeEqual(expected, Buffer.from(hex, 'hex'))) return refused('Mailgun signature does not verify');
  return { kind: 'verified', timestamp, token: rawToken, signedAt };
}

export type MailgunWebhookResult =
  | {
      readonly kind: 'ok';
      readonly events: readonly DeliveryFeedback[];
      readonly ignored: number;
      readonly signed: MailgunSigned;
    }
  | { readonly kind: 'invalid'; readonly reason: string }
  | { readonly kind: 'refused'; readonly reason: string };

/**
 * A webhook body as received: bounded in size and nesting, parsed, its signature verified, then its
 * event read. `invalid` (400): not a JSON object of at most `limits.maxBytes`, or a verified body
 * whose event is malformed; `refused` (401/403): the signature. Never throws.
 */
export function receiveMailgunWebhook(
  body: string | Uint8Array,
  options: MailgunVerification & { readonly limits?: MailgunLimits },
): MailgunWebhookResult {
  const limits = options.limits ?? DEFAULT_MAILGUN_LIMITS;
  // The signature is inside the body: size and depth are bounded before anything parses it.
  const parsed = parseJsonBody(body, limits.maxBytes, 'Mailgun body');
  if (parsed.kind === 'invalid') return parsed;
  if (!isObject(parsed.value)) return invalid('Mailgun body is not a JSON object');
  const check = verifyMailgunSignature(parsed.value.signature, options);
  if (check.kind === 'refused') return check;
  const event = parseMailgunEvent(parsed.value['event-data'], { now: options.now });
  if (event.kind === 'invalid') return event;
  const signed: MailgunSigned = { timestamp: check.timestamp, token: check.token, signedAt: check.signedAt };
  return event.feedback === undefined
    ? { kind: 'ok', events: [], ignored: 1, signed }
    : { kind: 'ok', events: [event.feedback], ignored: 0, signed };
}

/**
 * The feedback in one (verified) `event-data`: `feedback` undefined when the event is one we do not
 * take (opened, clicked, ...) or names no address the platform sends to.
 */
export function parseMailgunEvent(
  eventData: unknown,
  context: { readonly now: Date },
):
  | { readonly kind: 'ok'; readonly feedback?: DeliveryFeedback }
  | { readonly kind: 'invalid'; readonly reason: string } {
  if (!isObject(eventData)) return invalid('Mailgun body has no event-data object');
  const name = eventData.event;
  if (typeof name !== 'string' || name.length > MAX_EVENT_NAME_CHARS)
    return invalid('Mailgun event-data.event is not an event name');
  const classified = classify(eventData, name);
  if (classified === undefined) return { kind: 'ok' };

  const eventId = eventData.id;
  if (typeof eventId !== 'string' || !MAILGUN_EVENT_ID.test(eventId))
    return invalid('Mailgun event-data.id is not an event id');
  const at = eventData.timestamp;
  if (at !== undefined && (typeof at !== 'number' || !Number.isFinite(at)))
    return invalid('Mailgun event-data.timestamp is not Unix seconds');
  const address = eventData.recipient;
  if (typeof address !== 'string' || address.length > MAX_RECIPIENT_CHARS)
    return invalid('Mailgun event-data.recipient is not a string of at most 320 characters');
  const messageId = messageIdOf(eventData.message);
  if (messageId === null) return invalid('Mailgun event-data.message.headers.message-id is malformed');

  const recipient = recipientOf(address);
  if (recipient === undefined) return { kind: 'ok' };
  const status = isObject(eventData['delivery-status']) ? eventData['delivery-status'] : {};
  return {
    kind: 'ok',
    feedback: feedback(classified.kind, 'mailgun', recipient, instant(at, context.now), {
      messageId,
      eventId,
      diagnostic: enhancedStatus(status['enhanced-code']),
      subtype: classified.subtype,
    }),
  };
}

/**
 * `message.headers.message-id` through normalizeMessageId: undefined when absent or not a msg-id,
 * null when a value on the way has the wrong type or an oversized string.
 */
function messageIdOf(message: unknown): string | undefined | null {
  if (message === undefined) return undefined;
  if (!isObject(message)) return null;
  const headers = message.headers;
  if (headers === undefined) return undefined;
  if (!isObject(headers)) return null;
  const id = headers['message-id'];
  if (id === undefined) return undefined;
  if (typeof id !== 'string' || id.length > MAX_MESSAGE_ID_CHARS) return null;
  return normalizeMessageId(id);
}

function classify(
  event: Json,
  name: string,
): { readonly kind: FeedbackKind; readonly subtype?: string | undefined } | undefined {
  switch (name) {
    // Mailgun took the message for delivery: evidence that an in-doubt send went out.
    case 'accepted':
      return { kind: 'accepted' };
    case 'delivered':
      return { kind: 'delivered' };
    case 'failed': {
      const subtype = token(event.reason, 64);
      if (event.severity === 'permanent') return { kind: 'hard_bounce', subtype };
      if (event.severity === 'temporary') return { kind: 'soft_bounce', subtype };
      return { kind: 'other', subtype: 'failed' };
    }
    case 'complained':
      return { kind: 'complaint', subtype: 'complained' };
    case 'unsubscribed':
      return { kind: 'other', subtype: 'unsubscribe' };
    default:
      return undefined;
  }
}
