/**
 * SMTP through nodemailer's lower-level SMTPConnection (ADR 005), because the verdict on a failed
 * delivery depends on the protocol phase it failed in, and only the caller of that API knows it:
 *
 * - `connect` (greeting, EHLO, STARTTLS, AUTH) and `envelope` (MAIL, RCPT, DATA up to its 354):
 *   nothing of the message has left us. A refusal or a lost connection is `not_sent` (retry), except
 *   a 5xx to MAIL/RCPT/DATA, which refuses this message for good (`rejected`).
 * - `body`: from the first time the connection reads the message body. The server may hold the
 *   message whatever happens next, so a reply to the final dot is definitive (2xx sent, 4xx
 *   not_sent, 5xx rejected) and anything else (close, reset, timeout, TLS error) is `unknown`.
 *
 * The phase is not taken from the library's error labels (nodemailer tags socket errors `CONN` in
 * every phase); it is observed: the body is a stream whose first read marks the phase.
 *
 * Our timeout ends the call, not the conversation: past it, a send in the body phase is reported
 * `unknown` with a `late` verdict, and the connection keeps waiting for the reply to the final dot
 * for up to `finalReplyTimeoutMs` (RFC 5321 §4.5.3.2.6 suggests 10 minutes), so a late 250 is
 * recorded as `sent` rather than lost.
 *
 * SMTP has no idempotency keys, so the message carries a deterministic Message-ID (the caller's,
 * `<send identifier@domain>`, ADR 012): receivers and provider logs can recognize a repeat, and
 * operators can search for it. Where the server offers DSN (RFC 3461), the envelope carries the
 * send identifier as ENVID, which the server's delivery status notifications echo back.
 */
import { Readable } from 'node:stream';
import MailComposer from 'nodemailer/lib/mail-composer';
import SMTPConnection from 'nodemailer/lib/smtp-connection';
import { traced } from '@outreach/shared';
import { callsSettled, type MailMessage, type MailProvider, type SendResult } from './port.js';

export interface SmtpProviderOptions {
  readonly host: string;
  readonly port: number;
  /** Implicit TLS: the session is encrypted from the first byte (port 465). */
  readonly secure: boolean;
  /**
   * On a plain port, the session must upgrade with STARTTLS before anything else is said: a server
   * that does not offer it gets no message and no credentials (a connect-phase failure, retried).
   * Off only for development servers that offer no TLS at all (Mailpit, the test sink).
   */
  readonly requireTLS: boolean;
  /** Certificates to trust (PEM), for a server whose certificate is not from a public CA. */
  readonly ca?: string;
  /** The name the server's certificate must carry when `host` is an address or an internal alias. */
  readonly servername?: string;
  readonly user?: string;
  readonly password?: string;
  /** Upper bound of one call; kept below the claim lease by config validation. */
  readonly timeoutMs: number;
  /** How long a connection waits for the reply to the final dot in all, past `timeoutMs` too. */
  readonly finalReplyTimeoutMs: number;
  /** Idle connections kept for reuse. */
  readonly maxConnections: number;
  /**
   * Ask a server that offers DSN for success notifications too (NOTIFY=SUCCESS,FAILURE, RET=HDRS):
   * the delivery evidence that settles an in-doubt send (ADR 009). Off: the server's default.
   */
  readonly successDsn?: boolean;
  /** Messages per connection before it is closed and a new one opened. */
  readonly maxMessagesPerConnection?: number;
}

export type SmtpPhase = 'connect' | 'envelope' | 'body';

/** The envelope; `dsn.envid` is sent only when the server offers DSN (nodemailer checks the EHLO). */
type Envelope = SMTPConnection.Envelope;

interface Session {
  readonly connection: SMTPConnection;
  messages: number;
  open: boolean;
}

/** What one attempt on one connection established, and whether a fresh connection may try again. */
interface Attempt {
  readonly result: SendResult;
  /** A reused connection failed before anything of the message left us: it had gone stale. */
  readonly stale: boolean;
}

export class SmtpProvider implements MailProvider {
  readonly name = 'smtp';
  private readonly idle: Session[] = [];
  private readonly sessions = new Set<Session>();
  private readonly calls = new Set<Promise<SendResult>>();
  private closed = false;

  constructor(private readonly options: SmtpProviderOptions) {}

  /**
   * One SMTP conversation, in an `smtp send` span of the caller's trace (tracing on): the server, the
   * sendId and the verdict (its kind and code), never an address.
   */
  async send(message: MailMessage, idempotencyKey: string): Promise<SendResult> {
    if (this.closed) return { kind: 'not_sent', reason: 'smtp provider is shutting down' };
    const attributes = {
      'server.address': this.options.host,
      'server.port': this.options.port,
      'outreach.send_id': idempotencyKey,
    };
    return traced('smtp send', { kind: 'client', attributes }, async (span) => {
      const call = this.deliver(message);
      this.calls.add(call);
      try {
        const result = await call;
        span.setAttribute('outreach.send.result', result.kind);
        if (result.kind !== 'sent') span.fail(result.reason);
        return result;
      } finally {
        this.calls.delete(call);
      }
    });
  }

  /**
   * Graceful: no new calls; calls in flight end first (each within `timeoutMs`), so a shutdown
   * (SIGTERM, a rebalance) never cuts a message mid-conversation. Then every connection closes,
   * including those still waiting for a late reply: those sends stay `ambiguous`.
   */
  /** The DSN parameters of an envelope; nodemailer sends them only when the server offers DSN. */
  private dsn(envid: string): NonNullable<Envelope['dsn']> {
    return this.options.successDsn ? { envid, notify: ['SUCCESS', 'FAILURE'], ret: 'HDRS' } : { envid };
  }

  async close(): Promise<void> {
    this.closed = true;
    for (const session of this.idle.splice(0)) this.discard(session);
    await callsSettled(this.calls, this.options.timeoutMs + 1_000);
    for (const session of this.sessions) session.connection.close();
    this.sessions.clear();
  }

  private async deliver(message: MailMessage): Promise<SendResult> {
    const { messageId } = message;
    const mail = new MailComposer({
      from: message.from,
      to: message.to,
      subject: message.subject,
      text: message.text,
      messageId,
      headers: { ...message.headers },
      disableFileAccess: true,
      disableUrlAccess: true,
    }).compile();
    let raw: Buffer;
    let envelope: Envelope;
    try {
      raw = await mail.build();
      const { from, to } = mail.getEnvelope();
      envelope = { from: from || '', to, ...(message.envelopeId ? { dsn: this.dsn(message.envelopeId) } : {}) };
    } catch (error) {
      // Our own message cannot be built (an address nodemailer refuses): no server will take it.
      return { kind: 'rejected', reason: `message could not be composed: ${codeOf(error)}` };
    }
    // One deadline for the call: a retry after a stale pooled connection gets only what is left,
    // so the call still ends within `timeoutMs` and its verdict (or its late one) is ours to hand on.
    const deadline = Date.now() + this.options.timeoutMs;
    const pooled = this.takeIdle();
    const first = await this.attempt(pooled, envelope, raw, messageId, this.options.timeoutMs);
    const left = deadline - Date.now();
    if (!(pooled && first.stale) || left <= 0) return first.result;
    return (await this.attempt(undefined, envelope, raw, messageId, left)).result;
  }

  private takeIdle(): Session | undefined {
    for (let session = this.idle.pop(); session; session = this.idle.pop()) {
      if (session.open) return session;
    }
    return undefined;
  }

  private release(session: Session): void {
    const limit = this.options.maxMessagesPerConnection ?? 100;
    if (this.closed || !session.open || session.messages >= limit || this.idle.length >= this.options.maxConnections) {
      this.discard(session);
      return;
    }
    this.idle.push(session);
  }

  private discard(session: Session): void {
    session.open = false;
    this.sessions.delete(session);
    const at = this.idle.indexOf(session);
    if (at >= 0) this.idle.splice(at, 1);
    session.connection.close();
  }

  private openSession(): Session {
    const { options } = this;
    const connection = new SMTPConnection({
      host: options.host,
      port: options.port,
      secure: options.secure,
      requireTLS: options.requireTLS && !options.secure,
      // Without TLS required, no STARTTLS is attempted: opportunistic TLS that falls back to plain
      // text on any failure protects nothing and makes the failure mode depend on the server.
      ignoreTLS: !options.requireTLS && !options.secure,
      tls: {
        minVersion: 'TLSv1.2',
        rejectUnauthorized: true,
        ...(options.ca ? { ca: options.ca } : {}),
        ...(options.servername ? { servername: options.servername } : {}),
      },
      connectionTimeout: options.timeoutMs,
      greetingTimeout: options.timeoutMs,
      // Inactivity bound of the whole session: long enough to hear a late reply to the final dot.
      socketTimeout: options.finalReplyTimeoutMs,
      logger: false,
    });
    const session: Session = { connection, messages: 0, open: true };
    this.sessions.add(session);
    // Errors also reach the send callback; an idle connection's errors only end it.
    connection.on('error', () => {
      session.open = false;
    });
    connection.on('end', () => {
      session.open = false;
      this.sessions.delete(session);
      const at = this.idle.indexOf(session);
      if (at >= 0) this.idle.splice(at, 1);
    });
    return session;
  }

  /** One delivery attempt on `reused` or a new connection; settles within `budgetMs`. */
  private attempt(
    reused: Session | undefined,
    envelope: Envelope,
    raw: Buffer,
    messageId: string,
    budgetMs: number,
  ): Promise<Attempt> {
    const { options } = this;
    let phase: SmtpPhase = reused ? 'envelope' : 'connect';
    const session = reused ?? this.openSession();
    const { connection } = session;

    let settleFinal!: (result: SendResult) => void;
    const final = new Promise<SendResult>((resolve) => {
      settleFinal = resolve;
    });
    let finished = false;
    let stale = false;
    const finish = (result: SendResult, keep: boolean) => {
      if (finished) return;
      finished = true;
      clearTimeout(lateTimer);
      connection.off('error', onConnectError);
      if (keep) {
        session.messages++;
        this.release(session);
      } else {
        this.discard(session);
      }
      settleFinal(result);
    };
    const lateTimer = setTimeout(
      () =>
        finish(
          phase === 'body'
            ? { kind: 'unknown', reason: 'smtp no reply to the final dot within the final-reply timeout' }
            : { kind: 'not_sent', reason: `smtp timeout in the ${phase} phase` },
          false,
        ),
      Math.max(options.timeoutMs, options.finalReplyTimeoutMs),
    );
    // nodemailer reports a failure while the session is set up (a refused or broken STARTTLS, EHLO
    // refused, the server hanging up) only as an 'error' event, never to connect()'s callback: heard
    // here, the attempt ends at once instead of waiting out its budget. Later phases get their errors
    // through the send callback.
    const onConnectError = (error: unknown) => {
      if (phase === 'connect') finish(connectFailure(error, connection, options), false);
    };
    connection.on('error', onConnectError);

    const body = new Readable({
      read() {
        phase = 'body';
        this.push(raw);
        this.push(null);
      },
    });
    const transmit = () => {
      phase = 'envelope';
      connection.send(envelope, body, (error, info) => {
        if (error) {
          // A pooled connection the server closed while idle fails at once, without a reply.
          stale = reused !== undefined && phase === 'envelope' && typeof error.responseCode !== 'number';
          finish(classify(error, phase), false);
          return;
        }
        if ((info.rejected ?? []).length > 0) {
          finish({ kind: 'rejected', reason: 'smtp recipient rejected at RCPT' }, true);
          return;
        }
        finish({ kind: 'sent', providerMessageId: messageId }, true);
      });
    };
    if (reused) {
      transmit();
    } else {
      connection.connect((error) => {
        if (error) return finish(connectFailure(error, connection, options), false);
        if (!options.user) return transmit();
        // Never credentials in clear text, whatever the configuration says (checkConfig refuses it too).
        if (!connection.secure)
          return finish(
            { kind: 'not_sent', reason: 'smtp refused to authenticate over an unencrypted session' },
            false,
          );
        connection.login({ user: options.user, pass: options.password ?? '' }, (loginError) => {
          if (loginError) finish(classify(loginError, 'connect'), false);
          else transmit();
        });
      });
    }

    return new Promise<Attempt>((resolve) => {
      const deadline = setTimeout(() => {
        if (phase === 'body') {
          resolve({
            result: {
              kind: 'unknown',
              reason: `smtp no reply to the final dot within ${budgetMs} ms`,
              late: final,
              lateWithinMs: Math.max(0, options.finalReplyTimeoutMs - budgetMs),
            },
            stale: false,
          });
          return;
        }
        finish({ kind: 'not_sent', reason: `smtp timeout after ${budgetMs} ms in the ${phase} phase` }, false);
      }, budgetMs);
      void final.then((result) => {
        clearTimeout(deadline);
        resolve({ result, stale });
      });
    });
  }
}

/**
 * A failure while the session was set up (nothing of the message left us: `not_sent`, retried like
 * the other connect-phase failures). When it is TLS that could not be had (STARTTLS refused, not
 * offered, or cut off; EHLO refused so only HELO, which cannot STARTTLS, was left), the reason says
 * so: an operator then looks at the server's TLS, not at the network.
 */
function connectFailure(error: unknown, connection: SMTPConnection, options: SmtpProviderOptions): SendResult {
  const verdict = classify(error, 'connect');
  const { command, responseCode } = (error ?? {}) as { command?: unknown; responseCode?: unknown };
  const tls =
    codeOf(error) === 'ETLS' ||
    // nodemailer's own flag for a TLS handshake under way after the server's 220 to STARTTLS (it is
    // what makes its close handler say ETLS); a socket error then is the handshake failing.
    (connection as unknown as { upgrading?: unknown }).upgrading === true ||
    command === 'STARTTLS' ||
    (options.requireTLS &&
      !options.secure &&
      command === 'EHLO' &&
      typeof responseCode === 'number' &&
      responseCode >= 500);
  return tls && verdict.kind === 'not_sent'
    ? { ...verdict, reason: `${verdict.reason}: no TLS session (STARTTLS required), nothing sent in clear text` }
    : verdict;
}

/** The enhanced status code (RFC 3463) of a reply, e.g. `5.1.1`, when it has one. */
function enhancedCode(response: unknown): string | undefined {
  if (typeof response !== 'string') return undefined;
  return /^\d{3}[ -]([245]\.\d{1,3}\.\d{1,3})\b/.exec(response)?.[1];
}

function codeOf(error: unknown): string {
  const code = (error as { code?: unknown } | null)?.code;
  return typeof code === 'string' && /^[A-Z_]{2,32}$/.test(code) ? code : 'error';
}

/**
 * The verdict on a failed attempt, from the phase it failed in (see the module header) and the
 * server's reply code if it sent one. The reason names codes only, never the reply's text.
 */
export function classify(error: unknown, phase: SmtpPhase): SendResult {
  const { responseCode, response, command } = (error ?? {}) as {
    responseCode?: unknown;
    response?: unknown;
    command?: unknown;
  };
  const code = codeOf(error);
  const where =
    phase === 'body'
      ? 'after the message was handed over'
      : typeof command === 'string' && /^[A-Z ]{2,16}$/.test(command) && command !== 'CONN' && command !== 'API'
        ? `at ${command}`
        : `in the ${phase} phase`;
  if (phase !== 'connect' && typeof responseCode === 'number' && responseCode >= 400 && responseCode < 600) {
    const enhanced = enhancedCode(response);
    const permanent = responseCode >= 500;
    const reason = `smtp ${responseCode}${enhanced ? ` ${enhanced}` : ''} ${permanent ? 'permanent' : 'temporary'} ${where}`;
    if (!permanent) return { kind: 'not_sent', reason };
    return command === 'RCPT TO'
      ? { kind: 'rejected', reason, recipient: { status: enhanced ?? null } }
      : { kind: 'rejected', reason };
  }
  if (phase === 'body') return { kind: 'unknown', reason: `smtp ${code} ${where}, before a reply to the final dot` };
  if (
    phase === 'envelope' &&
    (code === 'EENVELOPE' || code === 'EMESSAGE') &&
    typeof responseCode !== 'number' &&
    response === undefined
  ) {
    // Refused by the client library itself, before the server said anything (an address or a size
    // it will not send): no retry helps. A reply without a code is the server's garbage: not_sent.
    return { kind: 'rejected', reason: `smtp ${code} ${where}` };
  }
  const reply = typeof responseCode === 'number' ? ` ${responseCode}` : '';
  return { kind: 'not_sent', reason: `smtp ${code}${reply} ${where}` };
}
