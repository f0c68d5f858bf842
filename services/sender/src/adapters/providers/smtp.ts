import nodemailer, { type Transporter } from 'nodemailer';
import type { MailMessage, MailProvider, SendResult } from './port.js';

export interface SmtpProviderOptions {
  readonly host: string;
  readonly port: number;
  readonly secure: boolean;
  readonly user?: string;
  readonly password?: string;
  /** Domain of the deterministic Message-ID `<sendId@domain>`. */
  readonly messageIdDomain: string;
  /** Upper bound of one delivery attempt; kept below the claim lease by config validation. */
  readonly timeoutMs: number;
  readonly maxConnections: number;
}

/** SMTP commands before DATA: a failure there means the message was certainly not accepted. */
const BEFORE_DATA = new Set([
  'CONN',
  'EHLO',
  'HELO',
  'STARTTLS',
  'AUTH PLAIN',
  'AUTH LOGIN',
  'AUTH XOAUTH2',
  'MAIL FROM',
  'RCPT TO',
  'API',
]);

/**
 * SMTP through nodemailer. SMTP has no idempotency keys, so the key becomes a deterministic
 * Message-ID: receivers and provider logs can recognize a repeat, and operators can search for it.
 */
export class SmtpProvider implements MailProvider {
  readonly name = 'smtp';
  private readonly transport: Transporter;

  constructor(private readonly options: SmtpProviderOptions) {
    this.transport = nodemailer.createTransport({
      host: options.host,
      port: options.port,
      secure: options.secure,
      ignoreTLS: !options.secure,
      pool: true,
      maxConnections: options.maxConnections,
      connectionTimeout: options.timeoutMs,
      greetingTimeout: options.timeoutMs,
      socketTimeout: options.timeoutMs,
      ...(options.user ? { auth: { user: options.user, pass: options.password ?? '' } } : {}),
    });
  }

  async send(message: MailMessage, idempotencyKey: string): Promise<SendResult> {
    const messageId = `<${idempotencyKey}@${this.options.messageIdDomain}>`;
    try {
      const info = await this.transport.sendMail({
        from: message.from,
        to: message.to,
        subject: message.subject,
        text: message.text,
        messageId,
        headers: { ...message.headers },
        disableFileAccess: true,
        disableUrlAccess: true,
      });
      if ((info.rejected ?? []).length > 0) return { kind: 'rejected', reason: `recipient rejected: ${info.response}` };
      return { kind: 'sent', providerMessageId: info.messageId || messageId };
    } catch (error) {
      return classify(error);
    }
  }

  async close(): Promise<void> {
    this.transport.close();
  }
}

export function classify(error: unknown): SendResult {
  const { responseCode, command, code, message } = (error ?? {}) as {
    responseCode?: number;
    command?: string;
    code?: string;
    message?: string;
  };
  const reason = `${code ?? 'error'}${command ? ` at ${command}` : ''}: ${message ?? String(error)}`.slice(0, 500);
  if (typeof responseCode === 'number') {
    // The server answered: its verdict is definitive either way.
    if (responseCode >= 500) return { kind: 'rejected', reason };
    return { kind: 'not_sent', reason };
  }
  if (code === 'EENVELOPE' || code === 'EMESSAGE') return { kind: 'rejected', reason };
  if (command && BEFORE_DATA.has(command)) return { kind: 'not_sent', reason };
  if (code === 'ECONNECTION' || code === 'ECONNREFUSED' || code === 'EDNS') return { kind: 'not_sent', reason };
  // Timeout or connection loss once the message may have been handed over.
  return { kind: 'unknown', reason };
}
