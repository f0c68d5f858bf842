/**
 * PeriodicTask's stop: a task that works through batches gets a signal, and stop() aborts it, so a
 * backlog ends after the batch in hand instead of holding up a shutdown.
 */
import { describe, expect, it } from 'vitest';
import { createLogger } from '../logger.js';
import { waitFor } from '../wait.js';
import { PeriodicTask } from './periodic.js';

const logger = createLogger({ name: 'periodic-test', level: 'silent' });

describe('PeriodicTask', () => {
  it('aborts the signal of a run in progress on stop, and the run ends after its batch', async () => {
    let batches = 0;
    const task = new PeriodicTask(
      'batches',
      async (stopping) => {
        // An endless backlog: only the signal ends this run.
        while (!stopping.aborted) {
          batches++;
          await new Promise((resolve) => setImmediate(resolve));
        }
      },
      60_000,
      logger,
    );
    task.start();
    await waitFor(() => batches >= 5, { timeoutMs: 5_000, description: 'the run to work through batches' });
    // Without the abort, stop() would wait for a run that never ends (the test times out).
    await task.stop();
    const atStop = batches;
    // Nothing runs after stop() resolved.
    await new Promise((resolve) => setImmediate(resolve));
    expect(batches).toBe(atStop);
    expect(task.liveness()).toBeUndefined();
  });

  it('gives each run a signal that is not aborted while the task is running', async () => {
    const seen: boolean[] = [];
    const task = new PeriodicTask(
      'ticks',
      async (stopping) => {
        seen.push(stopping.aborted);
      },
      1,
      logger,
    );
    task.start();
    await waitFor(() => seen.length >= 3, { timeoutMs: 5_000, description: 'three runs' });
    await task.stop();
    expect(seen.every((aborted) => !aborted)).toBe(true);
  });
});
