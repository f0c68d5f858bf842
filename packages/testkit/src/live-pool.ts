import pg from 'pg';

/**
 * Runs `use` with a pool on a service's own schema (its live projection, to compare a replay or a
 * rebuild with), and ends the pool after, whatever `use` does.
 */
export async function withLivePool<T>(
  service: { readonly databaseUrl: string; readonly schema: string },
  use: (livePool: pg.Pool) => Promise<T>,
): Promise<T> {
  const livePool = new pg.Pool({ connectionString: service.databaseUrl, options: `-c search_path=${service.schema}` });
  try {
    return await use(livePool);
  } finally {
    await livePool.end();
  }
}
