import { closeSync, openSync, writeSync } from 'node:fs';
import type { MailMessage, MailProvider, SendResult } from './port.js';

/**
 * Accepts everything instantly and remembers it: for benchmarks, where the provider is not measured.
 * With a delivery log, each accepted message also appends `<idempotencyKey>\t<epoch ms>\n` to that
 * file (O_APPEND, one unbuffered write: the line survives a SIGKILL right after the call), so a
 * benchmark can count deliveries, and duplicates, across process restarts. With a delay, the answer
 * comes `delayMs` after the message was accepted, as a real provider's does: a process killed in
 * between has delivered a message it never heard back about.
 */
/** How many accepted keys the null provider remembers for its lookup: the newest, so memory stays flat. */
export const NULL_PROVIDER_MEMORY = 100_000;

export class NullProvider implements MailProvider {
  readonly name = 'null';
  /** The newest accepted keys, oldest first (a Set iterates in insertion order). */
  private readonly accepted = new Set<string>();
  private readonly log: number | undefined;

  constructor(
    deliveryLog?: string,
    private readonly delayMs = 0,
  ) {
    this.log = deliveryLog ? openSync(deliveryLog, 'a') : undefined;
  }

  async send(_message: MailMessage, idempotencyKey: string): Promise<SendResult> {
    this.accepted.add(idempotencyKey);
    if (this.accepted.size > NULL_PROVIDER_MEMORY) {
      for (const oldest of this.accepted) {
        this.accepted.delete(oldest);
        break;
      }
    }
    if (this.log !== undefined) writeSync(this.log, `${idempotencyKey}\t${Date.now()}\n`);
    if (this.delayMs > 0) await new Promise((resolve) => setTimeout(resolve, this.delayMs));
    return { kind: 'sent', providerMessageId: `null-${idempotencyKey}` };
  }

  /**
   * Its memory is this process's, and only its newest NULL_PROVIDER_MEMORY keys: a key it does not
   * hold may have been sent by a previous process, or long ago, so the answer is `unknown`, never `no`.
   */
  async lookup(idempotencyKey: string): Promise<'sent' | 'unknown'> {
    return this.accepted.has(idempotencyKey) ? 'sent' : 'unknown';
  }

  async close(): Promise<void> {
    if (this.log !== undefined) closeSync(this.log);
  }
}
