/**
 * A real SMTP server (the `smtp-server` package) that accepts every message and records it:
 * envelope recipients, Message-ID, headers, subject. Tests and the demo count deliveries here,
 * never in the code under test.
 *
 * It can also be a hostile peer, scripted per transaction: it fails at the worst moments of the
 * protocol (no greeting, a dropped connection at MAIL or after RCPT, a reset mid-body, a drop or a
 * stall or a 4xx/5xx after the final dot). A message the server received in full is counted as
 * delivered whatever it answered (or did not), except when it answered with a refusal: that is
 * what a real server that queued it before losing the connection would have done.
 *
 * With startMailpitApi it also answers Mailpit's search API (`GET /api/v1/search`, the subset the
 * sender's delivery lookup uses) over the messages it holds, so the lookup adapter that runs
 * against Mailpit in docker-compose is tested against this server; that API can be hostile too.
 */
import { createServer, type IncomingMessage, type Server as HttpServer, type ServerResponse } from 'node:http';
import type { AddressInfo, Server, Socket } from 'node:net';
import { simpleParser } from 'mailparser';
import { SMTPServer, type SMTPServerOptions } from 'smtp-server';
import { playHostility, sendJson, type HttpHostility } from './http-hostility.js';

export interface DeliveredMessage {
  readonly from: string;
  readonly to: readonly string[];
  readonly messageId: string | undefined;
  readonly subject: string | undefined;
  readonly headers: ReadonlyMap<string, string>;
  readonly text: string | undefined;
  readonly receivedAt: number;
  /** The session was encrypted (STARTTLS or implicit TLS) when the message arrived. */
  readonly secure: boolean;
  /** The user the session authenticated as, if it did. */
  readonly user: string | undefined;
  /** The ENVID of MAIL FROM (RFC 3461), when the sink offered DSN and the client gave one. */
  readonly envelopeId: string | undefined;
  /**
   * The NOTIFY values of each recipient's RCPT TO (RFC 3461: SUCCESS, FAILURE, DELAY or NEVER),
   * upper-cased, by recipient as in `to`; none for a recipient without NOTIFY or when DSN is off.
   */
  readonly notify: ReadonlyMap<string, readonly string[]>;
}

/** How a transaction goes wrong, by the protocol moment it goes wrong at. */
export type SmtpHostility =
  /** Accept the connection, never send the greeting. */
  | { readonly at: 'greeting'; readonly act: 'stall' }
  /** Close the connection instead of answering MAIL FROM. */
  | { readonly at: 'mail'; readonly act: 'drop' }
  /** Accept RCPT TO, then close the connection before DATA is answered. */
  | { readonly at: 'rcpt'; readonly act: 'drop' }
  /** Reset the connection when the first bytes of the body arrive. */
  | { readonly at: 'body'; readonly act: 'reset' }
  /** Receive the whole message, then close without answering the final dot. */
  | { readonly at: 'dot'; readonly act: 'drop' }
  /** Receive the whole message, answer the final dot with 250 only after `ms`. */
  | { readonly at: 'dot'; readonly act: 'stall'; readonly ms: number }
  /** Receive the whole message, answer the final dot with this code (4xx or 5xx). */
  | { readonly at: 'dot'; readonly act: 'reply'; readonly code: number };

export interface SmtpSinkOptions {
  readonly port?: number;
  readonly host?: string;
  /** Reject (5xx) or delay deliveries, to exercise a provider's failures. */
  readonly behaviour?: (recipient: string) => { reject?: string; delayMs?: number } | undefined;
  /**
   * Misbehave in transaction `n` (1-based, counted at MAIL FROM across connections; greeting
   * stalls are decided per connection, counted the same way).
   */
  readonly hostile?: (n: number) => SmtpHostility | undefined;
  /**
   * Offer TLS with this key and certificate (PEM): STARTTLS on a plain port, or the whole session
   * encrypted from the first byte with `implicit`. Without it the sink offers no STARTTLS.
   */
  readonly tls?: { readonly key: string; readonly cert: string; readonly implicit?: boolean };
  /** Offer AUTH (PLAIN, LOGIN) for this one user; without it the sink offers no AUTH. */
  readonly auth?: { readonly user: string; readonly password: string };
  /** Offer the DSN extension (RFC 3461), so a client may give an ENVID and NOTIFY; off by default. */
  readonly dsn?: boolean;
  /**
   * Told of each message once it is recorded (before the final dot is answered): a stand-in
   * provider reports its deliveries from here.
   */
  readonly onMessage?: (message: DeliveredMessage) => void;
}

export interface MailpitApiOptions {
  readonly port?: number;
  /** The address it listens on (default 127.0.0.1; the compose stand-in listens on 0.0.0.0). */
  readonly host?: string;
  /** Misbehave on API request `n` (1-based). */
  readonly hostile?: (n: number) => HttpHostility | undefined;
}

export class SmtpSink {
  readonly messages: DeliveredMessage[] = [];
  /** Connections that failed mid-session (e.g. reset by a killed client). */
  connectionErrors = 0;
  /** Transactions begun (MAIL FROM commands seen), and how each hostile one was played. */
  transactions = 0;
  readonly misbehaved: SmtpHostility[] = [];
  /** AUTH attempts seen, and whether each came over an encrypted session. */
  readonly authAttempts: Array<{ readonly user: string; readonly secure: boolean; readonly ok: boolean }> = [];
  private server: SMTPServer | undefined;
  private readonly sockets = new Map<number, Socket>();
  /** The hostility planned for each session's current transaction. */
  private readonly planned = new Map<string, SmtpHostility>();
  port = 0;
  /** Requests the Mailpit API answered (or misbehaved on). */
  mailpitRequests = 0;
  private api: HttpServer | undefined;
  private readonly apiTimers = new Set<NodeJS.Timeout>();

  constructor(private readonly options: SmtpSinkOptions = {}) {}

  private socketOf(session: { remotePort: number }): Socket | undefined {
    return this.sockets.get(session.remotePort);
  }

  private play(hostility: SmtpHostility): SmtpHostility {
    this.misbehaved.push(hostility);
    return hostility;
  }

  /** Collects the body; with a `body` reset planned, resets the connection at its first bytes. */
  private async readBody(
    stream: NodeJS.ReadableStream,
    session: { id: string; remotePort: number },
  ): Promise<Buffer | undefined> {
    const plan = this.planned.get(session.id);
    const chunks: Buffer[] = [];
    for await (const chunk of stream) {
      if (plan?.at === 'body') {
        this.play(plan);
        this.socketOf(session)?.resetAndDestroy();
        return undefined;
      }
      chunks.push(Buffer.isBuffer(chunk) ? chunk : Buffer.from(chunk));
    }
    return Buffer.concat(chunks);
  }

  async start(): Promise<this> {
    const hostile = this.options.hostile;
    const serverOptions: SMTPServerOptions = {
      authOptional: true,
      disabledCommands: [
        ...(this.options.tls && !this.options.tls.implicit ? [] : ['STARTTLS']),
        ...(this.options.auth ? [] : ['AUTH']),
      ],
      // smtp-server refuses AUTH before TLS unless told otherwise; the sink allows it so a test can
      // show that our client never tries (authAttempts records whether each came encrypted).
      allowInsecureAuth: true,
      authMethods: ['PLAIN', 'LOGIN'],
      hideDSN: !this.options.dsn,
      ...(this.options.tls
        ? { key: this.options.tls.key, cert: this.options.tls.cert, secure: this.options.tls.implicit ?? false }
        : {}),
      onAuth: (auth, session, callback) => {
        const expected = this.options.auth;
        const ok = expected !== undefined && auth.username === expected.user && auth.password === expected.password;
        this.authAttempts.push({ user: auth.username ?? '', secure: session.secure, ok });
        if (ok) callback(null, { user: auth.username });
        else callback(Object.assign(new Error('invalid credentials'), { responseCode: 535 }));
      },
      logger: false,
      onConnect: (session, callback) => {
        const plan = hostile?.(this.transactions + 1);
        if (plan?.at === 'greeting') {
          this.transactions++;
          this.play(plan);
          return; // no callback: no greeting, ever
        }
        callback();
      },
      onMailFrom: (_address, session, callback) => {
        const plan = hostile?.(++this.transactions);
        this.planned.delete(session.id);
        if (plan?.at === 'mail') {
          this.play(plan);
          this.socketOf(session)?.destroy();
          return;
        }
        if (plan) this.planned.set(session.id, plan);
        callback();
      },
      onRcptTo: (address, session, callback) => {
        const rule = this.options.behaviour?.(address.address);
        if (rule?.reject) {
          const error = Object.assign(new Error(rule.reject), { responseCode: 550 });
          callback(error);
          return;
        }
        callback();
        const plan = this.planned.get(session.id);
        if (plan?.at === 'rcpt') {
          this.play(plan);
          // At once: the 250 is written, a pipelined DATA is never answered.
          this.socketOf(session)?.destroy();
        }
      },
      onData: (stream, session, callback) => {
        this.readBody(stream, session)
          .then(async (raw) => {
            if (raw === undefined) return;
            const plan = this.planned.get(session.id);
            this.planned.delete(session.id);
            if (plan?.at === 'dot' && plan.act === 'reply') {
              this.play(plan);
              callback(Object.assign(new Error(`scripted refusal ${plan.code}`), { responseCode: plan.code }));
              return;
            }
            const parsed = await simpleParser(raw);
            const to = session.envelope.rcptTo.map((r) => r.address);
            const delay = Math.max(0, ...to.map((r) => this.options.behaviour?.(r)?.delayMs ?? 0));
            if (delay > 0) await new Promise((resolve) => setTimeout(resolve, delay));
            const headers = new Map<string, string>();
            for (const line of parsed.headerLines)
              headers.set(line.key, line.line.slice(line.line.indexOf(':') + 1).trim());
            const message: DeliveredMessage = {
              from: session.envelope.mailFrom ? session.envelope.mailFrom.address : '',
              to,
              messageId: parsed.messageId,
              subject: parsed.subject,
              headers,
              text: parsed.text,
              receivedAt: Date.now(),
              secure: session.secure,
              user: typeof session.user === 'string' ? session.user : undefined,
              envelopeId: envelopeIdOf(session.envelope),
              notify: new Map(session.envelope.rcptTo.flatMap((r) => notifyOf(r))),
            };
            this.messages.push(message);
            this.options.onMessage?.(message);
            if (plan?.at === 'dot' && plan.act === 'drop') {
              this.play(plan);
              this.socketOf(session)?.destroy();
              return;
            }
            if (plan?.at === 'dot' && plan.act === 'stall') {
              this.play(plan);
              setTimeout(() => callback(), plan.ms);
              return;
            }
            callback();
          })
          .catch((error: Error) => callback(error));
      },
    };
    this.server = new SMTPServer(serverOptions);
    const server = this.server;
    const inner = (server as unknown as { server: Server }).server;
    inner.on('connection', (socket: Socket) => {
      const port = socket.remotePort;
      if (port === undefined) return;
      this.sockets.set(port, socket);
      socket.once('close', () => this.sockets.delete(port));
    });
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(this.options.port ?? 0, this.options.host ?? '127.0.0.1', () => resolve());
    });
    // A client that dies mid-session (a SIGKILLed sender) resets its connection: that is the
    // sender's fault being tested, not the sink's, so it is counted, never thrown.
    server.on('error', () => {
      this.connectionErrors++;
    });
    const address = (server as unknown as { server: { address(): { port: number } } }).server.address();
    this.port = address.port;
    return this;
  }

  /** Messages delivered to `recipient` (compared case-insensitively, as mailboxes are). */
  deliveredTo(recipient: string): DeliveredMessage[] {
    const wanted = recipient.toLowerCase();
    return this.messages.filter((m) => m.to.some((t) => t.toLowerCase() === wanted));
  }

  /**
   * Serves Mailpit's `GET /api/v1/search` (https://mailpit.axllent.org/docs/api-v1/) for the
   * messages received so far, with Mailpit's own matching: `message-id:` is a case-insensitive
   * substring match on the Message-ID without its brackets (an SQL LIKE, so `_` matches any
   * character), `to:` a substring of a recipient; newest first; `start`/`limit` paging. Other
   * search terms are refused (400), so a test never relies on syntax this stand-in ignores. `GET /readyz`
   * answers 200, as Mailpit's does. Returns the base URL (`http://127.0.0.1:<port>`).
   */
  async startMailpitApi(options: MailpitApiOptions = {}): Promise<string> {
    if (this.api) throw new Error('the Mailpit API is already started');
    const api = createServer((req, res) => this.answerMailpit(req, res, options));
    this.api = api;
    await new Promise<void>((resolve, reject) => {
      api.once('error', reject);
      api.listen(options.port ?? 0, options.host ?? '127.0.0.1', () => resolve());
    });
    return `http://127.0.0.1:${(api.address() as AddressInfo).port}`;
  }

  private answerMailpit(req: IncomingMessage, res: ServerResponse, options: MailpitApiOptions): void {
    const hostility = options.hostile?.(++this.mailpitRequests);
    const url = new URL(req.url ?? '/', 'http://sink');
    const answer = () => {
      // Mailpit's readiness route (`mailpit readyz` asks it).
      if (req.method === 'GET' && url.pathname === '/readyz') {
        res.writeHead(200, { 'content-type': 'text/plain' });
        res.end('ok');
        return;
      }
      if (req.method !== 'GET' || url.pathname !== '/api/v1/search') {
        res.writeHead(404, { 'content-type': 'text/plain' });
        res.end('404 page not found');
        return;
      }
      const result = this.mailpitSearch(url.searchParams);
      if (typeof result === 'string') {
        res.writeHead(400, { 'content-type': 'text/plain' });
        res.end(result);
        return;
      }
      sendJson(res, 200, result);
    };
    if (hostility) playHostility(req, res, hostility, answer, this.apiTimers);
    else answer();
  }

  /** Mailpit's MessagesSummary for a search, or the text of its 400. */
  private mailpitSearch(params: URLSearchParams): Record<string, unknown> | string {
    const query = (params.get('query') ?? '').trim();
    if (!query) return 'Error: no search query';
    const filters: Array<(m: DeliveredMessage) => boolean> = [];
    for (const term of query.split(/\s+/)) {
      const lower = term.toLowerCase();
      if (lower.startsWith('message-id:')) {
        const like = likePattern(cleanSearch(term.slice('message-id:'.length)));
        filters.push((m) => like.test(bare(m.messageId ?? '')));
      } else if (lower.startsWith('to:')) {
        const wanted = cleanSearch(term.slice('to:'.length));
        filters.push((m) => m.to.some((t) => t.toLowerCase().includes(wanted)));
      } else {
        return `Error: the test sink does not implement the search term ${JSON.stringify(term)}`;
      }
    }
    const start = Math.max(0, Number.parseInt(params.get('start') ?? '0', 10) || 0);
    const limit = Math.max(1, Number.parseInt(params.get('limit') ?? '50', 10) || 50);
    const matching = this.messages
      .map((message, index) => ({ message, id: `sink-${index + 1}` }))
      .filter(({ message }) => filters.every((f) => f(message)))
      .reverse();
    const address = (a: string) => ({ Name: '', Address: a });
    return {
      total: this.messages.length,
      unread: this.messages.length,
      messages_count: matching.length,
      messages_unread: matching.length,
      start,
      tags: [],
      messages: matching.slice(start, start + limit).map(({ message, id }) => ({
        ID: id,
        MessageID: bare(message.messageId ?? ''),
        Read: false,
        From: address(message.from),
        To: message.to.map(address),
        Cc: [],
        Bcc: [],
        ReplyTo: [],
        Subject: message.subject ?? '',
        Created: new Date(message.receivedAt).toISOString(),
        Tags: [],
        Size: (message.text ?? '').length,
        Attachments: 0,
        Snippet: (message.text ?? '').slice(0, 250),
      })),
    };
  }

  async stop(): Promise<void> {
    const api = this.api;
    if (api) {
      for (const timer of this.apiTimers) clearTimeout(timer);
      this.apiTimers.clear();
      api.closeAllConnections();
      await new Promise<void>((resolve) => api.close(() => resolve()));
      this.api = undefined;
    }
    const server = this.server;
    if (!server) return;
    // Stalled sessions (a greeting or a reply never sent) would keep close() waiting.
    for (const socket of this.sockets.values()) socket.destroy();
    await new Promise<void>((resolve) => server.close(() => resolve()));
    this.server = undefined;
  }
}

/** The ENVID smtp-server keeps on the envelope when it offered DSN (its type does not declare it). */
function envelopeIdOf(envelope: object): string | undefined {
  const envid = (envelope as { dsn?: { envid?: unknown } }).dsn?.envid;
  return typeof envid === 'string' ? envid : undefined;
}

/** A recipient's NOTIFY values, which smtp-server keeps on the address when it offered DSN (undeclared too). */
function notifyOf(recipient: { address: string }): Array<[string, readonly string[]]> {
  const notify = (recipient as { dsn?: { notify?: unknown } }).dsn?.notify;
  return Array.isArray(notify) && notify.every((v) => typeof v === 'string')
    ? [[recipient.address, notify.map((v: string) => v.toUpperCase())]]
    : [];
}

/** Mailpit stores a Message-ID without its angle brackets. */
function bare(messageId: string): string {
  return messageId.trim().replace(/^<|>$/g, '');
}

/** Mailpit's cleanString: lower case, `<>"(),;` and line breaks become spaces, spaces collapse. */
function cleanSearch(value: string): string {
  return value
    .replace(/[\r\n\t<>",;()]/g, ' ')
    .trim()
    .split(/\s+/)
    .join(' ')
    .toLowerCase();
}

/** SQLite's `LIKE '%value%'` (ASCII case-insensitive; `_` any one character, `%` any run). */
function likePattern(value: string): RegExp {
  const body = [...value]
    .map((c) => (c === '_' ? '.' : c === '%' ? '.*' : c.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')))
    .join('');
  return new RegExp(body, 'i');
}
