/**
 * Mailgun over its HTTP API: the send (MailProvider) and the delivery lookup (DeliveryLookup).
 *
 * Send: `POST /v3/{domain}/messages`, multipart/form-data, HTTP Basic `api:<key>`
 * (https://documentation.mailgun.com/docs/mailgun/api-reference/send/mailgun/messages). The
 * message's deterministic Message-ID (`<send identifier@domain>`, ADR 012) goes through `h:Message-Id`,
 * which Mailgun keeps as the message's id (its FAQ on tracking replies; the send answers
 * `{ id: '<…>' }`), and `v:send-id` as a user variable shown on every event.
 *
 * The verdict follows what the server can hold, as for SMTP (ADR 006): until the request body has
 * been handed to the socket nothing can have been accepted (`not_sent`); after that, a lost
 * connection or our timeout is `unknown`, and the exchange keeps listening for `lateWithinMs` so a
 * late 2xx is recorded `sent`. A status is definitive:
 * - 2xx `sent` (whatever the body says: the status is the verdict);
 * - 400, 413 and other 4xx about the message `rejected` (the same request will be refused again);
 * - 401, 403, 404 (our key or domain), 408, 429 `not_sent`: the message was not taken, a retry can
 *   be (the error-rate auto-pause stops a misconfigured sender);
 * - 502 and 504: a gateway's answer, the API behind it may have queued the message: `unknown`;
 * - other 5xx `not_sent`: Mailgun says it failed to take it.
 *
 * Lookup: the Events API, `GET /v3/{domain}/events?message-id=<id without brackets>`
 * (https://documentation.mailgun.com/docs/mailgun/api-reference/send/mailgun/events; brackets
 * make the filter match unrelated messages, mailgun/mailgun.js#296). Any `accepted`, `delivered`
 * or `failed` event for our id (and recipient) means Mailgun took the message. Mailgun's event
 * storage is eventually consistent ("Event Polling": pages are only trustworthy after a threshold
 * such as half an hour), so the default settle time is 30 minutes. Events are kept for days only
 * (at least 3, up to 30 by plan): past that, `not_found` would be a lie, so the lookup says
 * `unavailable` for sends older than `retentionMs`. Mailgun marks this API as deprecated in favour
 * of its Logs API; both filter by message id.
 */
import { randomUUID } from 'node:crypto';
import https from 'node:https';
import http from 'node:http';
import { httpCall, parseJsonObject, type HttpOutcome } from './http-call.js';
import { searchableMessageId, type DeliveryLookup, type LookupQuery, type LookupResult } from './lookup.js';
import { callsSettled, type MailMessage, type MailProvider, type SendResult } from './port.js';

export interface MailgunOptions {
  /** `https://api.mailgun.net` (US) or `https://api.eu.mailgun.net` (EU); a test server in tests. */
  readonly baseUrl: string;
  /** The sending domain (`/v3/{domain}/…`). */
  readonly domain: string;
  readonly apiKey: string;
  readonly timeoutMs: number;
  readonly maxResponseBytes?: number;
}

export interface MailgunProviderOptions extends MailgunOptions {
  /** How long past `timeoutMs` a request whose body left us keeps waiting for its status. */
  readonly lateWithinMs: number;
}

export interface MailgunLookupOptions extends MailgunOptions {
  readonly settleMs?: number;
  /** Events older than this may have been purged (plan retention; at least 3 days). */
  readonly retentionMs?: number;
  /** Margin for clocks: the search starts this long before `sentAfter`. */
  readonly skewMs?: number;
  /** Injected for tests of the retention rule. */
  readonly now?: () => number;
}

function endpoint(options: MailgunOptions, resource: 'messages' | 'events'): URL {
  const base = options.baseUrl.endsWith('/') ? options.baseUrl : `${options.baseUrl}/`;
  return new URL(`v3/${encodeURIComponent(options.domain)}/${resource}`, base);
}

function authorization(apiKey: string): string {
  return `Basic ${Buffer.from(`api:${apiKey}`).toString('base64')}`;
}

function agentFor(baseUrl: string): http.Agent {
  const options = { keepAlive: true, maxSockets: 16 };
  return baseUrl.startsWith('https:') ? new https.Agent(options) : new http.Agent(options);
}

/** A multipart/form-data body (RFC 7578) of text fields. */
export function multipart(fields: ReadonlyArray<readonly [string, string]>): { body: Buffer; contentType: string } {
  const boundary = `----outreach-${randomUUID()}`;
  const parts = fields.map(
    ([name, value]) =>
      `--${boundary}\r\nContent-Disposition: form-data; name="${name}"\r\n` +
      `Content-Type: text/plain; charset=utf-8\r\n\r\n${value}\r\n`,
  );
  return {
    body: Buffer.from(`${parts.join('')}--${boundary}--\r\n`, 'utf8'),
    contentType: `multipart/form-data; boundary=${boundary}`,
  };
}

const HEADER_NAME = /^[A-Za-z0-9][A-Za-z0-9-]{0,75}$/;
const LINE_BREAK = /[\r\n]/;

/** The form fields of one message, or why it cannot be expressed (nothing to retry). */
export function messageFields(message: MailMessage, sendId: string): Array<readonly [string, string]> | string {
  for (const value of [message.from, message.to, message.subject]) {
    if (LINE_BREAK.test(value)) return 'a line break in from, to or subject';
  }
  // Mailgun splits `to` on commas: one send must never become several recipients.
  if (/[,;]/.test(message.to)) return 'more than one recipient';
  const fields: Array<readonly [string, string]> = [
    ['from', message.from],
    ['to', message.to],
    ['subject', message.subject],
    ['text', message.text],
    ['h:Message-Id', message.messageId],
    ['v:send-id', sendId],
  ];
  for (const [name, value] of Object.entries(message.headers)) {
    if (!HEADER_NAME.test(name) || LINE_BREAK.test(value)) return 'a header that cannot be sent';
    if (name.toLowerCase() === 'message-id') continue;
    fields.push([`h:${name}`, value]);
  }
  return fields;
}

/** The verdict on one send exchange (see the module header). Reasons name codes, never text. */
export function sendVerdict(outcome: HttpOutcome, messageId: string): SendResult {
  // A status, once it arrived, is the server's verdict, whatever happened to the body after it.
  if (outcome.status !== undefined && outcome.status > 0) return statusVerdict(outcome.status, outcome, messageId);
  if (outcome.kind === 'failed') {
    return outcome.phase === 'request'
      ? { kind: 'not_sent', reason: `mailgun ${outcome.code} before the request was handed over` }
      : { kind: 'unknown', reason: `mailgun ${outcome.code} after the request was handed over, before a status` };
  }
  if (outcome.kind === 'timeout') {
    return outcome.phase === 'request'
      ? { kind: 'not_sent', reason: 'mailgun timeout before the request was handed over' }
      : { kind: 'unknown', reason: 'mailgun timeout after the request was handed over, before a status' };
  }
  return { kind: 'unknown', reason: 'mailgun answer without a status' };
}

function statusVerdict(status: number, outcome: HttpOutcome, messageId: string): SendResult {
  if (status >= 200 && status < 300) {
    const body = outcome.kind === 'response' ? parseJsonObject(outcome.body) : undefined;
    const id = typeof body?.id === 'string' && body.id.length <= 998 ? body.id : messageId;
    return { kind: 'sent', providerMessageId: id };
  }
  const reason = `mailgun http ${status}`;
  if (status === 502 || status === 504) return { kind: 'unknown', reason: `${reason} from a gateway` };
  if ([401, 403, 404, 408, 429].includes(status) || status >= 500) return { kind: 'not_sent', reason };
  if (status >= 400) return { kind: 'rejected', reason };
  // 1xx/3xx as a final answer: not the API's; whether it took the message is unknowable.
  return { kind: 'unknown', reason };
}

export class MailgunProvider implements MailProvider {
  readonly name = 'mailgun';
  private readonly agent: http.Agent;
  private readonly url: URL;
  private readonly calls = new Set<Promise<SendResult>>();
  private closed = false;

  constructor(private readonly options: MailgunProviderOptions) {
    this.agent = agentFor(options.baseUrl);
    this.url = endpoint(options, 'messages');
  }

  async send(message: MailMessage, idempotencyKey: string): Promise<SendResult> {
    if (this.closed) return { kind: 'not_sent', reason: 'mailgun provider is shutting down' };
    const call = this.deliver(message, idempotencyKey);
    this.calls.add(call);
    try {
      return await call;
    } finally {
      this.calls.delete(call);
    }
  }

  private async deliver(message: MailMessage, idempotencyKey: string): Promise<SendResult> {
    const { messageId } = message;
    const fields = messageFields(message, idempotencyKey);
    if (typeof fields === 'string') return { kind: 'rejected', reason: `message could not be composed: ${fields}` };
    const { body, contentType } = multipart(fields);
    const outcome = await httpCall({
      method: 'POST',
      url: this.url,
      headers: { authorization: authorization(this.options.apiKey), 'content-type': contentType },
      body,
      timeoutMs: this.options.timeoutMs,
      lateWithinMs: this.options.lateWithinMs,
      maxResponseBytes: this.options.maxResponseBytes ?? 64 * 1024,
      agent: this.agent,
    });
    const verdict = sendVerdict(outcome, messageId);
    if (verdict.kind !== 'unknown' || outcome.kind !== 'timeout' || !outcome.late) return verdict;
    return {
      ...verdict,
      late: outcome.late.then((late) => sendVerdict(late, messageId)),
      lateWithinMs: this.options.lateWithinMs,
    };
  }

  /** Graceful: no new calls; calls in flight end within their timeout, then connections close. */
  async close(): Promise<void> {
    this.closed = true;
    await callsSettled(this.calls, this.options.timeoutMs + 1_000);
    this.agent.destroy();
  }
}

/** Events that mean Mailgun took the message (a `rejected` event means it did not). */
const TAKEN = new Set(['accepted', 'delivered', 'failed', 'opened', 'clicked', 'complained', 'unsubscribed']);

export class MailgunLookup implements DeliveryLookup {
  readonly name = 'mailgun';
  readonly settleMs: number;
  private readonly agent: http.Agent;
  private readonly url: URL;

  constructor(private readonly options: MailgunLookupOptions) {
    this.settleMs = options.settleMs ?? 30 * 60_000;
    this.agent = agentFor(options.baseUrl);
    this.url = endpoint(options, 'events');
  }

  async find(query: LookupQuery, signal?: AbortSignal): Promise<LookupResult> {
    const id = searchableMessageId(query.messageId);
    if (!id) return { kind: 'unavailable', reason: 'mailgun message id not searchable' };
    const now = this.options.now?.() ?? Date.now();
    const retention = this.options.retentionMs ?? 3 * 24 * 3_600_000;
    if (!query.sentAfter || now - query.sentAfter.getTime() > retention) {
      // Without a start inside the retention window, an empty answer may only mean "purged".
      return { kind: 'unavailable', reason: 'mailgun send outside the event retention window' };
    }
    const url = new URL(this.url);
    url.searchParams.set('message-id', id);
    url.searchParams.set(
      'begin',
      String(Math.floor((query.sentAfter.getTime() - (this.options.skewMs ?? 300_000)) / 1000)),
    );
    url.searchParams.set('ascending', 'yes');
    url.searchParams.set('limit', '300');
    const outcome = await httpCall({
      method: 'GET',
      url,
      headers: { authorization: authorization(this.options.apiKey) },
      timeoutMs: this.options.timeoutMs,
      maxResponseBytes: this.options.maxResponseBytes ?? 1024 * 1024,
      agent: this.agent,
      ...(signal ? { signal } : {}),
    });
    return interpretEvents(outcome, id, query.recipient);
  }

  async close(): Promise<void> {
    this.agent.destroy();
  }
}

export function interpretEvents(outcome: HttpOutcome, id: string, recipient?: string): LookupResult {
  if (outcome.kind === 'too_large') return { kind: 'unavailable', reason: 'mailgun response too large' };
  if (outcome.kind === 'timeout') return { kind: 'unavailable', reason: 'mailgun timeout' };
  if (outcome.kind === 'failed') return { kind: 'unavailable', reason: `mailgun ${outcome.code}` };
  if (outcome.status !== 200) return { kind: 'unavailable', reason: `mailgun http ${outcome.status}` };
  const items = parseJsonObject(outcome.body)?.items;
  if (!Array.isArray(items)) return { kind: 'unavailable', reason: 'mailgun response not an event list' };
  const wanted = recipient?.toLowerCase();
  let otherRecipient = false;
  for (const item of items) {
    if (typeof item !== 'object' || item === null) {
      return { kind: 'unavailable', reason: 'mailgun response not an event list' };
    }
    const { event, timestamp, recipient: to, message } = item as Record<string, unknown>;
    const headers = (message as { headers?: unknown } | null | undefined)?.headers;
    const eventMessageId = (headers as Record<string, unknown> | null | undefined)?.['message-id'];
    if (typeof event !== 'string' || typeof timestamp !== 'number' || typeof eventMessageId !== 'string') {
      return { kind: 'unavailable', reason: 'mailgun response not an event list' };
    }
    // The filter is the server's; only events that carry our id exactly count.
    if (eventMessageId.replace(/^<|>$/g, '') !== id || !TAKEN.has(event)) continue;
    if (wanted !== undefined && (typeof to !== 'string' || to.toLowerCase() !== wanted)) {
      otherRecipient = true;
      continue;
    }
    const at = new Date(timestamp * 1000);
    return { kind: 'found', providerId: id, ...(Number.isFinite(at.getTime()) ? { at } : {}) };
  }
  if (otherRecipient) return { kind: 'unavailable', reason: 'mailgun message id found for another recipient' };
  // A full page without our event: more may follow; the answer is not complete.
  if (items.length >= 300) return { kind: 'unavailable', reason: 'mailgun event search incomplete' };
  return { kind: 'not_found' };
}
