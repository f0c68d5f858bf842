/**
 * Delivery status notifications (RFC 3464, and RFC 6533's UTF-8 form) as they arrive in the bounce
 * mailbox: a multipart/report (report-type=delivery-status), possibly inside other multiparts,
 * whose message/delivery-status part holds a group of per-message fields and one group per
 * recipient, and whose text/rfc822-headers or message/rfc822 part returns our message's headers.
 *
 * Per recipient:
 *   address   Original-Recipient when it is an rfc822 address (the address we sent to, before any
 *             forwarding), else Final-Recipient; any other address type (x400;, unknown;) is ignored
 *   Action    failed with a 5.x.x status -> hard_bounce; failed otherwise, delayed -> soft_bounce;
 *             delivered -> delivered; relayed, expanded -> accepted; anything else ignored
 *   Status    the diagnostic; a generic x.0.0 gives way to the code in Diagnostic-Code of the same
 *             class; Diagnostic-Code's text is never kept
 *   time      Last-Attempt-Date, else the report's Date, else `now`
 * The Message-ID is that of the returned message, else an `Original-Message-ID` field of the
 * report or header of the message; the ENVID is the report's `Original-Envelope-Id` (RFC 3464
 * §2.2.1), kept when it is a plain token. The event id is a hash of the report's own Message-ID.
 *
 * A DSN is mail anyone can send: nothing in it is authenticated. Act on one only when its
 * Message-ID or ENVID carries a MAC we made (domain/identifiers.ts) for a message we sent to that
 * same recipient.
 */
import { createHash } from 'node:crypto';
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
import {
  contentType,
  decodedBodyLines,
  header,
  MimeError,
  multipartParts,
  readEntity,
  readHeaderBlock,
  toLines,
  type Entity,
  type HeaderField,
  type MimeLimits,
  type PartBudget,
} from './mime.js';

export interface DsnLimits extends MimeLimits {
  /** The largest message read: our messages are small, and a report returns at most one. */
  readonly maxBytes: number;
  /** We send one recipient per message; a report naming more than this is refused whole. */
  readonly maxRecipients: number;
}

export const DEFAULT_DSN_LIMITS: DsnLimits = {
  maxBytes: 2 * 1024 * 1024,
  maxDepth: 8,
  maxParts: 256,
  maxHeaderBytes: 64 * 1024,
  maxHeaderFields: 1000,
  maxRecipients: 50,
};

const STATUS_TYPES = new Set(['message/delivery-status', 'message/global-delivery-status']);
const RETURNED_TYPES = new Set(['text/rfc822-headers', 'message/rfc822', 'message/global', 'message/global-headers']);

interface Report {
  readonly status: Entity;
  /** message/global-delivery-status: field values are UTF-8. */
  readonly global: boolean;
  readonly returned?: Entity;
}

/** The feedback in one message from the bounce mailbox. */
export function parseDeliveryStatusNotification(
  raw: string | Uint8Array,
  context: { readonly now: Date },
  limits: DsnLimits = DEFAULT_DSN_LIMITS,
): FeedbackParse {
  const bytes = typeof raw === 'string' ? raw.length : raw.byteLength;
  if (bytes > limits.maxBytes) return invalid(`message larger than ${limits.maxBytes} bytes`);
  try {
    return parse(toLines(raw), context.now, limits);
  } catch (error) {
    if (error instanceof MimeError) return invalid(error.message);
    // Not expected (the property tests find none), but a mailbox must not stall on one message.
    return invalid(`unreadable message (${error instanceof Error ? error.name : 'error'})`);
  }
}

function parse(lines: string[], now: Date, limits: DsnLimits): FeedbackParse {
  const message = readEntity(lines, 0, lines.length, limits);
  const report = findReport(message, 0, { parts: 0 }, limits);
  if (!report) return invalid('not a delivery status notification (no message/delivery-status part)');

  const { perMessage, perRecipient } = fieldGroups(decodedBodyLines(report.status), limits);
  if (perRecipient.length === 0) return invalid('delivery status names no recipient');

  const returnedHeaders = report.returned ? returnedFields(report.returned, limits) : [];
  const messageId =
    normalizeMessageId(header(returnedHeaders, 'message-id')) ??
    normalizeMessageId(header(perMessage, 'original-message-id')) ??
    normalizeMessageId(header(message.headers, 'original-message-id')) ??
    normalizeMessageId(header(message.headers, 'x-original-message-id'));
  const envelopeId = token(xtextDecoded(header(perMessage, 'original-envelope-id')?.trim()), 100);
  const ownId = normalizeMessageId(header(message.headers, 'message-id'));
  const reportDate = header(message.headers, 'date');
  const fallbackAt = reportDate === undefined ? undefined : instant(reportDate, now);

  const events: DeliveryFeedback[] = [];
  let ignored = 0;
  for (const group of perRecipient) {
    const recipient =
      address(header(group, 'original-recipient'), report.global) ??
      address(header(group, 'final-recipient'), report.global);
    const status = bestStatus(enhancedStatus(header(group, 'status')), header(group, 'diagnostic-code'));
    const kind = kindOf(header(group, 'action'), status);
    if (recipient === undefined || kind === undefined) {
      ignored++;
      continue;
    }
    // The report's own Message-ID is anyone's to choose: alone it would let a forged DSN mailed first
    // take the dedupe slot of the relay's genuine one (same source, id and recipient). So the id also
    // covers what the report says and which message it names; a retry of the same report keeps it.
    const eventId =
      ownId &&
      `dsn-${createHash('sha256')
        .update([ownId, kind, messageId ?? '', envelopeId ?? '', status ?? ''].join('\u0000'))
        .digest('hex')
        .slice(0, 32)}`;
    events.push(
      feedback(kind, 'dsn', recipient, instant(header(group, 'last-attempt-date'), now, fallbackAt), {
        messageId,
        envelopeId,
        eventId,
        diagnostic: status,
      }),
    );
  }
  return { kind: 'ok', events, ignored };
}

/**
 * The per-message fields and the per-recipient groups of a delivery-status body: groups of fields
 * separated by empty lines (RFC 3464 §2.1). A group naming no recipient after the first is skipped,
 * not kept, so junk groups cost time linear in their size and no memory.
 */
function fieldGroups(
  statusLines: readonly string[],
  limits: DsnLimits,
): { perMessage: readonly HeaderField[]; perRecipient: HeaderField[][] } {
  let perMessage: readonly HeaderField[] = [];
  const perRecipient: HeaderField[][] = [];
  let first = true;
  for (let i = 0; i < statusLines.length;) {
    if (/^[ \t]*$/.test(statusLines[i] as string)) {
      i++;
      continue;
    }
    const { fields, next } = readHeaderBlock(statusLines, i, statusLines.length, limits);
    i = next;
    if (header(fields, 'final-recipient') !== undefined || header(fields, 'original-recipient') !== undefined) {
      if (perRecipient.length >= limits.maxRecipients)
        throw new MimeError(`delivery status names more than ${limits.maxRecipients} recipients`);
      perRecipient.push(fields);
    } else if (first) {
      perMessage = fields;
    }
    first = false;
  }
  return { perMessage, perRecipient };
}

/**
 * The first multipart (depth first, not into returned messages) that holds a delivery-status part,
 * or such a part at the top.
 */
function findReport(entity: Entity, depth: number, budget: PartBudget, limits: DsnLimits): Report | undefined {
  const type = contentType(entity);
  if (STATUS_TYPES.has(type.type)) return { status: entity, global: type.type === 'message/global-delivery-status' };
  if (!type.type.startsWith('multipart/')) return undefined;
  if (depth >= limits.maxDepth) throw new MimeError(`multipart nested deeper than ${limits.maxDepth} levels`);
  const parts = multipartParts(entity, type, budget, limits).map((part) => ({ part, type: contentType(part) }));
  const status = parts.find((p) => STATUS_TYPES.has(p.type.type));
  if (status) {
    const returned = parts.find((p) => RETURNED_TYPES.has(p.type.type));
    const global = status.type.type === 'message/global-delivery-status';
    return returned ? { status: status.part, global, returned: returned.part } : { status: status.part, global };
  }
  for (const { part, type: partType } of parts) {
    if (!partType.type.startsWith('multipart/')) continue;
    const found = findReport(part, depth + 1, budget, limits);
    if (found) return found;
  }
  return undefined;
}

/** The returned message's header fields (the part is the message, or only its headers). */
function returnedFields(part: Entity, limits: DsnLimits): readonly HeaderField[] {
  const lines = decodedBodyLines(part);
  return readHeaderBlock(lines, 0, lines.length, limits).fields;
}

/** `rfc822; ada@example.com (comment)` -> the address's identity; other address types -> undefined. */
function address(field: string | undefined, global: boolean): string | undefined {
  if (field === undefined) return undefined;
  const semicolon = field.indexOf(';');
  if (semicolon < 0) return undefined;
  const type = field.slice(0, semicolon).trim().toLowerCase();
  if (type !== 'rfc822' && !(global && type === 'utf-8')) return undefined;
  let value = field.slice(semicolon + 1).replace(/\([^()]*\)/g, '');
  // Global reports carry UTF-8; the message was read as latin1 bytes.
  if (global) value = Buffer.from(value, 'latin1').toString('utf8');
  return recipientOf(value);
}

/** RFC 3461 xtext (`+2B` for `+`): how ENVID travels; a relay may encode more than it must. */
function xtextDecoded(value: string | undefined): string | undefined {
  return value?.replace(/\+([0-9A-Fa-f]{2})/g, (_, hex: string) => String.fromCharCode(parseInt(hex, 16)));
}

function kindOf(action: string | undefined, status: string | undefined): FeedbackKind | undefined {
  switch (action?.toLowerCase().replace(/\s*\(.*$/, '')) {
    case 'failed':
      return status?.startsWith('5.') ? 'hard_bounce' : 'soft_bounce';
    case 'delayed':
      return 'soft_bounce';
    // Success with a failure status is no report of success: not taken as evidence either way.
    case 'delivered':
      return status === undefined || status.startsWith('2.') ? 'delivered' : undefined;
    // Handed on by a relay that does not return DSNs, or delivered to a list that expands: our
    // message went out, which is all an in-doubt send needs to know (not that it reached a mailbox).
    case 'relayed':
    case 'expanded':
      return status === undefined || status.startsWith('2.') ? 'accepted' : undefined;
    default:
      return undefined;
  }
}
