import { Counter, metric, PeriodicTask, type Logger, type Registry } from '@outreach/shared';
import type { ConversationsRepository } from '../adapters/conversations-repository.js';

/**
 * Flags stalled conversations on the database's clock, every interval, on every instance; the
 * repository's SKIP LOCKED + guard makes each flag happen once. One log line per flag, for alerts.
 */
export class Sweeper {
  /** Its periodic sweep (whose liveness the plugin watches). */
  readonly loop: PeriodicTask;
  private readonly sweeps: Counter;
  private readonly flags: Counter;

  constructor(
    private readonly repository: ConversationsRepository,
    private readonly logger: Logger,
    registry: Registry,
    intervalMs: number,
    private readonly batchSize = 500,
  ) {
    this.loop = new PeriodicTask('stall sweep', () => this.sweep(), intervalMs, logger);
    this.sweeps = metric(
      registry,
      'liveness_sweeps_total',
      () => new Counter({ name: 'liveness_sweeps_total', help: 'Completed stall sweeps', registers: [registry] }),
    );
    this.flags = metric(
      registry,
      'liveness_flags_total',
      () =>
        new Counter({
          name: 'liveness_flags_total',
          help: 'Conversations flagged as stalled, by reason',
          labelNames: ['reason'],
          registers: [registry],
        }),
    );
  }

  start(): void {
    this.loop.start();
  }

  stop(): Promise<void> {
    return this.loop.stop();
  }

  async sweep(): Promise<number> {
    let flagged = 0;
    for (;;) {
      const stalled = await this.repository.sweep(this.batchSize);
      for (const event of stalled) {
        this.flags.inc({ reason: event.reason });
        this.logger.warn(
          {
            alert: 'conversation_stalled',
            conversationId: event.conversationId,
            campaignId: event.campaignId,
            reason: event.reason,
            since: new Date(event.since).toISOString(),
          },
          'conversation stalled: no next step',
        );
      }
      flagged += stalled.length;
      if (stalled.length < this.batchSize) break;
    }
    this.sweeps.inc();
    return flagged;
  }
}
