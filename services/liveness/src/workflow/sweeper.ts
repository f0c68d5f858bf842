import { counter, PeriodicTask, type Counter, type Logger, type Registry } from '@outreach/shared';
import type { ConversationsRepository } from '../adapters/conversations-repository.js';

/**
 * Flags stalled conversations, and closes those whose reply window ended, on the database's clock,
 * every interval, on every instance; the repository's SKIP LOCKED + guard makes each happen once.
 * One log line per flag, for alerts, and one per close.
 */
export class Sweeper {
  /** Its periodic sweep (whose liveness the plugin watches). */
  readonly loop: PeriodicTask;
  private readonly sweeps: Counter;
  private readonly flags: Counter;
  private readonly closes: Counter;

  constructor(
    private readonly repository: ConversationsRepository,
    private readonly logger: Logger,
    registry: Registry,
    intervalMs: number,
    private readonly batchSize = 500,
  ) {
    this.loop = new PeriodicTask('stall sweep', (stopping) => this.sweep(stopping), intervalMs, logger);
    this.sweeps = counter(registry, 'outreach_liveness_sweeps_total');
    this.flags = counter(registry, 'outreach_liveness_flags_total');
    this.closes = counter(registry, 'outreach_liveness_closes_total');
  }

  start(): void {
    this.loop.start();
  }

  stop(): Promise<void> {
    return this.loop.stop();
  }

  /**
   * Sweeps until a batch comes back short, or `stopping` aborts (the batch in hand is finished);
   * returns how many conversations it flagged and closed.
   */
  async sweep(stopping?: AbortSignal): Promise<{ flagged: number; closed: number }> {
    let flagged = 0;
    let closed = 0;
    for (;;) {
      const { stalled, closed: ended } = await this.repository.sweep(this.batchSize);
      for (const event of ended) {
        this.closes.inc({ reason: event.reason as string });
        this.logger.info(
          { closed: event.reason, conversationId: event.conversationId, campaignId: event.campaignId },
          'conversation closed: its sequence ended without a reply',
        );
      }
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
      closed += ended.length;
      if (stalled.length + ended.length < this.batchSize || stopping?.aborted) break;
    }
    this.sweeps.inc();
    return { flagged, closed };
  }
}
