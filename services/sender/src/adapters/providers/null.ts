import type { MailMessage, MailProvider, SendResult } from './port.js';

/** Accepts everything instantly and remembers it: for benchmarks, where the provider is not measured. */
export class NullProvider implements MailProvider {
  readonly name = 'null';
  private readonly accepted = new Set<string>();
  readonly delivered: Array<{ to: string; idempotencyKey: string }> = [];

  async send(message: MailMessage, idempotencyKey: string): Promise<SendResult> {
    this.accepted.add(idempotencyKey);
    this.delivered.push({ to: message.to, idempotencyKey });
    return { kind: 'sent', providerMessageId: `null-${idempotencyKey}` };
  }

  /** Its memory is this process's: a key it never saw may have been sent by a previous process. */
  async lookup(idempotencyKey: string): Promise<'sent' | 'unknown'> {
    return this.accepted.has(idempotencyKey) ? 'sent' : 'unknown';
  }

  async close(): Promise<void> {}
}
