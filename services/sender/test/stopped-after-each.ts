/**
 * Servers, providers and test envs a test starts, stopped after it whatever its outcome.
 */
import { afterEach } from 'vitest';

/**
 * Registers an afterEach and returns `keep`: `keep(resource, stop)` returns the resource, and after
 * each test every resource kept during it is stopped, the last kept first (a client before the
 * server it talks to).
 */
export function stoppedAfterEach(): <T>(resource: T, stop: (resource: T) => Promise<unknown>) => T {
  let stops: Array<() => Promise<unknown>> = [];
  afterEach(async () => {
    const due = stops.reverse();
    stops = [];
    for (const stop of due) await stop();
  });
  return (resource, stop) => {
    stops.push(() => stop(resource));
    return resource;
  };
}
