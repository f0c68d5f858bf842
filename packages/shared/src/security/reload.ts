/**
 * Values read from files that change while the process runs: a mounted Secret, which the kubelet
 * updates in place when it is rotated. The start reads the value once (an unreadable file stops
 * the start there: a ConfigError, exit 78); this reads it again on a timer, so a rotation needs no
 * restart. A read that fails later (a Secret mid-update, a file gone) keeps the value in hand rather
 * than none, and is reported; the next tick tries again.
 */

export interface ReloadOptions<T> {
  /** How often to read again: SECRET_FILE_REFRESH_MS (30 s by default) for secret files. */
  readonly intervalMs: number;
  /** Whether two reads hold the same value (default `===`); only a change reaches `onChange`. */
  readonly same?: (a: T, b: T) => boolean;
  /** A new value, before it is handed out; if this throws, the old one stays and `onError` hears of it. */
  readonly onChange?: (next: T) => void;
  /** A read (or `onChange`) that failed; the value in hand stays. It must not log the value. */
  readonly onError?: (error: unknown) => void;
}

export interface Reloading<T> {
  /** The latest value read. */
  current(): T;
  /** Stops the timer (a service's onClose). */
  stop(): void;
}

/** Holds `first` (the start's read) and reads `read()` again every `intervalMs`, until stopped. */
export function reloadEvery<T>(first: T, read: () => T, options: ReloadOptions<T>): Reloading<T> {
  let value = first;
  const same = options.same ?? ((a: T, b: T) => a === b);
  const timer = setInterval(() => {
    try {
      const next = read();
      if (same(next, value)) return;
      options.onChange?.(next);
      value = next;
    } catch (error) {
      options.onError?.(error);
    }
  }, options.intervalMs);
  // A timer that re-reads a file never keeps a process alive on its own.
  timer.unref();
  return { current: () => value, stop: () => clearInterval(timer) };
}
