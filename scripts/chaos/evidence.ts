/**
 * A provider that reports every message it takes (ADR 009, "Delivery evidence"), standing beside the
 * SMTP sink: for each message the sink stores it posts, a few milliseconds later, to the running
 * sender's intake, retrying while the sender is down (the scenarios SIGKILL it), as the providers do:
 *
 *   sendgrid  a SendGrid Signed Event Webhook batch (ECDSA P-256 over timestamp + body, the run's
 *             own key): a `processed` event for each message, and a `delivered` one for every other
 *             message too, with `smtp-id` = its Message-ID, `email` = its recipient and a unique
 *             `sg_event_id`, to POST /v1/feedback/sendgrid
 *   dsn       an RFC 3464 success DSN for each message whose RCPT TO asked NOTIFY=SUCCESS (the sink
 *             offers DSN): multipart/report with `Original-Envelope-Id` = its ENVID, one group per
 *             such recipient (`Final-Recipient: rfc822; <addr>`, `Action: delivered`, `Status: 2.0.0`)
 *             and the message's own headers returned (text/rfc822-headers, its Message-ID among
 *             them), to POST /v1/feedback/dsn with a token of scope `dsn`, as a relay's bounce
 *             mailbox hook would
 *
 * Written from the providers' documentation, not from the sender's parsers. A refusal (a 4xx other
 * than 429) is kept for the verdict and not retried: the intake turned down evidence a real provider
 * would send. Connection errors, 429 and 5xx are retried until the run stops it.
 */
import { createHash, generateKeyPairSync, randomBytes, sign, type KeyObject } from 'node:crypto';
import type { DeliveredMessage } from '@outreach/testkit';

export type EvidenceSource = 'sendgrid' | 'dsn';

export interface EvidenceProviderOptions {
  readonly source: EvidenceSource;
  /** The sender's URL for a path: asked at each attempt (it is the same across restarts). */
  readonly url: (path: string) => string;
  /** The bearer token of scope `dsn` (the DSN hook's). */
  readonly dsnToken: string;
  /** How long after the sink stored a message its report goes out. */
  readonly delayMs?: number;
  /** How soon a report that could not be delivered is posted again. */
  readonly retryMs?: number;
  /** Posts in flight at once. */
  readonly concurrency?: number;
  /** Events in one SendGrid batch, at most. */
  readonly batchSize?: number;
}

/** One POST, as it goes out each time it is tried (a SendGrid body is signed again at each attempt). */
interface Report {
  readonly path: string;
  readonly body: string;
  readonly headers: () => Record<string, string>;
  /** Messages it reports. */
  readonly messages: number;
}

export interface EvidenceStats {
  /** Messages the sink stored that the provider reported. */
  readonly reported: number;
  /** Messages not reported: a DSN scenario's messages whose RCPT asked no NOTIFY=SUCCESS. */
  readonly unreported: number;
  /** POSTs made (first attempts and retries), and those the sender took (2xx). */
  readonly posts: number;
  readonly accepted: number;
  /** Attempts that failed and were retried: the sender down (connection refused, reset), 429 or 5xx. */
  readonly retried: number;
  /** Reports the sender refused (4xx other than 429): the status and the start of its answer, each. */
  readonly refused: readonly string[];
  /** Reports still waiting to be taken. */
  readonly pending: number;
}

export class EvidenceProvider {
  /** SENDGRID_WEBHOOK_PUBLIC_KEY for the sender: base64 DER, as SendGrid's settings show it. */
  readonly sendGridPublicKey: string;
  private readonly privateKey: KeyObject;
  private readonly queue: Report[] = [];
  private readonly timers = new Set<NodeJS.Timeout>();
  private readonly aborts = new Set<AbortController>();
  private batch: Array<{ readonly message: DeliveredMessage; readonly n: number }> = [];
  private inFlight = 0;
  private waiting = 0;
  private stopped = false;
  private counted = 0;
  private readonly tag = randomBytes(4).toString('hex');
  private stats = { reported: 0, unreported: 0, posts: 0, accepted: 0, retried: 0 };
  private readonly refusals: string[] = [];

  constructor(private readonly options: EvidenceProviderOptions) {
    const { publicKey, privateKey } = generateKeyPairSync('ec', { namedCurve: 'prime256v1' });
    this.privateKey = privateKey;
    this.sendGridPublicKey = publicKey.export({ format: 'der', type: 'spki' }).toString('base64');
  }

  /** The sender's settings this provider needs, besides PROVIDER_LOOKUP. */
  senderEnv(): Record<string, string> {
    return this.options.source === 'sendgrid'
      ? { SENDGRID_WEBHOOK_PUBLIC_KEY: this.sendGridPublicKey }
      : { SMTP_DSN_SUCCESS: 'true' };
  }

  /** The sink stored `message` (SmtpSinkOptions.onMessage): it is reported a few ms later. */
  delivered(message: DeliveredMessage): void {
    if (this.stopped) return;
    const n = ++this.counted;
    if (this.options.source === 'dsn') {
      const asked = message.to.filter((to) => message.notify.get(to)?.includes('SUCCESS'));
      if (asked.length === 0) {
        this.stats.unreported++;
        return;
      }
      this.stats.reported++;
      const body = successDsn(message, asked, `<${this.tag}.${n}.dsn@mx.sink.test>`, new Date());
      this.later(() =>
        this.enqueue({
          path: '/v1/feedback/dsn',
          body,
          headers: () => ({ authorization: `Bearer ${this.options.dsnToken}`, 'content-type': 'message/rfc822' }),
          messages: 1,
        }),
      );
      return;
    }
    this.stats.reported++;
    this.batch.push({ message, n });
    // The first message of a batch starts its timer: what arrives meanwhile goes in the same batch.
    if (this.batch.length === 1) this.later(() => this.flushBatch());
    else if (this.batch.length >= (this.options.batchSize ?? 100)) this.flushBatch();
  }

  /** Resolves once every report was taken or refused, or after `timeoutMs` (false). */
  async drained(timeoutMs: number): Promise<boolean> {
    const deadline = Date.now() + timeoutMs;
    while (this.pending() > 0) {
      if (Date.now() > deadline) return false;
      await new Promise((resolve) => setTimeout(resolve, 50));
    }
    return true;
  }

  summary(): EvidenceStats {
    return { ...this.stats, refused: [...this.refusals], pending: this.pending() };
  }

  stop(): void {
    this.stopped = true;
    for (const timer of this.timers) clearTimeout(timer);
    this.timers.clear();
    for (const abort of this.aborts) abort.abort();
  }

  private pending(): number {
    return this.queue.length + this.inFlight + this.waiting + (this.batch.length > 0 ? 1 : 0);
  }

  private later(action: () => void, ms = this.options.delayMs ?? 5): void {
    this.waiting++;
    const timer = setTimeout(() => {
      this.timers.delete(timer);
      this.waiting--;
      action();
    }, ms);
    this.timers.add(timer);
  }

  private flushBatch(): void {
    const messages = this.batch.splice(0, this.batch.length);
    if (messages.length === 0) return;
    const now = Math.floor(Date.now() / 1000);
    const events = messages.flatMap(({ message, n }) => {
      const base = {
        email: message.to[0] ?? '',
        timestamp: now,
        'smtp-id': message.messageId,
        sg_message_id: `${this.tag}${String(n).padStart(8, '0')}.filter0001.1.0`,
      };
      const processed = { ...base, event: 'processed', sg_event_id: randomBytes(16).toString('base64url') };
      const delivered = {
        ...base,
        event: 'delivered',
        response: '250 OK',
        sg_event_id: randomBytes(16).toString('base64url'),
      };
      // Every message is processed; every other one is reported delivered as well (in the same batch).
      return n % 2 === 1 ? [processed] : [processed, delivered];
    });
    const body = JSON.stringify(events);
    this.enqueue({
      path: '/v1/feedback/sendgrid',
      body,
      headers: () => {
        const timestamp = String(Math.floor(Date.now() / 1000));
        return {
          'content-type': 'application/json',
          'x-twilio-email-event-webhook-timestamp': timestamp,
          'x-twilio-email-event-webhook-signature': signSendGrid(body, timestamp, this.privateKey),
        };
      },
      messages: messages.length,
    });
  }

  private enqueue(report: Report): void {
    if (this.stopped) return;
    this.queue.push(report);
    this.pump();
  }

  private pump(): void {
    while (!this.stopped && this.inFlight < (this.options.concurrency ?? 4) && this.queue.length > 0) {
      const report = this.queue.shift() as Report;
      this.inFlight++;
      void this.post(report).finally(() => {
        this.inFlight--;
        this.pump();
      });
    }
  }

  private async post(report: Report): Promise<void> {
    const abort = new AbortController();
    this.aborts.add(abort);
    this.stats.posts++;
    let outcome: 'taken' | 'retry' = 'retry';
    try {
      const response = await fetch(this.options.url(report.path), {
        method: 'POST',
        headers: report.headers(),
        body: report.body,
        signal: AbortSignal.any([abort.signal, AbortSignal.timeout(5_000)]),
      });
      const text = await response.text();
      if (response.ok) {
        this.stats.accepted++;
        outcome = 'taken';
      } else if (response.status >= 400 && response.status < 500 && response.status !== 429) {
        this.refusals.push(`${response.status} ${text.slice(0, 200)}`);
        outcome = 'taken';
      }
    } catch {
      // The sender is down or was killed mid-request: the report goes again.
    } finally {
      this.aborts.delete(abort);
    }
    if (outcome === 'retry' && !this.stopped) {
      this.stats.retried++;
      this.later(() => this.enqueue(report), this.options.retryMs ?? 200);
    }
  }
}

/** The `X-Twilio-Email-Event-Webhook-Signature`: base64 DER ECDSA with SHA-256 over timestamp + body. */
export function signSendGrid(body: string, timestamp: string, privateKey: KeyObject): string {
  return sign('sha256', Buffer.from(timestamp + body, 'utf8'), { key: privateKey, dsaEncoding: 'der' }).toString(
    'base64',
  );
}

/**
 * A relay's success DSN (RFC 3464, RFC 3461 §6) for `message`, delivered to `recipients`: a
 * multipart/report whose delivery-status part carries the message's ENVID and one `delivered`
 * group per recipient, and whose last part returns the message's headers (RET=HDRS).
 */
export function successDsn(
  message: DeliveredMessage,
  recipients: readonly string[],
  reportMessageId: string,
  at: Date,
): string {
  const eol = '\r\n';
  const date = at.toUTCString().replace('GMT', '+0000');
  const boundary = `dsn-${createHash('sha256').update(reportMessageId).digest('hex').slice(0, 16)}`;
  const perMessage = [
    ...(message.envelopeId === undefined ? [] : [`Original-Envelope-Id: ${message.envelopeId}`]),
    'Reporting-MTA: dns; mx.sink.test',
    `Arrival-Date: ${date}`,
  ].join(eol);
  const perRecipient = recipients.map((to) =>
    [
      `Final-Recipient: rfc822; ${to}`,
      'Action: delivered',
      'Status: 2.0.0',
      'Remote-MTA: dns; mailbox.sink.test',
      `Last-Attempt-Date: ${date}`,
    ].join(eol),
  );
  // The header map holds each field once, by its lower-cased name, unfolded: as a relay returns them.
  const returned = [...message.headers].map(([name, value]) => `${name}: ${value.replace(/\r?\n[ \t]*/g, ' ')}`);
  return [
    'From: Mail Delivery System <MAILER-DAEMON@mx.sink.test>',
    `To: ${message.from || 'postmaster@sink.test'}`,
    'Subject: Successful Mail Delivery Report',
    `Date: ${date}`,
    `Message-ID: ${reportMessageId}`,
    'MIME-Version: 1.0',
    `Content-Type: multipart/report; report-type=delivery-status; boundary="${boundary}"`,
    '',
    'This is a MIME-encapsulated message.',
    '',
    `--${boundary}`,
    'Content-Type: text/plain; charset=us-ascii',
    '',
    'Your message was successfully delivered to the destination(s) listed below.',
    '',
    `--${boundary}`,
    'Content-Type: message/delivery-status',
    '',
    [perMessage, ...perRecipient].join(eol + eol),
    '',
    `--${boundary}`,
    'Content-Type: text/rfc822-headers',
    '',
    ...returned,
    '',
    `--${boundary}--`,
    '',
  ].join(eol);
}
