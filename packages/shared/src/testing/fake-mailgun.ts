/**
 * A node:http server that speaks the subset of Mailgun's documented HTTP API the sender uses, so
 * the Mailgun adapter is tested against the API as documented rather than against mocks:
 *
 * - `POST /v3/{domain}/messages` (multipart/form-data or urlencoded; `from`, `to`, `subject` and
 *   `text` or `html` required; `h:<Header>` custom headers, `h:Message-Id` taken as the message's
 *   id; `v:<name>` variables), answering `{ id: '<message-id>', message: 'Queued. Thank you.' }`.
 *   https://documentation.mailgun.com/docs/mailgun/api-reference/send/mailgun/messages
 * - `GET /v3/{domain}/events` filtered by `message-id` (without brackets), `recipient`, `event`,
 *   `begin`/`end` (epoch seconds), `limit` (at most 300), answering `{ items, paging }`; one
 *   `accepted` event per recipient of each stored message.
 *   https://documentation.mailgun.com/docs/mailgun/api-reference/send/mailgun/events
 * - HTTP Basic auth as `api:<key>`; any other credentials get 401 `Forbidden`.
 *
 * Events become visible `eventsVisibleAfterMs` after the message was stored, as Mailgun's event
 * storage lags (https://documentation.mailgun.com/docs/mailgun/user-manual/events/event-polling).
 * Like Mailgun, it keeps every copy it accepts: tests count duplicates here.
 *
 * Hostile per request (`hostile(n, endpoint)`): see HttpHostility. A message is stored before the
 * hostility is played unless the hostility refuses the request (reset, status).
 */
import { randomBytes } from 'node:crypto';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { actsOnRequest, playHostility, readRequestBody, sendJson, type HttpHostility } from './http-hostility.js';

export interface MailgunStoredMessage {
  /** The Message-Id without brackets (what the events API filters on). */
  readonly id: string;
  readonly storedAt: number;
  readonly from: string;
  readonly to: readonly string[];
  readonly subject: string;
  readonly text: string | undefined;
  /** `h:` headers, by lower-cased name. */
  readonly headers: ReadonlyMap<string, string>;
  /** `v:` variables. */
  readonly variables: ReadonlyMap<string, string>;
}

export type MailgunEndpoint = 'messages' | 'events';

export interface FakeMailgunOptions {
  readonly apiKey: string;
  readonly domain: string;
  readonly eventsVisibleAfterMs?: number;
  /** Larger request bodies are refused with 413 (Mailgun's limit is 25 MB). */
  readonly maxRequestBytes?: number;
  readonly hostile?: (n: number, endpoint: MailgunEndpoint) => HttpHostility | undefined;
}

export class FakeMailgun {
  readonly messages: MailgunStoredMessage[] = [];
  /** Requests per endpoint, and how each hostile one was played. */
  readonly requests: Record<MailgunEndpoint, number> = { messages: 0, events: 0 };
  readonly misbehaved: Array<{ endpoint: MailgunEndpoint; hostility: HttpHostility }> = [];
  url = '';
  private server: Server | undefined;
  private readonly timers = new Set<NodeJS.Timeout>();
  private n = 0;

  constructor(private readonly options: FakeMailgunOptions) {}

  async start(): Promise<this> {
    const server = createServer((req, res) => {
      this.handle(req, res).catch(() => {
        if (!res.headersSent) sendJson(res, 500, { message: 'fake mailgun failed' });
        else res.destroy();
      });
    });
    this.server = server;
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(0, '127.0.0.1', () => resolve());
    });
    this.url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
    return this;
  }

  async stop(): Promise<void> {
    const server = this.server;
    if (!server) return;
    for (const timer of this.timers) clearTimeout(timer);
    this.timers.clear();
    server.closeAllConnections();
    await new Promise<void>((resolve) => server.close(() => resolve()));
    this.server = undefined;
  }

  /** Copies stored for `recipient` (case-insensitive). */
  deliveredTo(recipient: string): MailgunStoredMessage[] {
    const wanted = recipient.toLowerCase();
    return this.messages.filter((m) => m.to.some((t) => t.toLowerCase() === wanted));
  }

  private async handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const url = new URL(req.url ?? '/', 'http://fake-mailgun');
    const route = /^\/v3\/([^/]+)\/(messages|events)$/.exec(url.pathname);
    const endpoint = route?.[2] as MailgunEndpoint | undefined;
    if (!route || !endpoint || (endpoint === 'messages') !== (req.method === 'POST')) {
      sendJson(res, 404, { message: 'Not Found' });
      return;
    }
    this.requests[endpoint]++;
    const hostility = this.options.hostile?.(++this.n, endpoint);
    if (hostility) this.misbehaved.push({ endpoint, hostility });
    if (hostility && !actsOnRequest(hostility)) {
      playHostility(req, res, hostility, () => undefined, this.timers);
      return;
    }
    const expected = `Basic ${Buffer.from(`api:${this.options.apiKey}`).toString('base64')}`;
    if (req.headers.authorization !== expected) {
      res.writeHead(401, { 'content-type': 'text/plain' });
      res.end('Forbidden');
      return;
    }
    if (decodeURIComponent(route[1] ?? '') !== this.options.domain) {
      sendJson(res, 404, { message: 'Domain not found' });
      return;
    }
    const answer =
      endpoint === 'messages' ? await this.acceptMessage(req, res) : this.searchEvents(url.searchParams, res);
    if (!answer) return;
    if (hostility) playHostility(req, res, hostility, answer, this.timers);
    else answer();
  }

  /** Stores the message and returns its honest answer, or answers a refusal itself (undefined). */
  private async acceptMessage(req: IncomingMessage, res: ServerResponse): Promise<(() => void) | undefined> {
    const raw = await readRequestBody(req, res, this.options.maxRequestBytes ?? 1024 * 1024);
    if (!raw) return undefined;
    let form: FormData;
    try {
      form = await new Request('http://fake-mailgun/', {
        method: 'POST',
        headers: { 'content-type': req.headers['content-type'] ?? '' },
        body: raw,
      }).formData();
    } catch {
      sendJson(res, 400, { message: 'invalid request body' });
      return undefined;
    }
    const text = (name: string) => {
      const values = form.getAll(name).filter((v): v is string => typeof v === 'string');
      return values.length > 0 ? values : undefined;
    };
    const from = text('from')?.[0];
    const to = (text('to') ?? []).flatMap(splitAddresses);
    const subject = text('subject')?.[0];
    const body = text('text')?.[0];
    if (!from) return this.refuse(res, "'from' parameter is missing");
    if (to.length === 0) return this.refuse(res, "'to' parameter is missing");
    if (subject === undefined) return this.refuse(res, "'subject' parameter is missing");
    if (body === undefined && text('html') === undefined) {
      return this.refuse(res, "Need at least one of 'text', 'html', 'amp-html' or 'template' parameters specified");
    }
    const headers = new Map<string, string>();
    const variables = new Map<string, string>();
    for (const [name, value] of form.entries()) {
      if (typeof value !== 'string') continue;
      if (name.startsWith('h:')) headers.set(name.slice(2).toLowerCase(), value);
      if (name.startsWith('v:')) variables.set(name.slice(2), value);
    }
    const given = headers.get('message-id')?.trim().replace(/^<|>$/g, '');
    const id = given || `${Date.now()}.${randomBytes(8).toString('hex')}@${this.options.domain}`;
    this.messages.push({ id, storedAt: Date.now(), from, to, subject, text: body, headers, variables });
    return () => sendJson(res, 200, { id: `<${id}>`, message: 'Queued. Thank you.' });
  }

  private refuse(res: ServerResponse, message: string): undefined {
    sendJson(res, 400, { message });
    return undefined;
  }

  private searchEvents(params: URLSearchParams, res: ServerResponse): (() => void) | undefined {
    const limit = Number(params.get('limit') ?? '100');
    if (!Number.isInteger(limit) || limit < 1 || limit > 300) {
      sendJson(res, 400, { message: 'limit must be an integer between 1 and 300' });
      return undefined;
    }
    const bound = (name: string) => {
      const value = params.get(name);
      if (value === null) return undefined;
      const seconds = Number(value);
      return Number.isFinite(seconds) ? seconds : Number.NaN;
    };
    const begin = bound('begin');
    const end = bound('end');
    if (Number.isNaN(begin) || Number.isNaN(end)) {
      sendJson(res, 400, { message: 'begin and end must be epoch seconds' });
      return undefined;
    }
    const messageId = params.get('message-id');
    const recipient = params.get('recipient')?.toLowerCase();
    const event = params.get('event');
    const visibleBefore = Date.now() - (this.options.eventsVisibleAfterMs ?? 0);
    const items = this.messages
      .filter((m) => m.storedAt <= visibleBefore)
      .flatMap((m, index) => m.to.map((to, r) => ({ m, to, eventId: `ev-${index}-${r}` })))
      .filter(({ m, to }) => {
        const seconds = m.storedAt / 1000;
        return (
          (messageId === null || m.id === messageId) &&
          (recipient === undefined || to.toLowerCase() === recipient) &&
          (event === null || event === 'accepted') &&
          (begin === undefined || seconds >= begin) &&
          (end === undefined || seconds <= end)
        );
      })
      .sort((a, b) => (params.get('ascending') === 'yes' ? 1 : -1) * (a.m.storedAt - b.m.storedAt))
      .slice(0, limit)
      .map(({ m, to, eventId }) => ({
        id: eventId,
        event: 'accepted',
        timestamp: m.storedAt / 1000,
        'log-level': 'info',
        method: 'HTTP',
        recipient: to,
        'recipient-domain': to.split('@')[1] ?? '',
        envelope: { sender: m.from, targets: to, transport: 'smtp' },
        message: {
          headers: { 'message-id': m.id, from: m.from, to: m.to.join(', '), subject: m.subject },
          size: (m.text ?? '').length,
        },
        'user-variables': Object.fromEntries(m.variables),
        flags: { 'is-authenticated': true, 'is-test-mode': false },
      }));
    const page = `${this.url}/v3/${this.options.domain}/events/page`;
    return () =>
      sendJson(res, 200, {
        items,
        paging: { first: `${page}/first`, last: `${page}/last`, next: `${page}/next`, previous: `${page}/previous` },
      });
  }
}

/** `Ada <ada@example.com>, bob@example.com` → the bare addresses. */
function splitAddresses(value: string): string[] {
  return value
    .split(',')
    .map((part) => /<([^>]+)>/.exec(part)?.[1] ?? part.trim())
    .filter((address) => address.length > 0);
}
