/**
 * The SendGrid Event Webhook: its Signed Event Webhook check and its events (Twilio SendGrid docs,
 * "Event Webhook Reference" and "Getting Started with the Event Webhook Security Features").
 *
 * Signature: SendGrid signs each POST with an ECDSA P-256 key of the account; the verification key
 * shown under Mail Settings is the base64 DER SubjectPublicKeyInfo. The
 * `X-Twilio-Email-Event-Webhook-Signature` header is the base64 DER ECDSA signature, with SHA-256,
 * of the `X-Twilio-Email-Event-Webhook-Timestamp` header's value followed by the raw request body,
 * byte for byte: the route must hand over the body as received, not re-serialized JSON. Refused:
 * a missing header, a timestamp that is not Unix seconds or is outside the replay window around
 * `now`, a signature that is not base64 DER (a raw r||s pair too), any other key or body.
 *
 * Events (the body is a JSON array; anything else is refused):
 *   bounce       type `bounce` -> hard_bounce, `blocked` -> soft_bounce (no type: by status class)
 *   dropped      reason `Bounced Address` -> hard_bounce, `Spam Reporting Address` -> complaint
 *                (SendGrid's own lists hold the address), any other reason -> other
 *   deferred     other (SendGrid reports each retry; its final verdict arrives as a bounce)
 *   spamreport   complaint
 *   delivered    delivered
 *   processed    accepted (SendGrid took the message for delivery: delivery evidence, ADR 009)
 *   unsubscribe, group_unsubscribe   other, subtype `unsubscribe`
 *   anything else (open, click, ...) ignored
 * `smtp-id` carries the message's Message-ID, `sg_message_id` SendGrid's id (the part before
 * `.filter` is the X-Message-Id its send API returned), `sg_event_id` the event's id.
 */
import { createPublicKey, verify, type KeyObject } from 'node:crypto';
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
  type FeedbackParse,
  type SignatureCheck,
} from './feedback.js';

export const SENDGRID_SIGNATURE_HEADER = 'x-twilio-email-event-webhook-signature';
export const SENDGRID_TIMESTAMP_HEADER = 'x-twilio-email-event-webhook-timestamp';

export interface SendGridLimits {
  /** SendGrid posts batches of up to about 768 KB. */
  readonly maxBytes: number;
  readonly maxEvents: number;
}

export const DEFAULT_SENDGRID_LIMITS: SendGridLimits = { maxBytes: 1024 * 1024, maxEvents: 10_000 };

/** How far the signed timestamp may be from `now`, either way, by default. */
export const DEFAULT_SENDGRID_TOLERANCE_MS = 10 * 60 * 1000;

/**
 * The verification key from SendGrid's settings (base64 DER, as shown there) or a PEM public key,
 * as a KeyObject; undefined unless it is an EC P-256 public key. For config validation at start.
 */
export function sendGridPublicKey(value: string): KeyObject | undefined {
  const text = value.trim();
  let key: KeyObject | undefined;
  try {
    if (text.startsWith('-----BEGIN PUBLIC KEY-----')) key = createPublicKey(text);
    else if (/^[A-Za-z0-9+/]+={0,2}$/.test(text))
      key = createPublicKey({ key: Buffer.from(text, 'base64'), format: 'der', type: 'spki' });
  } catch {
    return undefined;
  }
  if (key === undefined || key.type !== 'public' || key.asymmetricKeyType !== 'ec') return undefined;
  return key.asymmetricKeyDetails?.namedCurve === 'prime256v1' ? key : undefined;
}

export interface SendGridRequest {
  /** The raw request body, exactly as received. */
  readonly body: string | Uint8Array;
  readonly signature: string | undefined;
  readonly timestamp: string | undefined;
}

export interface SendGridVerification {
  readonly publicKey: KeyObject;
  readonly now: Date;
  readonly toleranceMs?: number;
}

export function verifySendGridSignature(request: SendGridRequest, options: SendGridVerification): SignatureCheck {
  const { signature, timestamp } = request;
  if (signature === undefined || timestamp === undefined)
    return refused('SendGrid signature or timestamp header missing');
  if (!/^\d{1,12}$/.test(timestamp)) return refused('SendGrid timestamp is not Unix seconds');
  const tolerance = options.toleranceMs ?? DEFAULT_SENDGRID_TOLERANCE_MS;
  if (Math.abs(Number(timestamp) * 1000 - options.now.getTime()) > tolerance)
    return refused('SendGrid timestamp is outside the replay window');
  // A DER ECDSA P-256 signature is 8..72 bytes: 96 base64 characters at most.
  if (signature.length > 128 || !/^[A-Za-z0-9+/]+={0,2}$/.test(signature))
    return refused('SendGrid signature is not base64');
  const body = typeof request.body === 'string' ? Buffer.from(request.body, 'utf8') : Buffer.from(request.body);
  let ok = false;
  try {
    ok = verify(
      'sha256',
      Buffer.concat([Buffer.from(timestamp, 'utf8'), body]),
      { key: options.publicKey, dsaEncoding: 'der' },
      Buffer.from(signature, 'base64'),
    );
  } catch {
    ok = false;
  }
  return ok ? { kind: 'verified' } : refused('SendGrid signature does not verify');
}

type Json = Record<string, unknown>;

/** The feedback in a (verified) Event Webhook body. */
export function parseSendGridEvents(
  body: string | Uint8Array,
  context: { readonly now: Date },
  limits: SendGridLimits = DEFAULT_SENDGRID_LIMITS,
): FeedbackParse {
  const parsed = parseJsonBody(body, limits.maxBytes, 'SendGrid body');
  if (parsed.kind === 'invalid') return parsed;
  const value = parsed.value;
  if (!Array.isArray(value)) return invalid('SendGrid body is not a JSON array');
  if (value.length > limits.maxEvents) return invalid(`SendGrid body holds more than ${limits.maxEvents} events`);
  const events: DeliveryFeedback[] = [];
  let ignored = 0;
  for (const entry of value) {
    const event =
      typeof entry === 'object' && entry !== null && !Array.isArray(entry)
        ? toFeedback(entry as Json, context.now)
        : undefined;
    if (event) events.push(event);
    else ignored++;
  }
  return { kind: 'ok', events, ignored };
}

/** Verification, then parsing: what a route needs, with `refused` for a bad signature (401/403). */
export function receiveSendGridWebhook(
  request: SendGridRequest,
  options: SendGridVerification & { readonly limits?: SendGridLimits },
): FeedbackParse | { readonly kind: 'refused'; readonly reason: string } {
  const limits = options.limits ?? DEFAULT_SENDGRID_LIMITS;
  const bytes = typeof request.body === 'string' ? Buffer.byteLength(request.body, 'utf8') : request.body.byteLength;
  // Size first: a body past the limit is not worth hashing.
  if (bytes > limits.maxBytes) return invalid(`SendGrid body larger than ${limits.maxBytes} bytes`);
  const check = verifySendGridSignature(request, options);
  if (check.kind === 'refused') return check;
  return parseSendGridEvents(request.body, { now: options.now }, limits);
}

function toFeedback(event: Json, now: Date): DeliveryFeedback | undefined {
  const recipient = recipientOf(event.email);
  if (recipient === undefined || typeof event.event !== 'string') return undefined;
  const classified = classify(event);
  if (!classified) return undefined;
  return feedback(classified.kind, 'sendgrid', recipient, instant(event.timestamp, now), {
    messageId: normalizeMessageId(event['smtp-id']),
    providerMessageId: providerMessageId(event.sg_message_id),
    eventId: token(event.sg_event_id, 256),
    diagnostic: classified.diagnostic,
    subtype: classified.subtype,
  });
}

function classify(
  event: Json,
): { kind: FeedbackKind; diagnostic?: string | undefined; subtype?: string | undefined } | undefined {
  const diagnostic = enhancedStatus(typeof event.status === 'number' ? String(event.status) : event.status);
  switch (event.event) {
    case 'bounce': {
      const type = event.type === 'bounce' || event.type === 'blocked' ? event.type : undefined;
      const hard = type === 'bounce' || (type === undefined && diagnostic?.startsWith('5.') === true);
      return { kind: hard ? 'hard_bounce' : 'soft_bounce', diagnostic, subtype: type };
    }
    case 'dropped':
      if (event.reason === 'Bounced Address') return { kind: 'hard_bounce', subtype: 'dropped_bounced_address' };
      if (event.reason === 'Spam Reporting Address')
        return { kind: 'complaint', subtype: 'dropped_spam_reporting_address' };
      return { kind: 'other', subtype: 'dropped' };
    case 'deferred':
      return { kind: 'other', subtype: 'deferred' };
    case 'spamreport':
      return { kind: 'complaint', subtype: 'spamreport' };
    case 'delivered':
      return { kind: 'delivered' };
    // SendGrid took the message for delivery: evidence that an in-doubt send went out.
    case 'processed':
      return { kind: 'accepted', subtype: 'processed' };
    case 'unsubscribe':
    case 'group_unsubscribe':
      return { kind: 'other', subtype: 'unsubscribe' };
    default:
      return undefined;
  }
}

function providerMessageId(value: unknown): string | undefined {
  const id = token(value, 256);
  if (id === undefined) return undefined;
  const filter = id.indexOf('.filter');
  return filter > 0 ? id.slice(0, filter) : id;
}
