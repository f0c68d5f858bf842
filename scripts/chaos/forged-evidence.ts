/**
 * The attacker beside the provider: while sends are in doubt, it posts delivery evidence for them
 * that no provider sent, hoping a send cut before the server got it is recorded `sent` (and never
 * mailed). It knows what an outsider can: every sendId (a UUIDv5 of public inputs, ADR 012), the
 * address, the key id and the Message-ID domain of any mail it received; and here, as the strongest
 * case, exactly which sends are in doubt right now (the suite reads them from the sent log). It does
 * not hold the identifier key, nor the SendGrid signing key.
 *
 *   sendgrid  events for those sends signed with its own P-256 key: the intake must refuse each (403)
 *   dsn       success DSNs through the hook with its real token (mail to the bounce mailbox is
 *             unauthenticated: anyone can write one), naming each send by an ENVID and a Message-ID
 *             whose MAC it made up, or by the bare sendId: each must come back `unverified`
 *
 * Anything else is a forgery trusted, a violation; and a forged report that settled a send nobody
 * delivered would also show as a `sent` row the SMTP sink never received (checks.ts, mismatched).
 */
import { generateKeyPairSync, randomBytes, type KeyObject } from 'node:crypto';
import type { DeliveredMessage } from '@outreach/testkit';
import { signSendGrid, successDsn, type EvidenceSource } from './evidence.js';

export interface ForgerOptions {
  readonly source: EvidenceSource;
  readonly url: (path: string) => string;
  /** The DSN hook's token: the hook forwards whatever mail reaches the bounce mailbox. */
  readonly dsnToken: string;
}

export interface InDoubt {
  readonly sendId: string;
  readonly email: string;
}

export interface ForgeryStats {
  /** Forged reports answered by the sender, and those it answered as it must (403; `unverified`). */
  readonly answered: number;
  readonly refused: number;
  /** Forged reports posted while the sender was down: no answer, nothing to judge. */
  readonly unanswered: number;
  /** Forged reports the sender trusted, in words: each is a violation. */
  readonly trusted: readonly string[];
}

export class Forger {
  private readonly attackerKey: KeyObject = generateKeyPairSync('ec', { namedCurve: 'prime256v1' }).privateKey;
  private readonly lastForged = new Map<string, number>();
  private stats = { answered: 0, refused: 0, unanswered: 0 };
  private readonly trusted: string[] = [];
  private forged = 0;

  constructor(private readonly options: ForgerOptions) {}

  /**
   * Forges evidence for each send in `inDoubt` not forged for in the last `everyMs`, with the key id
   * and domain of `seen` (any message of ours the attacker received). Resolves once answered.
   */
  async forge(inDoubt: readonly InDoubt[], seen: DeliveredMessage | undefined, everyMs = 3_000): Promise<void> {
    const ours = /^<[0-9a-f-]{36}\.([a-z0-9-]+)\.[0-9a-f]{32}@([^>]+)>$/.exec(seen?.messageId ?? '');
    if (!ours) return;
    const [, keyId, domain] = ours as unknown as [string, string, string];
    const now = Date.now();
    const targets = inDoubt.filter((s) => now - (this.lastForged.get(s.sendId) ?? 0) >= everyMs).slice(0, 50);
    for (const s of targets) this.lastForged.set(s.sendId, now);
    await Promise.all(targets.map((s) => this.forgeOne(s, keyId, domain)));
  }

  summary(): ForgeryStats {
    return { ...this.stats, trusted: [...this.trusted] };
  }

  private async forgeOne(send: InDoubt, keyId: string, domain: string): Promise<void> {
    const n = ++this.forged;
    const identifier = `${send.sendId}.${keyId}.${randomBytes(16).toString('hex')}`;
    const messageId = `<${identifier}@${domain}>`;
    const sendgrid = this.options.source === 'sendgrid';
    let body: string;
    let headers: Record<string, string>;
    if (sendgrid) {
      const timestamp = String(Math.floor(Date.now() / 1000));
      body = JSON.stringify([
        {
          email: send.email,
          timestamp: Number(timestamp),
          'smtp-id': messageId,
          event: n % 2 === 0 ? 'delivered' : 'processed',
          sg_event_id: randomBytes(16).toString('base64url'),
        },
      ]);
      headers = {
        'content-type': 'application/json',
        'x-twilio-email-event-webhook-timestamp': timestamp,
        'x-twilio-email-event-webhook-signature': signSendGrid(body, timestamp, this.attackerKey),
      };
    } else {
      // Every third one names the send by its bare sendId (the form before ADR 012), Message-ID foreign.
      const legacy = n % 3 === 0;
      const message: DeliveredMessage = {
        from: 'outreach@sender.test',
        to: [send.email],
        messageId: legacy ? `<${send.sendId}@elsewhere.test>` : messageId,
        subject: 'Hello',
        headers: new Map([
          ['from', 'outreach@sender.test'],
          ['to', send.email],
          ['message-id', legacy ? `<${send.sendId}@elsewhere.test>` : messageId],
        ]),
        text: undefined,
        receivedAt: Date.now(),
        secure: false,
        user: undefined,
        envelopeId: legacy ? send.sendId : identifier,
        notify: new Map([[send.email, ['SUCCESS']]]),
      };
      body = successDsn(
        message,
        [send.email],
        `<forged.${n}.${randomBytes(4).toString('hex')}@attacker.test>`,
        new Date(),
      );
      headers = { authorization: `Bearer ${this.options.dsnToken}`, 'content-type': 'message/rfc822' };
    }
    const path = sendgrid ? '/v1/feedback/sendgrid' : '/v1/feedback/dsn';
    let response: Response;
    let text: string;
    try {
      response = await fetch(this.options.url(path), {
        method: 'POST',
        headers,
        body,
        signal: AbortSignal.timeout(5_000),
      });
      text = await response.text();
    } catch {
      this.stats.unanswered++;
      return;
    }
    if (response.status >= 500 || response.status === 429) {
      this.stats.unanswered++;
      return;
    }
    this.stats.answered++;
    const asItMust = sendgrid ? response.status === 403 : response.ok && unverified(text) === 1;
    if (asItMust) this.stats.refused++;
    else this.trusted.push(`${path} for ${send.sendId}: ${response.status} ${text.slice(0, 160)}`);
  }
}

function unverified(text: string): number | undefined {
  try {
    const value = (JSON.parse(text) as { unverified?: unknown }).unverified;
    return typeof value === 'number' ? value : undefined;
  } catch {
    return undefined;
  }
}
