/**
 * The contamination rule, judged in TypeScript (domain `isContaminated`, the decider's) and in the
 * SQL generated from the same rule table (adapters/contamination-sql.ts, the set-based detection's),
 * agrees on real PostgreSQL for every assigned arm (or none) and every set of exposed arms.
 */
import pg from 'pg';
import { afterAll, beforeAll, expect, inject, it } from 'vitest';
import { contaminatedSql } from '../src/adapters/contamination-sql.js';
import { isContaminated, type SeenArms } from '../src/domain/assignment.js';

let pool: pg.Pool;
beforeAll(() => {
  pool = new pg.Pool({ connectionString: inject('databaseUrl'), max: 1 });
});
afterAll(() => pool?.end());

const ARMS = ['A', 'B', 'C'];
/** Every non-empty subset of the arms, sorted as the detection aggregates them. */
const exposedSets = Array.from({ length: 2 ** ARMS.length - 1 }, (_, mask) =>
  ARMS.filter((_, i) => ((mask + 1) >> i) & 1),
);
const cases: SeenArms[] = [null, ...ARMS].flatMap((assigned) => exposedSets.map((exposed) => ({ assigned, exposed })));

it('the generated SQL and the domain rule agree on every case', async () => {
  const { rows } = await pool.query<{ i: number; contaminated: boolean }>(
    `SELECT i::int, ${contaminatedSql({ assigned: 'assigned', exposed: 'exposed' })} AS contaminated
     FROM (SELECT i, $1::text[] AS a, $2::text[] AS e FROM generate_series(1, $3::int) AS i) params,
          LATERAL (SELECT a[i] AS assigned, string_to_array(e[i], ',') AS exposed) seen
     ORDER BY i`,
    [cases.map((c) => c.assigned), cases.map((c) => c.exposed.join(',')), cases.length],
  );
  expect(rows.map((r) => r.contaminated)).toEqual(cases.map(isContaminated));
  expect(rows).toHaveLength(28);
});
