export interface WaitOptions {
  /** Give up after this many milliseconds. */
  readonly timeoutMs: number;
  /** Pause between attempts. */
  readonly intervalMs?: number;
  /** Names the condition in the timeout error, so a failure says what never happened. */
  readonly description: string;
}

export class WaitTimeoutError extends Error {
  override readonly name = 'WaitTimeoutError';
  constructor(
    readonly description: string,
    readonly timeoutMs: number,
    readonly lastError: unknown,
  ) {
    const cause = lastError instanceof Error ? `: last error: ${lastError.message}` : '';
    super(`timed out after ${timeoutMs} ms waiting for ${description}${cause}`);
  }
}

const pause = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

/**
 * Polls `probe` until it returns a value other than `undefined`/`false`, or the deadline passes.
 * A probe that throws counts as "not yet"; its last error is reported on timeout.
 * This is the only way tests and tooling wait: a condition with a deadline, never a fixed sleep.
 */
export async function waitFor<T>(
  probe: () => Promise<T | undefined | false> | T | undefined | false,
  options: WaitOptions,
): Promise<T> {
  const deadline = Date.now() + options.timeoutMs;
  const interval = options.intervalMs ?? 100;
  let lastError: unknown;
  for (;;) {
    try {
      const value = await probe();
      if (value !== undefined && value !== false) return value;
    } catch (error) {
      lastError = error;
    }
    if (Date.now() >= deadline) throw new WaitTimeoutError(options.description, options.timeoutMs, lastError);
    await pause(Math.min(interval, Math.max(0, deadline - Date.now())));
  }
}

/** `promise`, or a rejection with `timeout()` once `ms` pass first (the promise itself runs on). */
export function withTimeout<T>(promise: Promise<T>, ms: number, timeout: () => Error): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  return Promise.race([
    promise,
    new Promise<never>((_, reject) => {
      timer = setTimeout(() => reject(timeout()), ms);
    }),
  ]).finally(() => clearTimeout(timer));
}
