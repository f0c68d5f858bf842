/**
 * Sweeps expired leases, so no send stays unfinished when its worker died:
 * - `claimed` past its lease: the provider was never called, so it is safe to re-drive under a new
 *   token (this is also how held sends go out after a resume, and operator "retry" resolutions);
 * - `sending` past its lease: the provider may or may not have the message. With a provider that
 *   can look the idempotency key up, the lookup decides; otherwise the send becomes `ambiguous`
 *   and an operator resolves it. It is never re-sent automatically (domain/send.ts decides which).
 * Several instances may sweep at once: claims are taken with SKIP LOCKED, and every transition is
 * conditional on the token and status, so each send is finished by exactly one of them.
 */
import { Counter, metric, PeriodicTask, type Logger, type Registry } from '@outreach/shared';
import type { MailProvider } from '../adapters/providers/port.js';
import type { SendsRepository } from '../adapters/sends-repository.js';
import { decide, type LeaseLookup } from '../domain/send.js';
import { alwaysRun, type SendPipeline } from './send-pipeline.js';

export class Reconciler {
  /** Its periodic sweep (whose liveness the plugin watches). */
  readonly loop: PeriodicTask;
  private stopped = false;
  private readonly ambiguous: Counter;
  private readonly takeovers: Counter;

  constructor(
    private readonly repository: SendsRepository,
    private readonly pipeline: SendPipeline,
    private readonly provider: MailProvider,
    private readonly logger: Logger,
    registry: Registry,
    intervalMs: number,
    private readonly batchSize = 100,
  ) {
    this.loop = new PeriodicTask('reconciler sweep', () => this.sweep(), intervalMs, logger);
    this.ambiguous = metric(
      registry,
      'sender_lease_expired_ambiguous_total',
      () =>
        new Counter({
          name: 'sender_lease_expired_ambiguous_total',
          help: 'Sends whose lease expired while sending, recorded as ambiguous',
          registers: [registry],
        }),
    );
    this.takeovers = metric(
      registry,
      'sender_lease_takeovers_total',
      () =>
        new Counter({
          name: 'sender_lease_takeovers_total',
          help: 'Expired claims taken over under a new token',
          registers: [registry],
        }),
    );
  }

  start(): void {
    this.loop.start();
  }

  /** Run a sweep soon (after a resume or an operator's retry). */
  wake(): void {
    this.loop.wake();
  }

  async stop(): Promise<void> {
    this.stopped = true;
    await this.loop.stop();
  }

  /** One full sweep; returns how many sends it moved. */
  async sweep(): Promise<number> {
    let moved = 0;
    while (!this.stopped) {
      const claims = await this.repository.takeOverExpired(this.batchSize);
      this.takeovers.inc(claims.length);
      if (claims.length > 0) await this.pipeline.process(claims, alwaysRun);

      const expired = await this.repository.expiredSending(this.batchSize);
      for (const { row, state, ...claim } of expired) {
        const verdict = this.provider.lookup ? await this.provider.lookup(row.sendId) : 'unknown';
        const lookup: LeaseLookup =
          verdict === 'sent'
            ? { kind: 'sent', providerMessageId: row.providerMessageId ?? row.sendId }
            : { kind: verdict };
        const [event] = decide(state, { type: 'ExpireSendingLease', token: claim.token, lookup });
        switch (event?.type) {
          case 'RetryScheduled':
            await this.repository.retryLater(claim, 'ExpireSendingLease', event);
            break;
          case 'Sent':
            await this.repository.record({ claim, row, command: 'ExpireSendingLease', event });
            break;
          case 'Ambiguous':
            if (await this.repository.record({ claim, row, command: 'ExpireSendingLease', event })) {
              this.ambiguous.inc();
              this.logger.error(
                { sendId: row.sendId, campaignId: row.campaignId },
                'send is ambiguous: its worker died while sending',
              );
            }
            break;
          default: // a refusal: nothing to apply
        }
      }
      moved += claims.length + expired.length;
      if (claims.length < this.batchSize && expired.length < this.batchSize) break;
    }
    return moved;
  }
}
