/**
 * Delivery feedback: what a provider or a receiving mail server reported about one recipient of
 * one message, in one shape whatever the source (SES through SNS, the SendGrid Event Webhook, an
 * RFC 3464 DSN in the bounce mailbox, an SMTP reply). The parsers here turn hostile bytes into
 * these values and never throw; acting on them (suppressing, counting toward auto-pause,
 * publishing) is the caller's.
 *
 * Nothing of a payload's free text is kept: reasons, diagnostic texts and SMTP replies quote
 * addresses and the receiving server's prose, and feedback travels to logs and topics. What is
 * kept is either canonical (the address's identity, a Message-ID) or a token checked against a
 * narrow pattern (a status code like `5.1.1`, an event id, a subtype).
 */
import { canonicalAddress, jsonDepthProblem } from '@outreach/contracts';

export type FeedbackKind = 'hard_bounce' | 'soft_bounce' | 'complaint' | 'delivered' | 'accepted' | 'other';
export type FeedbackSource = 'ses' | 'sendgrid' | 'mailgun' | 'dsn' | 'smtp';

/**
 * The kinds that say the message went out: the receiving server took it (`delivered`), or the
 * provider or relay took it for delivery (`accepted`: SendGrid `processed`, Mailgun `accepted`, a
 * DSN's `relayed`/`expanded`). Either one, naming a send whose identifier verifies, settles that send
 * `sent` when it is in doubt (ADR 009, "Delivery evidence"): a second email would be a duplicate.
 */
export const EVIDENCE_KINDS = ['delivered', 'accepted'] as const satisfies readonly FeedbackKind[];

export function isDeliveryEvidence(kind: FeedbackKind): boolean {
  return (EVIDENCE_KINDS as readonly FeedbackKind[]).includes(kind);
}

export interface DeliveryFeedback {
  /**
   * `hard_bounce` and `complaint` suppress the address; `soft_bounce` is a temporary failure that
   * counts toward auto-pause (one message can report one, then a hard bounce: count messages);
   * `delivered` and `accepted` are delivery evidence (EVIDENCE_KINDS); `other` (a delay notice, a
   * drop for another reason) is kept for the record.
   */
  readonly kind: FeedbackKind;
  readonly source: FeedbackSource;
  /** The address's identity (`canonicalAddress(..).norm`, what `suppressions.email_norm` holds). */
  readonly recipient: string;
  /** When the source says it happened; never later than the `now` the parser was given. */
  readonly at: Date;
  /** Our RFC 5322 Message-ID of the message this is about, through `normalizeMessageId`. */
  readonly messageId?: string;
  /** The RFC 3461 ENVID of the message (a DSN's Original-Envelope-Id), through `token`. */
  readonly envelopeId?: string;
  /** The provider's id of that message (SES `mail.messageId`, SendGrid's `sg_message_id` prefix). */
  readonly providerMessageId?: string;
  /**
   * The source's id of this report (SNS MessageId, `sg_event_id`, the DSN's own Message-ID): the
   * same report delivered twice has the same one, so (source, eventId, recipient) dedupes retries.
   */
  readonly eventId?: string;
  /** An RFC 3463 enhanced status code (`5.1.1`), never free text. */
  readonly diagnostic?: string;
  /** The source's own classification as a token (`General`, `blocked`, `abuse`, `MailboxFull`). */
  readonly subtype?: string;
}

/** A parser's verdict: the feedback it found, or why the whole input was refused. */
export type FeedbackParse =
  | {
      readonly kind: 'ok';
      readonly events: readonly DeliveryFeedback[];
      /** Entries understood but not turned into feedback (opens, an x400 recipient, a bad address). */
      readonly ignored: number;
    }
  | { readonly kind: 'invalid'; readonly reason: string };

/** A signature check's verdict; `reason` is ours, never quoted from the input. */
export type SignatureCheck = { readonly kind: 'verified' } | { readonly kind: 'refused'; readonly reason: string };

export function invalid(reason: string): { readonly kind: 'invalid'; readonly reason: string } {
  return { kind: 'invalid', reason };
}

export function refused(reason: string): { readonly kind: 'refused'; readonly reason: string } {
  return { kind: 'refused', reason };
}

/**
 * A JSON document of at most `maxBytes` bytes (UTF-8) nested at most MAX_JSON_DEPTH levels, parsed, or why not; `what` names the input
 * in the reason (`SNS message larger than 262144 bytes`, `SendGrid body is not JSON`).
 */
export function parseJsonBody(
  body: string | Uint8Array,
  maxBytes: number,
  what: string,
): { readonly kind: 'ok'; readonly value: unknown } | { readonly kind: 'invalid'; readonly reason: string } {
  const bytes = typeof body === 'string' ? Buffer.byteLength(body, 'utf8') : body.byteLength;
  if (bytes > maxBytes) return invalid(`${what} larger than ${maxBytes} bytes`);
  // Before JSON.parse, which takes any depth (480,000 levels in 960 KB): these bodies arrive from anyone.
  const tooDeep = jsonDepthProblem(body);
  if (tooDeep !== undefined) return invalid(`${what}: ${tooDeep}`);
  try {
    return { kind: 'ok', value: JSON.parse(typeof body === 'string' ? body : Buffer.from(body).toString('utf8')) };
  } catch {
    return invalid(`${what} is not JSON`);
  }
}

/** The optional fields of a DeliveryFeedback, each dropped when absent (exactOptionalPropertyTypes). */
export interface FeedbackDetails {
  readonly messageId?: string | undefined;
  readonly envelopeId?: string | undefined;
  readonly providerMessageId?: string | undefined;
  readonly eventId?: string | undefined;
  readonly diagnostic?: string | undefined;
  readonly subtype?: string | undefined;
}

export function feedback(
  kind: FeedbackKind,
  source: FeedbackSource,
  recipient: string,
  at: Date,
  details: FeedbackDetails = {},
): DeliveryFeedback {
  const event: { -readonly [K in keyof DeliveryFeedback]: DeliveryFeedback[K] } = { kind, source, recipient, at };
  if (details.messageId !== undefined) event.messageId = details.messageId;
  if (details.envelopeId !== undefined) event.envelopeId = details.envelopeId;
  if (details.providerMessageId !== undefined) event.providerMessageId = details.providerMessageId;
  if (details.eventId !== undefined) event.eventId = details.eventId;
  if (details.diagnostic !== undefined) event.diagnostic = details.diagnostic;
  if (details.subtype !== undefined) event.subtype = details.subtype;
  return event;
}

/** The longest address looked at: RFC 5321's path limit, with room for a display form. */
const MAX_ADDRESS_CHARS = 320;

/**
 * The identity of a reported recipient, or undefined when it is no address the platform would
 * send to: the same canonical form the sender checks suppressions by, so a suppression written
 * from a bounce for `Ada@Example.COM` matches the next send to `ada@example.com`.
 */
export function recipientOf(value: unknown): string | undefined {
  if (typeof value !== 'string' || value.length > MAX_ADDRESS_CHARS) return undefined;
  let address = value.trim();
  if (address.startsWith('<') && address.endsWith('>')) address = address.slice(1, -1);
  return canonicalAddress(address)?.norm;
}

// Printable ASCII without the brackets, quotes and spaces that delimit a msg-id (RFC 5322 §3.6.4).
const MESSAGE_ID = /^[\x21-\x7e]{1,250}$/;

/**
 * A Message-ID in the form feedback carries: the first `<...>` of the value (or the bare value),
 * without brackets, its domain (after the last `@`) lower-cased, or undefined when it is not
 * one. Our SMTP provider stores `<sendId@domain>`; this gives `sendId@domain` for both sides.
 */
export function normalizeMessageId(value: unknown): string | undefined {
  if (typeof value !== 'string' || value.length > 1000) return undefined;
  const bracketed = /<([^<>]*)>/.exec(value);
  const id = (bracketed ? bracketed[1] : value)?.trim() ?? '';
  if (!MESSAGE_ID.test(id) || /[<>"\\]/.test(id)) return undefined;
  const at = id.lastIndexOf('@');
  return at < 0 ? id : `${id.slice(0, at)}@${id.slice(at + 1).toLowerCase()}`;
}

/** An RFC 3463 status code at the start of `value` (`5.1.1`, `4.2.2 (mailbox full)`), canonical. */
export function enhancedStatus(value: unknown): string | undefined {
  if (typeof value !== 'string') return undefined;
  const match = /^\s*([245])\.(\d{1,3})\.(\d{1,3})(?![\d.])/.exec(value.slice(0, 64));
  return match ? `${match[1]}.${Number(match[2])}.${Number(match[3])}` : undefined;
}

/**
 * The status code inside a diagnostic text (`smtp; 550 5.1.1 <x@y>... User unknown`): only the
 * code is taken, and only a code standing alone, so `5.1.1.4` (an IP address) is none.
 */
export function statusInText(value: unknown): string | undefined {
  if (typeof value !== 'string') return undefined;
  const match = /(?<![\d.])([245])\.(\d{1,3})\.(\d{1,3})(?!\.?\d)/.exec(value.slice(0, 512));
  return match ? `${match[1]}.${Number(match[2])}.${Number(match[3])}` : undefined;
}

/**
 * The most specific code of the two: `status` when it says more than `x.0.0`, else the code in
 * the diagnostic text when it is of the same class (many MTAs put a generic `5.0.0` in Status and
 * the receiver's `5.1.1` in Diagnostic-Code).
 */
export function bestStatus(status: string | undefined, diagnosticText: unknown): string | undefined {
  const fromText = statusInText(diagnosticText);
  if (status === undefined) return fromText;
  if (status.endsWith('.0.0') && fromText !== undefined && fromText[0] === status[0]) return fromText;
  return status;
}

/**
 * A short identifier-like value (an event id, a subtype), or undefined. No at-sign: ids travel on
 * topics labelled free of addresses (schemas/README.md).
 */
export function token(value: unknown, maxChars = 128): string | undefined {
  if (typeof value !== 'string' || value.length === 0 || value.length > maxChars) return undefined;
  return /^[A-Za-z0-9][A-Za-z0-9._:+=/-]*$/.test(value) ? value : undefined;
}

/**
 * The time a source gives for an event (ISO 8601, RFC 5322 date, or Unix seconds), or `now` when
 * it gives none, an unreadable one, or one in the future (a clock ahead of ours, or a forged date
 * meant to keep a soft bounce inside every window).
 */
export function instant(value: unknown, now: Date, fallback?: Date): Date {
  let at: Date | undefined;
  if (typeof value === 'number' && Number.isFinite(value) && value > 0 && value < 1e11) at = new Date(value * 1000);
  else if (typeof value === 'string' && value.length <= 100) at = new Date(value);
  if (at === undefined || Number.isNaN(at.getTime())) at = fallback;
  if (at === undefined || Number.isNaN(at.getTime()) || at.getTime() > now.getTime()) return now;
  return at;
}

/**
 * Feedback from an SMTP reply to RCPT (or to the final dot) for one recipient: a 5xx refuses the
 * address for good (hard), a 4xx is a temporary failure (soft); anything else is no feedback.
 */
export function feedbackFromSmtpReply(reply: {
  readonly recipient: string;
  readonly code: number;
  readonly enhanced?: string;
  readonly messageId?: string;
  readonly at: Date;
}): DeliveryFeedback | undefined {
  const recipient = recipientOf(reply.recipient);
  if (recipient === undefined || !Number.isInteger(reply.code)) return undefined;
  const kind =
    reply.code >= 500 && reply.code < 600
      ? 'hard_bounce'
      : reply.code >= 400 && reply.code < 500
        ? 'soft_bounce'
        : undefined;
  if (kind === undefined) return undefined;
  const diagnostic = enhancedStatus(reply.enhanced);
  return feedback(kind, 'smtp', recipient, reply.at, {
    messageId: normalizeMessageId(reply.messageId),
    diagnostic: diagnostic !== undefined && diagnostic[0] === String(reply.code)[0] ? diagnostic : undefined,
  });
}
