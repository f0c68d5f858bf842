/**
 * @fastify/rate-limit's in-memory store, answering with a copy of the count. Its LocalStore hands the
 * callback the bucket's own counter object, and the plugin reads `current` from it only after an
 * `await`: by then every other request of the same burst has incremented it too, so 30 concurrent
 * requests against a limit of 20 were all refused, none of them told the count it made. The copy is
 * taken in the callback, when the count is the request's own.
 */
import { createRequire } from 'node:module';
import type { FastifyRateLimitStore } from '@fastify/rate-limit';

type Counted = { current: number; ttl: number };
interface LocalStore {
  incr(key: string, callback: (error: Error | null, result?: Counted) => void, timeWindow: number, max: number): void;
  read?(key: string, callback: (error: Error | null, result?: Counted) => void, timeWindow: number, max: number): void;
}
type LocalStoreConstructor = new (continueExceeding: boolean, exponentialBackoff: boolean, cache: number) => LocalStore;

// The package exports no map, and its LocalStore is the one store every version ships.
const LocalStore = createRequire(import.meta.url)('@fastify/rate-limit/store/LocalStore.js') as LocalStoreConstructor;

/**
 * Buckets each limiter keeps at most (least recently used go first): enough that a flood of one
 * kind of key (many client addresses) cannot push the others out and so reset them.
 */
export const RATE_LIMIT_BUCKETS = 50_000;

const copied = (callback: (error: Error | null, result?: Counted) => void) => (error: Error | null, result?: Counted) =>
  callback(error, result && { current: result.current, ttl: result.ttl });

/** The `store` of @fastify/rate-limit (no continueExceeding, no backoff); each limiter gets its own. */
export class CountingStore implements FastifyRateLimitStore {
  private readonly local = new LocalStore(false, false, RATE_LIMIT_BUCKETS);

  incr(key: string, callback: (error: Error | null, result?: Counted) => void, timeWindow: number, max: number): void {
    this.local.incr(key, copied(callback), timeWindow, max);
  }

  read(key: string, callback: (error: Error | null, result?: Counted) => void, timeWindow: number, max: number): void {
    this.local.read?.(key, copied(callback), timeWindow, max);
  }

  child(): CountingStore {
    return new CountingStore();
  }
}
