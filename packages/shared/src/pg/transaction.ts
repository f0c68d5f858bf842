import type { Pool, PoolClient } from 'pg';

/** Anything that runs a query: a pool or a client inside a transaction. */
export type Queryable = Pick<PoolClient, 'query'>;

/**
 * Runs `work` in one transaction on one connection: COMMIT when it resolves, ROLLBACK when it
 * throws (the error propagates unchanged, so callers can tell transient failures apart).
 */
export async function withTransaction<T>(pool: Pool, work: (client: PoolClient) => Promise<T>): Promise<T> {
  const client = await pool.connect();
  let broken = false;
  // A checked-out client whose server goes away emits 'error'; unheard, that would crash the
  // process. The failing query rejects anyway, so note it and let the error flow from there.
  const onError = () => {
    broken = true;
  };
  client.on('error', onError);
  try {
    await client.query('BEGIN');
    const result = await work(client);
    await client.query('COMMIT');
    return result;
  } catch (error) {
    try {
      await client.query('ROLLBACK');
    } catch {
      broken = true; // the connection itself failed: do not return it to the pool
    }
    throw error;
  } finally {
    client.off('error', onError);
    client.release(broken);
  }
}
