import type { Logger } from '../logger.js';

/**
 * Runs `task` now, then `intervalMs` after each run ends (never overlapping), until stopped. A
 * failed run is logged and retried at the next tick. `wake()` runs it again soon.
 */
export class PeriodicTask {
  private timer: NodeJS.Timeout | undefined;
  private running: Promise<void> | undefined;
  private stopped = false;

  constructor(
    private readonly name: string,
    private readonly task: () => Promise<unknown>,
    private readonly intervalMs: number,
    private readonly logger: Logger,
  ) {}

  start(): void {
    this.schedule(0);
  }

  wake(): void {
    if (!this.stopped && !this.running) this.schedule(0);
  }

  /** Waits for a run in progress to finish. */
  async stop(): Promise<void> {
    this.stopped = true;
    clearTimeout(this.timer);
    await this.running;
  }

  private schedule(delay: number): void {
    clearTimeout(this.timer);
    this.timer = setTimeout(() => {
      this.running = this.task()
        .then(() => undefined)
        .catch((error: unknown) =>
          this.logger.warn({ err: error, task: this.name }, `${this.name} failed; retrying at the next tick`),
        )
        .finally(() => {
          this.running = undefined;
          if (!this.stopped) this.schedule(this.intervalMs);
        });
    }, delay);
  }
}
