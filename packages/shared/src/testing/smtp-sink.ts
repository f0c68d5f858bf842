/**
 * A real SMTP server (the `smtp-server` package) that accepts every message and records it:
 * envelope recipients, Message-ID, headers, subject. Tests and the demo count deliveries here,
 * never in the code under test.
 */
import { simpleParser } from 'mailparser';
import { SMTPServer, type SMTPServerOptions } from 'smtp-server';

export interface DeliveredMessage {
  readonly from: string;
  readonly to: readonly string[];
  readonly messageId: string | undefined;
  readonly subject: string | undefined;
  readonly headers: ReadonlyMap<string, string>;
  readonly text: string | undefined;
  readonly receivedAt: number;
}

export interface SmtpSinkOptions {
  readonly port?: number;
  readonly host?: string;
  /** Reject (5xx) or delay deliveries, to exercise a provider's failures. */
  readonly behaviour?: (recipient: string) => { reject?: string; delayMs?: number } | undefined;
}

export class SmtpSink {
  readonly messages: DeliveredMessage[] = [];
  /** Connections that failed mid-session (e.g. reset by a killed client). */
  connectionErrors = 0;
  private server: SMTPServer | undefined;
  port = 0;

  constructor(private readonly options: SmtpSinkOptions = {}) {}

  async start(): Promise<this> {
    const serverOptions: SMTPServerOptions = {
      authOptional: true,
      disabledCommands: ['STARTTLS', 'AUTH'],
      logger: false,
      onRcptTo: (address, _session, callback) => {
        const rule = this.options.behaviour?.(address.address);
        if (rule?.reject) {
          const error = Object.assign(new Error(rule.reject), { responseCode: 550 });
          callback(error);
          return;
        }
        callback();
      },
      onData: (stream, session, callback) => {
        simpleParser(stream)
          .then(async (parsed) => {
            const to = session.envelope.rcptTo.map((r) => r.address);
            const delay = Math.max(0, ...to.map((r) => this.options.behaviour?.(r)?.delayMs ?? 0));
            if (delay > 0) await new Promise((resolve) => setTimeout(resolve, delay));
            const headers = new Map<string, string>();
            for (const line of parsed.headerLines)
              headers.set(line.key, line.line.slice(line.line.indexOf(':') + 1).trim());
            this.messages.push({
              from: session.envelope.mailFrom ? session.envelope.mailFrom.address : '',
              to,
              messageId: parsed.messageId,
              subject: parsed.subject,
              headers,
              text: parsed.text,
              receivedAt: Date.now(),
            });
            callback();
          })
          .catch((error: Error) => callback(error));
      },
    };
    this.server = new SMTPServer(serverOptions);
    const server = this.server;
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

  async stop(): Promise<void> {
    const server = this.server;
    if (!server) return;
    await new Promise<void>((resolve) => server.close(() => resolve()));
    this.server = undefined;
  }
}
