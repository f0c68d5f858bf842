/**
 * Exclusion groups under racing batches: two experiments of one group assigning the same candidates
 * at once never both enrol one (the group claim the store takes before deciding is the lock), and
 * the loser's answer names the winner.
 */
import { createPool, migrate, quoteIdent } from '@outreach/shared';
import { uuidV5 } from '@outreach/contracts';
import { uniqueName } from '@outreach/testkit';
import type { Pool } from 'pg';
import { afterAll, beforeAll, expect, inject, it } from 'vitest';
import { ExperimentsRepository, type Experiment } from '../src/adapters/experiments-repository.js';
import { migrationsDir } from '../src/app.js';
import { assignCandidates } from '../src/workflow/assign.js';

const databaseUrl = inject('databaseUrl');
let schema: string;
let pool: Pool;

beforeAll(async () => {
  schema = uniqueName('experiment_race');
  await migrate({ databaseUrl, schema, dir: migrationsDir, outbox: true });
  pool = createPool({ connectionString: databaseUrl, applicationName: 'exclusion-race-test', schema, max: 4 });
});

afterAll(async () => {
  await pool?.query(`DROP SCHEMA IF EXISTS ${quoteIdent(schema)} CASCADE`);
  await pool?.end();
});

it('two experiments of a group racing for the same candidates enrol each in exactly one', async () => {
  const repository = new ExperimentsRepository(pool, 'test.assignments');
  const variants = [
    { name: 'A', weight: 1 },
    { name: 'B', weight: 1 },
  ];
  for (const experimentId of ['left', 'right'])
    await repository.create({ experimentId, salt: experimentId, status: 'active', exclusionGroup: 'copy', variants });
  const left = (await repository.find('left')) as Experiment;
  const right = (await repository.find('right')) as Experiment;

  for (let round = 0; round < 5; round++) {
    const keys = Array.from({ length: 200 }, (_, i) => `r${round}-c${i}`);
    const [fromLeft, fromRight] = await Promise.all([
      assignCandidates(repository, left, keys, `left-${round}`),
      assignCandidates(repository, right, [...keys].reverse(), `right-${round}`),
    ]);
    const byKey = new Map(fromRight.map((a) => [a.candidateKey, a]));
    for (const a of fromLeft) {
      const b = byKey.get(a.candidateKey);
      expect([a.enrolled, b?.enrolled].filter(Boolean), a.candidateKey).toHaveLength(1);
      const loser = a.enrolled ? b : a;
      expect(loser).toMatchObject({
        enrolled: false,
        reason: `not enrolled: candidate is in experiment ${a.enrolled ? 'left' : 'right'} of exclusion group copy`,
      });
    }
  }
  const { rows } = await pool.query<{ n: number; members: number; events: number }>(
    `SELECT (SELECT count(*)::int FROM assignments) AS n, (SELECT count(*)::int FROM group_memberships) AS members,
            (SELECT count(*)::int FROM outbox) AS events`,
  );
  expect(rows[0]).toEqual({ n: 1_000, members: 1_000, events: 1_000 });
  // Each candidate is assigned in the experiment that holds it.
  const holders = await pool.query<{ candidate_key: string; experiment_id: string }>(
    'SELECT candidate_key, experiment_id FROM group_memberships',
  );
  const assigned = await pool.query<{ candidate_key: string; experiment_id: string }>(
    'SELECT candidate_key, experiment_id FROM assignments',
  );
  expect(new Map(assigned.rows.map((r) => [r.candidate_key, r.experiment_id]))).toEqual(
    new Map(holders.rows.map((r) => [r.candidate_key, r.experiment_id])),
  );
  // One VariantAssigned per stored assignment, by the holder's id, and none for the loser.
  const outbox = await pool.query<{ event_id: string }>('SELECT event_id FROM outbox ORDER BY event_id');
  expect(outbox.rows.map((r) => r.event_id)).toEqual(
    assigned.rows.map((r) => uuidV5('variant-assigned', r.experiment_id, r.candidate_key)).sort(),
  );
});
