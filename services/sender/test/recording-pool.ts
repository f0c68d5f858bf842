/**
 * A pg pool that remembers every statement sent through it, for tests that count round trips or
 * explain the statements an adapter runs.
 */
import type { Pool, PoolClient } from 'pg';

/**
 * `pool` with every statement sent through it, or through a client it hands out (BEGIN and COMMIT
 * included), appended to `statements` in the order sent.
 */
export function recordingPool(pool: Pool): { readonly pool: Pool; readonly statements: readonly string[] } {
  const statements: string[] = [];
  const record = <T extends object>(target: T): T =>
    new Proxy(target, {
      get(object, property, receiver) {
        const value = Reflect.get(object, property, receiver) as unknown;
        if (property === 'query')
          return (...args: unknown[]) => {
            const [query] = args;
            statements.push(typeof query === 'string' ? query : (query as { text: string }).text);
            return (value as (...a: unknown[]) => unknown).apply(object, args);
          };
        if (property === 'connect') return async () => record(await (value as () => Promise<PoolClient>).apply(object));
        return typeof value === 'function' ? (value as (...a: unknown[]) => unknown).bind(object) : value;
      },
    });
  return { pool: record(pool), statements };
}
