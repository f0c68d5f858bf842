/**
 * A fix to kafkajs 2.2.4 (ADR 001; upstream is unmaintained and the fix sits unmerged), applied once
 * by createKafka, so every client of every service and command has it.
 *
 * RequestQueue.scheduleCheckPendingRequests sets a timer to `throttledUntil - Date.now()` ms even when
 * no request is pending; `throttledUntil` starts at -1, so the delay is about minus the epoch, which
 * Node turns into 1 ms. The timer's callback schedules the next one: every broker connection that
 * has answered a request wakes its process a thousand times a second for as long as it is open.
 * Measured on an idle admin and producer: 17,800 such timers and 459 ms of CPU in 10 s (a service has
 * several connections), against 0 and 39 ms with this fix. On Node 24 the first one also prints a
 * TimeoutNegativeWarning (tulios/kafkajs#1751).
 *
 * The fix: with nothing pending there is nothing to check. A request that has to wait is queued by
 * `push`, which schedules the check itself; a fulfilled request checks the queue directly.
 */
import { createRequire } from 'node:module';

const require = createRequire(import.meta.url);

/** The kafkajs version this fix was read against; another version leaves kafkajs as it is. */
export const PATCHED_KAFKAJS_VERSION = '2.2.4';

interface RequestQueuePrototype {
  pending: unknown[];
  scheduleCheckPendingRequests(this: RequestQueuePrototype): void;
}

let patch:
  | {
      prototype: Partial<RequestQueuePrototype>;
      original: RequestQueuePrototype['scheduleCheckPendingRequests'];
      fixed: RequestQueuePrototype['scheduleCheckPendingRequests'];
    }
  | null
  | undefined;

/** Applies the fix once; true when it is in place (the kafkajs version and the method are as read). */
export function patchKafkajsIdleTimer(): boolean {
  if (patch === undefined) {
    const { version } = require('kafkajs/package.json') as { version: string };
    const RequestQueue = require('kafkajs/src/network/requestQueue/index.js') as
      { prototype?: Partial<RequestQueuePrototype> } | undefined;
    const prototype = RequestQueue?.prototype;
    const original = prototype?.scheduleCheckPendingRequests;
    if (version !== PATCHED_KAFKAJS_VERSION || prototype === undefined || typeof original !== 'function') {
      patch = null;
    } else {
      const fixed = function scheduleCheckPendingRequests(this: RequestQueuePrototype) {
        if (this.pending.length === 0) return;
        original.call(this);
      };
      patch = { prototype, original, fixed };
    }
  }
  if (patch === null) return false;
  patch.prototype.scheduleCheckPendingRequests = patch.fixed;
  return true;
}

/** For the test that shows the fault the fix removes: kafkajs as shipped, until patchKafkajsIdleTimer(). */
export function unpatchKafkajsIdleTimerForTest(): void {
  if (patch) patch.prototype.scheduleCheckPendingRequests = patch.original;
}
