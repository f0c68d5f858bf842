/**
 * Delivery lookup against Mailpit, the development provider in docker-compose (and the test SMTP
 * server, which serves the same endpoint: SmtpSink.startMailpitApi).
 *
 * Mailpit's API v1 (https://mailpit.axllent.org/docs/api-v1/, swagger `GET /api/v1/search`):
 * `query=message-id:<id>` returns `{ messages: [MessageSummary], messages_count, total, ... }`,
 * newest first. Its search is looser than the question we ask, so the answer is re-checked here:
 * - the Message-ID is stored without `<>` and matched as a case-insensitive SQL `LIKE '%id%'`
 *   (https://mailpit.axllent.org/docs/usage/search-filters/; `_` is a wildcard there), so only
 *   summaries whose `MessageID` equals ours exactly count;
 * - when more messages matched than were returned (`messages_count` > `messages.length`) and none of
 *   those is ours, the answer is incomplete: `unavailable`, not `not_found`.
 *
 * Mailpit stores a message before it answers the final dot, so its search shows it at once: the
 * settle time only needs to cover the SMTP hand-over (the reconciler adds that) and clock skew.
 */
import http from 'node:http';
import { httpCall, parseJsonObject, type HttpOutcome } from './http-call.js';
import { searchableMessageId, type DeliveryLookup, type LookupQuery, type LookupResult } from './lookup.js';

export interface MailpitLookupOptions {
  /** e.g. `http://mailpit:8025` (compose) or the sink's `startMailpitApi()` URL. */
  readonly baseUrl: string;
  readonly timeoutMs: number;
  readonly settleMs?: number;
  /** Mailpit's optional UI/API basic auth. */
  readonly username?: string;
  readonly password?: string;
  /** Summaries asked for per search; more matches than this (and none ours) is `unavailable`. */
  readonly limit?: number;
  readonly maxResponseBytes?: number;
}

export class MailpitLookup implements DeliveryLookup {
  readonly name = 'mailpit';
  readonly settleMs: number;
  private readonly agent = new http.Agent({ keepAlive: true, maxSockets: 4 });
  private readonly search: URL;

  constructor(private readonly options: MailpitLookupOptions) {
    this.settleMs = options.settleMs ?? 5_000;
    this.search = new URL('api/v1/search', options.baseUrl.endsWith('/') ? options.baseUrl : `${options.baseUrl}/`);
  }

  async find(query: LookupQuery, signal?: AbortSignal): Promise<LookupResult> {
    const id = searchableMessageId(query.messageId);
    if (!id) return { kind: 'unavailable', reason: 'mailpit message id not searchable' };
    const url = new URL(this.search);
    url.searchParams.set('query', `message-id:${id}`);
    url.searchParams.set('limit', String(this.options.limit ?? 50));
    const { username, password } = this.options;
    const outcome = await httpCall({
      method: 'GET',
      url,
      headers: username
        ? { authorization: `Basic ${Buffer.from(`${username}:${password ?? ''}`).toString('base64')}` }
        : {},
      timeoutMs: this.options.timeoutMs,
      maxResponseBytes: this.options.maxResponseBytes ?? 1024 * 1024,
      agent: this.agent,
      ...(signal ? { signal } : {}),
    });
    return interpretSearch(outcome, id, query.recipient);
  }

  async close(): Promise<void> {
    this.agent.destroy();
  }
}

interface Summary {
  readonly id: string;
  readonly messageId: string;
  readonly created: Date | undefined;
  readonly recipients: readonly string[];
}

/** A MessageSummary as documented, or undefined when it is not one. */
function summaryOf(value: unknown): Summary | undefined {
  if (typeof value !== 'object' || value === null) return undefined;
  const { ID, MessageID, Created, To, Cc, Bcc } = value as Record<string, unknown>;
  if (typeof ID !== 'string' || typeof MessageID !== 'string') return undefined;
  const recipients: string[] = [];
  for (const list of [To, Cc, Bcc]) {
    if (list === undefined || list === null) continue;
    if (!Array.isArray(list)) return undefined;
    for (const entry of list) {
      const address = (entry as { Address?: unknown } | null)?.Address;
      if (typeof address !== 'string') return undefined;
      recipients.push(address.toLowerCase());
    }
  }
  const created = typeof Created === 'string' ? new Date(Created) : undefined;
  return {
    id: ID,
    messageId: MessageID,
    created: created && Number.isFinite(created.getTime()) ? created : undefined,
    recipients,
  };
}

export function interpretSearch(outcome: HttpOutcome, id: string, recipient?: string): LookupResult {
  if (outcome.kind === 'too_large') return { kind: 'unavailable', reason: 'mailpit response too large' };
  if (outcome.kind === 'timeout') return { kind: 'unavailable', reason: 'mailpit timeout' };
  if (outcome.kind === 'failed') return { kind: 'unavailable', reason: `mailpit ${outcome.code}` };
  if (outcome.status !== 200) return { kind: 'unavailable', reason: `mailpit http ${outcome.status}` };
  const body = parseJsonObject(outcome.body);
  const messages = body?.messages;
  const count = body?.messages_count;
  if (!Array.isArray(messages) || typeof count !== 'number' || !Number.isInteger(count) || count < 0) {
    return { kind: 'unavailable', reason: 'mailpit response not a search result' };
  }
  const summaries = messages.map(summaryOf);
  if (summaries.some((s) => s === undefined)) {
    return { kind: 'unavailable', reason: 'mailpit response not a search result' };
  }
  const ours = (summaries as Summary[]).filter((s) => s.messageId === id);
  if (ours.length > 0) {
    const wanted = recipient?.toLowerCase();
    const match = wanted === undefined ? ours[0] : ours.find((s) => s.recipients.includes(wanted));
    // Our Message-ID on a message to someone else: not proof of our delivery, nor of its absence.
    if (!match) return { kind: 'unavailable', reason: 'mailpit message id found for another recipient' };
    return { kind: 'found', providerId: match.id, ...(match.created ? { at: match.created } : {}) };
  }
  if (count > messages.length) return { kind: 'unavailable', reason: 'mailpit search result incomplete' };
  return { kind: 'not_found' };
}
