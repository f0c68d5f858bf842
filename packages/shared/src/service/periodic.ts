import type { Logger } from '../logger.js';

export interface PeriodicTaskOptions {
  /**
   * A run still going after this long counts as stuck, and `liveness()` says so (default: ten
   * intervals, at least 5 minutes). Runs are sweeps that are safe to cut short and run again.
   */
  readonly stallAfterMs?: number;
}

/**
 * Runs `task` now, then `intervalMs` after each run ends (never overlapping), until stopped. A
 * failed run is logged and retried at the next tick. `stop()` aborts the signal the task is given,
 * so a task that loops over batches ends after the one in hand instead of holding up a shutdown. `wake()` runs it again soon. `liveness()`
 * reports a task that stopped turning: a run that never ends (a query waiting on a lock forever,
 * a connection that stopped answering) or a schedule that was lost.
 */
export class PeriodicTask {
  private timer: NodeJS.Timeout | undefined;
  private running: Promise<void> | undefined;
  private started = false;
  private stopped = false;
  private runStartedAt: number | undefined;
  private readonly stallAfterMs: number;
  private readonly stopping = new AbortController();

  constructor(
    readonly name: string,
    private readonly task: (signal: AbortSignal) => Promise<unknown>,
    private readonly intervalMs: number,
    private readonly logger: Logger,
    options: PeriodicTaskOptions = {},
  ) {
    this.stallAfterMs = options.stallAfterMs ?? Math.max(5 * 60_000, 10 * intervalMs);
  }

  start(): void {
    this.started = true;
    this.schedule(0);
  }

  wake(): void {
    if (!this.stopped && !this.running) this.schedule(0);
  }

  /** Waits for a run in progress to finish. */
  async stop(): Promise<void> {
    this.stopped = true;
    this.stopping.abort();
    clearTimeout(this.timer);
    this.timer = undefined;
    await this.running;
  }

  /** Why the task no longer turns, or undefined while it does (or was never started). */
  liveness(now = Date.now()): string | undefined {
    if (!this.started || this.stopped) return undefined;
    if (this.runStartedAt !== undefined && now - this.runStartedAt > this.stallAfterMs) {
      return `${this.name}: a run has been going for ${Math.round((now - this.runStartedAt) / 1000)} s`;
    }
    if (this.runStartedAt === undefined && this.timer === undefined) return `${this.name}: no run is scheduled`;
    return undefined;
  }

  private schedule(delay: number): void {
    clearTimeout(this.timer);
    this.timer = setTimeout(() => {
      this.timer = undefined;
      this.runStartedAt = Date.now();
      // Through a promise, so a task that throws synchronously is a failed run, not a lost schedule.
      this.running = Promise.resolve()
        .then(() => this.task(this.stopping.signal))
        .then(() => undefined)
        .catch((error: unknown) =>
          this.logger.warn({ err: error, task: this.name }, `${this.name} failed; retrying at the next tick`),
        )
        .finally(() => {
          this.running = undefined;
          this.runStartedAt = undefined;
          if (!this.stopped) this.schedule(this.intervalMs);
        });
    }, delay);
  }
}
