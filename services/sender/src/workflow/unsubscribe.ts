/**
 * One-click unsubscribe (RFC 8058): the token in the List-Unsubscribe URL names a send and carries an
 * HMAC only the platform can make: `v2.` tokens under the identifier key (domain/identifiers.ts, ADR
 * 012), and the `v1.` tokens of mail sent before it, under a key derived from the emailHash key
 * (domain/unsubscribe-token.ts), still honoured while that key is the same. The send's canonical address goes on
 * the suppression list (reason `unsubscribe`, source `unsubscribe`), with an AddressSuppressed event in
 * the same transaction; a second POST finds the address suppressed and changes nothing.
 *
 * A token that is forged, made with a retired key (or a previous one past its window), or names no
 * send gets one answer, `not_found`,
 * whatever the cause: the answer says nothing about whether a send exists. Only a token that is not
 * even shaped like one is `malformed`.
 */
import type { SendQueries } from '../adapters/send-queries.js';
import type { SuppressionsRepository } from '../adapters/suppressions-repository.js';
import type { SendMatch } from '../domain/suppression.js';
import type { SendIdentifiers } from '../domain/identifiers.js';
import { checkUnsubscribeToken, type UnsubscribeKey } from '../domain/unsubscribe-token.js';

export type UnsubscribeLookup =
  | { readonly kind: 'found'; readonly send: SendMatch }
  | { readonly kind: 'malformed' }
  | { readonly kind: 'not_found' };

export type UnsubscribeVerdict =
  | { readonly kind: 'genuine'; readonly sendId: string }
  | { readonly kind: 'malformed' }
  | { readonly kind: 'not_found' };

export type UnsubscribeResult =
  | { readonly kind: 'unsubscribed'; readonly changed: boolean }
  | { readonly kind: 'malformed' }
  | { readonly kind: 'not_found' };

export class Unsubscribes {
  constructor(
    private readonly keys: { readonly identifiers: SendIdentifiers; readonly legacy: UnsubscribeKey },
    private readonly sends: Pick<SendQueries, 'named'>,
    private readonly suppressions: Pick<SuppressionsRepository, 'suppress'>,
    private readonly clock: () => number = Date.now,
  ) {}

  /**
   * The send a token names when its HMAC is ours, with no IO: the routes limit genuine links and
   * everything else in buckets of their own. `lookup` and `unsubscribe` check again.
   */
  verify(token: string): UnsubscribeVerdict {
    const check = token.startsWith('v1.')
      ? checkUnsubscribeToken(this.keys.legacy, token)
      : this.keys.identifiers.checkUnsubscribeToken(token, this.clock());
    if (check.kind === 'invalid') return check.reason === 'malformed' ? { kind: 'malformed' } : { kind: 'not_found' };
    return { kind: 'genuine', sendId: check.sendId };
  }

  /** The send a token names; for the confirmation page, which changes nothing. */
  async lookup(token: string): Promise<UnsubscribeLookup> {
    const check = this.verify(token);
    if (check.kind !== 'genuine') return check;
    const send = (await this.sends.named([check.sendId])).get(check.sendId);
    return send ? { kind: 'found', send } : { kind: 'not_found' };
  }

  async unsubscribe(token: string, correlationId: string): Promise<UnsubscribeResult> {
    const found = await this.lookup(token);
    if (found.kind !== 'found') return found;
    const { changed } = await this.suppressions.suppress({
      emailNorm: found.send.emailNorm,
      reason: 'unsubscribe',
      source: 'unsubscribe',
      note: null,
      sendId: found.send.sendId,
      campaignId: found.send.campaignId,
      correlationId,
      replace: false,
    });
    return { kind: 'unsubscribed', changed };
  }
}
