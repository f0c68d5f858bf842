/**
 * The delivery lookup port (ADR 009): asks a provider whether it holds a message, by the
 * deterministic Message-ID `<sendId@domain>` every adapter sets. The reconciler uses it to settle a
 * send whose worker died while sending, which otherwise becomes `ambiguous`.
 *
 * Two answers are easy to confuse and must not be: `not_found` is a positive statement by the
 * provider that it has no such message (and licenses a second email once the settle time has
 * passed); `unavailable` is anything else — a timeout, a refused connection, 401, 5xx, a body that
 * is too large or not the documented JSON, a search whose answer was cut short. A lookup that cannot
 * tell says `unavailable`, never `not_found`.
 */
import type { MailProvider } from './port.js';

export interface LookupQuery {
  /** The Message-ID the send was made with, with or without its angle brackets. */
  readonly messageId: string;
  /** The envelope recipient: a match addressed to someone else is not taken as ours. */
  readonly recipient?: string;
  /**
   * No copy can be older than this (the send's first claim): lets providers whose search needs a
   * time range (Mailgun) bound it. Adapters widen it by a clock-skew margin.
   */
  readonly sentAfter?: Date;
}

export type LookupResult =
  | { readonly kind: 'found'; readonly at?: Date; readonly providerId?: string }
  | { readonly kind: 'not_found' }
  /** `reason` is a code (`mailpit http 503`), never a provider's text: it may quote addresses. */
  | { readonly kind: 'unavailable'; readonly reason: string };

export interface DeliveryLookup {
  readonly name: string;
  /**
   * How long after the provider accepted a message its search may still not show it (indexing,
   * replication). Only past `handover + settleMs` does `not_found` mean "never accepted".
   */
  readonly settleMs: number;
  /** Never throws: every failure is `unavailable`. Bounded by the adapter's own timeout. */
  find(query: LookupQuery, signal?: AbortSignal): Promise<LookupResult>;
  close?(): Promise<void>;
}

/** Strips the angle brackets of a Message-ID: providers store and search it without them. */
export function bareMessageId(messageId: string): string {
  const trimmed = messageId.trim();
  return trimmed.startsWith('<') && trimmed.endsWith('>') ? trimmed.slice(1, -1) : trimmed;
}

/**
 * A Message-ID a provider's search syntax can carry literally: printable ASCII without spaces,
 * quotes, brackets or the separators Mailpit's query parser treats as spaces. Ours are
 * `<uuid@domain>`; anything else is refused rather than searched approximately.
 */
export function searchableMessageId(messageId: string): string | undefined {
  const bare = bareMessageId(messageId);
  return /^[A-Za-z0-9!#$%&'*+\-/=?^_`{|}~.@]{3,255}$/.test(bare) && bare.includes('@') ? bare : undefined;
}

/**
 * What the reconciler does with a `sending` send whose lease expired, given what the lookup said:
 * - `sent`: the provider holds the message; record it sent.
 * - `retry`: the provider says it has no copy, and asked late enough that a copy accepted by the
 *   attempt would show by now: safe to send again.
 * - `wait`: not decidable yet (not found too early, or the lookup failed); ask again at `until`.
 *   The caller keeps the send out of the sweep until then (e.g. pushes its lease to `until`).
 * - `ambiguous`: the lookup kept failing past `giveUpAfterMs`, or the inputs are unusable: an
 *   operator decides, as without a lookup.
 */
export type LookupDecision =
  | { readonly verdict: 'sent'; readonly providerId?: string }
  | { readonly verdict: 'retry' }
  | { readonly verdict: 'wait'; readonly until: Date; readonly reason: string }
  | { readonly verdict: 'ambiguous'; readonly reason: string };

export interface LookupTiming {
  /** When the attempt that may have handed the message over started (the send went to `sending`). */
  readonly attemptStartedAt: Date;
  /**
   * The longest the attempt could take to hand the message over: the provider call's timeout, and
   * for SMTP the wait for the reply to the final dot (a server may store the message until then).
   */
  readonly handoverWithinMs: number;
  /** The lookup's `settleMs`. */
  readonly settleMs: number;
  readonly now: Date;
  /** How soon to ask again after an `unavailable`. */
  readonly recheckMs: number;
  /** After this long since the attempt started, an `unavailable` lookup gives up: `ambiguous`. */
  readonly giveUpAfterMs?: number;
}

export function decideAfterLookup(result: LookupResult, timing: LookupTiming): LookupDecision {
  if (result.kind === 'found') {
    return result.providerId === undefined ? { verdict: 'sent' } : { verdict: 'sent', providerId: result.providerId };
  }
  const started = timing.attemptStartedAt.getTime();
  const now = timing.now.getTime();
  const durations = [timing.handoverWithinMs, timing.settleMs, timing.recheckMs, timing.giveUpAfterMs ?? 0];
  if (!Number.isFinite(started) || !Number.isFinite(now) || durations.some((d) => !Number.isFinite(d) || d < 0)) {
    // Without a trustworthy clock a not_found proves nothing; never guess towards a second email.
    return { verdict: 'ambiguous', reason: 'lookup timing unusable' };
  }
  const elapsed = now - started;
  if (result.kind === 'not_found') {
    const settledAt = started + timing.handoverWithinMs + timing.settleMs;
    if (now >= settledAt) return { verdict: 'retry' };
    return { verdict: 'wait', until: new Date(settledAt), reason: 'not found yet; the provider may still show it' };
  }
  if (timing.giveUpAfterMs !== undefined && elapsed >= timing.giveUpAfterMs) {
    return { verdict: 'ambiguous', reason: `lookup unavailable: ${result.reason}` };
  }
  return {
    verdict: 'wait',
    until: new Date(now + Math.max(1, timing.recheckMs)),
    reason: `lookup unavailable: ${result.reason}`,
  };
}

/**
 * The older optional `MailProvider.lookup` (by idempotency key) seen through this port, so the
 * reconciler needs one code path: its `unknown` is `unavailable`, never `not_found`.
 */
export function lookupOfProvider(
  provider: MailProvider,
  keyOf: (messageId: string) => string,
  settleMs = 0,
): DeliveryLookup | undefined {
  const legacy = provider.lookup?.bind(provider);
  if (!legacy) return undefined;
  return {
    name: provider.name,
    settleMs,
    async find(query) {
      try {
        const verdict = await legacy(keyOf(bareMessageId(query.messageId)));
        if (verdict === 'sent') return { kind: 'found' };
        if (verdict === 'not_sent') return { kind: 'not_found' };
        return { kind: 'unavailable', reason: `${provider.name} lookup unknown` };
      } catch {
        return { kind: 'unavailable', reason: `${provider.name} lookup failed` };
      }
    },
  };
}
