import type pg from 'pg';

/**
 * The pool, as seen by code that queries it, remembering the text of every statement sent through
 * `query`: a test reads `statements` to explain or check what the code under test ran.
 */
export function recordingPool(pool: pg.Pool): { pool: pg.Pool; statements: string[] } {
  const statements: string[] = [];
  const recording = new Proxy(pool, {
    get(target, property, receiver) {
      if (property !== 'query') return Reflect.get(target, property, receiver);
      return (text: string, ...rest: unknown[]) => {
        statements.push(text);
        return (target.query as (...args: unknown[]) => unknown)(text, ...rest);
      };
    },
  });
  return { pool: recording, statements };
}
