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

/**
 * A second fault of kafkajs 2.2.4: a re-authentication storm when a session is short (ADR 001).
 *
 * A broker with `connections.max.reauth.ms` (MSK IAM, Confluent Cloud, and OAUTHBEARER listeners
 * generally) gives each session a lifetime no longer than its credential: an OAUTHBEARER session
 * ends when its token expires. kafkajs re-authenticates a connection once less than
 * `reauthenticationThreshold` (10 s) of it is left, measured against the lifetime the broker gave the
 * session. A session that starts with 10 s or less left (a token re-read from a file near its
 * expiry, a broker that grants short sessions) is due again the moment it is made: kafkajs
 * re-authenticates a second time before the request it authenticated for, the broker refuses that
 * with ILLEGAL_SASL_STATE, and every request on the connection fails until the token expires.
 *
 * The fix: the margin is the threshold or 15% of the session, whichever is less (Kafka's Java client
 * re-authenticates at 85 to 95% of a session), so a new session is never due at once.
 */
interface ConnectionPrototype {
  [key: symbol]: (this: ConnectionState) => boolean;
}
interface ConnectionState {
  sessionLifetime: { toString(): string };
  authenticatedAt: [number, number] | null;
  reauthenticationThreshold: number;
}

const SHOULD_REAUTHENTICATE = 'private:Connection:shouldReauthenticate';

let reauthPatch:
  | {
      prototype: ConnectionPrototype;
      key: symbol;
      original: (this: ConnectionState) => boolean;
      fixed: (this: ConnectionState) => boolean;
    }
  | null
  | undefined;

/**
 * A broker refuses a re-authentication that starts less than 1 s after the last one
 * (KafkaChannel.MIN_REAUTH_INTERVAL_ONE_SECOND_NANOS) with ILLEGAL_SASL_STATE. Sessions shrink as a
 * token nears its expiry (each is what is left of the token), so without this floor the last few
 * re-authentications before a lapse would come under a second apart. A session that ends before
 * the floor is re-authenticated after it: the broker takes a re-authentication of a session past
 * its end (it only refuses other requests on it).
 */
export const MIN_REAUTHENTICATION_INTERVAL_MS = 1_250;

/** When a session is due for re-authentication, with the margin and the floor above; exported for its unit test. */
export function reauthenticationDue(elapsedMs: number, sessionLifetimeMs: number, thresholdMs: number): boolean {
  if (sessionLifetimeMs <= 0) return false;
  if (elapsedMs < MIN_REAUTHENTICATION_INTERVAL_MS) return false;
  return elapsedMs + Math.min(thresholdMs, sessionLifetimeMs * 0.15) >= sessionLifetimeMs;
}

/** Applies the fix once; true when it is in place (the kafkajs version and the method are as read). */
export function patchKafkajsReauthentication(): boolean {
  if (reauthPatch === undefined) {
    const { version } = require('kafkajs/package.json') as { version: string };
    const Connection = require('kafkajs/src/network/connection.js') as { prototype?: ConnectionPrototype } | undefined;
    const prototype = Connection?.prototype;
    const key = prototype
      ? Object.getOwnPropertySymbols(prototype).find((s) => s.description === SHOULD_REAUTHENTICATE)
      : undefined;
    const original = prototype && key ? prototype[key] : undefined;
    if (version !== PATCHED_KAFKAJS_VERSION || !prototype || !key || typeof original !== 'function') {
      reauthPatch = null;
    } else {
      const fixed = function shouldReauthenticate(this: ConnectionState): boolean {
        const lifetime = Number(this.sessionLifetime.toString());
        if (lifetime === 0) return false;
        if (this.authenticatedAt === null) return true;
        const [seconds, nanos] = process.hrtime(this.authenticatedAt);
        return reauthenticationDue(seconds * 1000 + nanos / 1e6, lifetime, this.reauthenticationThreshold);
      };
      reauthPatch = { prototype, key, original, fixed };
    }
  }
  if (reauthPatch === null) return false;
  reauthPatch.prototype[reauthPatch.key] = reauthPatch.fixed;
  return true;
}
