/** The mail provider port. The sender is the only component that talks to one. */
import type { ProviderVerdict } from '../../domain/send.js';

export interface MailMessage {
  readonly from: string;
  readonly to: string;
  readonly subject: string;
  readonly text: string;
  /** Extra headers (List-Unsubscribe, ...). */
  readonly headers: Readonly<Record<string, string>>;
  /**
   * The Message-ID, `<send identifier@MESSAGE_ID_DOMAIN>` (domain/identifiers.ts): deterministic per
   * send and key, so receivers, provider logs and the delivery lookup recognize a repeat.
   */
  readonly messageId: string;
  /** The RFC 3461 ENVID (the send identifier), for a provider that can set one; DSNs echo it back. */
  readonly envelopeId?: string;
}

/**
 * What a provider call established:
 * - `sent`: accepted by the provider;
 * - `rejected`: permanently refused (invalid mailbox, policy) — never retried;
 * - `not_sent`: certainly not accepted (nothing of the message left us, or the provider answered
 *   with a temporary refusal) — safe to retry;
 * - `unknown`: may or may not have been accepted (the message may have been handed over, and no
 *   verdict came back in time) — the send becomes `ambiguous`, never retried automatically.
 *   `late`, when present, settles with the verdict if the provider answers after all: the caller
 *   records it then (a late 250 makes the send `sent`, never a retry).
 *
 * `reason` is a code (`smtp 550 5.1.1 permanent at RCPT`), never a provider's reply text: replies
 * often quote the recipient's address, and reasons travel on topics labelled free of addresses.
 */
export type SendResult =
  | Exclude<ProviderVerdict, { readonly kind: 'unknown' }>
  | {
      readonly kind: 'unknown';
      readonly reason: string;
      readonly late?: Promise<SendResult>;
      /** How long `late` may still take to settle (the provider's own bound on its wait). */
      readonly lateWithinMs?: number;
    };

export interface MailProvider {
  readonly name: string;
  /** `idempotencyKey` is the sendId; adapters pass it on however the provider allows (with `message.messageId`). */
  send(message: MailMessage, idempotencyKey: string): Promise<SendResult>;
  /** Providers that can look a send up by its idempotency key resolve `sending` leases exactly. */
  lookup?(idempotencyKey: string): Promise<'sent' | 'not_sent' | 'unknown'>;
  close(): Promise<void>;
}

/**
 * Until the calls in flight have settled, or `withinMs` has passed: how a closing provider waits
 * for its calls (each bounded by its own timeout) before it closes its connections.
 */
export async function callsSettled(calls: Iterable<Promise<unknown>>, withinMs: number): Promise<void> {
  let timer: NodeJS.Timeout | undefined;
  await Promise.race([
    Promise.allSettled([...calls]),
    new Promise((resolve) => {
      timer = setTimeout(resolve, withinMs);
    }),
  ]);
  clearTimeout(timer);
}
