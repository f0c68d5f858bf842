/**
 * Mailgun's webhooks taken in: the body through the domain's check (domain/feedback/mailgun.ts:
 * size, nesting, signature, event), then each signature token taken once.
 *
 * Mailgun signs the timestamp and a random token, not the event, so one captured signed pair could
 * carry any event while its timestamp is in the window. Mailgun's own advice is to cache the token
 * and honour no second request with it; this keeps every token it took until its timestamp leaves
 * the window (after which the timestamp check refuses it anyway). The set is in memory, per replica:
 * with N replicas a captured pair could be used at most once on each of the others, within the
 * window, and only to name sends whose MAC-signed Message-ID its holder also has (ADR 012). The
 * event id dedupes Mailgun's own retries in feedback_events, on every replica.
 *
 * A token is released when its request fails on our side (the database said later), so Mailgun's
 * retry of the same delivery is taken. The set is bounded: only verified signatures enter it, so
 * only Mailgun's own traffic fills it; at the bound, after dropping expired tokens, a new delivery
 * is answered "later" (503, which Mailgun retries) rather than taken without its replay check.
 */
import type { KeyObject } from 'node:crypto';
import {
  DEFAULT_MAILGUN_LIMITS,
  DEFAULT_MAILGUN_TOLERANCE_MS,
  receiveMailgunWebhook,
  type MailgunLimits,
  type MailgunSigned,
  type MailgunWebhookResult,
} from '../../domain/feedback/mailgun.js';

export interface MailgunFeedbackIntakeOptions {
  /** MAILGUN_WEBHOOK_SIGNING_KEY[_FILE]. */
  readonly signingKey: KeyObject;
  readonly limits?: MailgunLimits;
  readonly toleranceMs?: number;
  /** Tokens kept at most (default 100,000: about 15 MB, some 80 deliveries a second for 20 minutes). */
  readonly maxTokens?: number;
}

export type TokenClaim = 'taken' | 'replayed' | 'full';

export class MailgunFeedbackIntake {
  /** Token → when it may be forgotten (epoch ms); insertion order is about arrival order. */
  private readonly tokens = new Map<string, number>();
  private readonly toleranceMs: number;
  private readonly maxTokens: number;

  constructor(private readonly options: MailgunFeedbackIntakeOptions) {
    this.toleranceMs = options.toleranceMs ?? DEFAULT_MAILGUN_TOLERANCE_MS;
    this.maxTokens = options.maxTokens ?? 100_000;
  }

  receive(body: string | Uint8Array, now: Date): MailgunWebhookResult {
    return receiveMailgunWebhook(body, {
      signingKey: this.options.signingKey,
      now,
      toleranceMs: this.toleranceMs,
      limits: this.options.limits ?? DEFAULT_MAILGUN_LIMITS,
    });
  }

  /** Takes a verified delivery's token: `replayed` if it was taken within its window, `full` at the bound. */
  claim(signed: MailgunSigned, now: Date): TokenClaim {
    const at = now.getTime();
    const kept = this.tokens.get(signed.token);
    if (kept !== undefined && kept > at) return 'replayed';
    if (kept !== undefined) this.tokens.delete(signed.token);
    this.forgetOldest(at);
    if (this.tokens.size >= this.maxTokens) this.forgetExpired(at);
    if (this.tokens.size >= this.maxTokens) return 'full';
    this.tokens.set(signed.token, signed.signedAt + this.toleranceMs);
    return 'taken';
  }

  /** Forgets a token whose delivery was not taken after all (a failure on our side): Mailgun's retry may bring it again. */
  release(signed: MailgunSigned): void {
    this.tokens.delete(signed.token);
  }

  /** Tokens held now (for tests and a gauge, if one is wanted). */
  get size(): number {
    return this.tokens.size;
  }

  /** The oldest entries first, while they are expired: cheap, and keeps the set near what is live. */
  private forgetOldest(at: number): void {
    for (const [token, until] of this.tokens) {
      if (until > at) return;
      this.tokens.delete(token);
    }
  }

  /** All expired entries (timestamps arrive out of order): only at the bound. */
  private forgetExpired(at: number): void {
    for (const [token, until] of this.tokens) if (until <= at) this.tokens.delete(token);
  }
}
