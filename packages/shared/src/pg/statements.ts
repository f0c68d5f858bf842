import type pg from 'pg';
import { counter } from '../metrics.js';
import type { Registry } from '../metrics.js';

/**
 * Counts every statement `client` sends in `outreach_pg_statements_total` (one increment per query,
 * BEGIN and COMMIT included): the service's pool and its outbox relay's own session alike, so the
 * benchmark's statements per send and an operator's view of the database's load are whole.
 */
export function countStatements(client: pg.ClientBase, registry: Registry): void {
  const statements = counter(registry, 'outreach_pg_statements_total');
  const query = client.query.bind(client) as (...args: unknown[]) => unknown;
  (client as { query: (...args: unknown[]) => unknown }).query = (...args: unknown[]) => {
    statements.inc();
    return query(...args);
  };
}
