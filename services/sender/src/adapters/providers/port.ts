/** The mail provider port. The sender is the only component that talks to one. */
export interface MailMessage {
  readonly from: string;
  readonly to: string;
  readonly subject: string;
  readonly text: string;
  /** Extra headers (List-Unsubscribe, ...). */
  readonly headers: Readonly<Record<string, string>>;
}

/**
 * What a provider call established:
 * - `sent`: accepted by the provider;
 * - `rejected`: permanently refused (invalid mailbox, policy) — never retried;
 * - `not_sent`: certainly not accepted (connection refused, temporary 4xx) — safe to retry;
 * - `unknown`: may or may not have been accepted (timeout or connection loss after the message
 *   was handed over) — the send becomes `ambiguous`, never retried automatically.
 */
export type SendResult =
  | { readonly kind: 'sent'; readonly providerMessageId: string }
  | { readonly kind: 'rejected'; readonly reason: string }
  | { readonly kind: 'not_sent'; readonly reason: string }
  | { readonly kind: 'unknown'; readonly reason: string };

export interface MailProvider {
  readonly name: string;
  /** `idempotencyKey` is the sendId; adapters pass it on however the provider allows. */
  send(message: MailMessage, idempotencyKey: string): Promise<SendResult>;
  /** Providers that can look a send up by its idempotency key resolve `sending` leases exactly. */
  lookup?(idempotencyKey: string): Promise<'sent' | 'not_sent' | 'unknown'>;
  close(): Promise<void>;
}
