/**
 * Weight changes and the report, against the real database over HTTP: a 10/90 → 50/50 ramp is
 * not a sample-ratio mismatch, every assignment stores the period whose weights computed it even
 * while weights change under concurrent requests, and the migration gives existing experiments a
 * history that claims no more than it knows.
 */
import { copyFileSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { migrate, quoteIdent, sharedMigrationsDir } from '@outreach/shared';
import { uniqueName, type ServiceTestEnv } from '@outreach/testkit';
import type { FastifyInstance } from 'fastify';
import pg from 'pg';
import { afterEach, describe, expect, it } from 'vitest';
import { migrationsDir } from '../src/app.js';
import { variantForBucket } from '../src/domain/assignment.js';
import { sampleRatioMismatch } from '../src/domain/srm.js';
import { auth, createExperiment, experimentEnv, postAssignments } from './experiment-env.js';

let t: ServiceTestEnv;
afterEach(() => t?.cleanup());

const weights = (a: number, b: number) => ({
  variants: [
    { name: 'A', weight: a },
    { name: 'B', weight: b },
  ],
});

async function assign(app: FastifyInstance, experimentId: string, candidateIds: string[]) {
  const response = await postAssignments(app, experimentId, candidateIds);
  expect(response.statusCode, response.body).toBe(200);
  return response.json().assignments as Array<{ candidateKey: string; variant: string; enrolled: boolean }>;
}

async function patch(app: FastifyInstance, experimentId: string, body: object) {
  const response = await app.inject({
    method: 'PATCH',
    url: `/v1/experiments/${experimentId}`,
    headers: auth,
    payload: body,
  });
  expect(response.statusCode, response.body).toBe(200);
  return response.json();
}

const ids = (prefix: string, n: number) => Array.from({ length: n }, (_, i) => `${prefix}-${i}`);

interface Period {
  period: number;
  from: string;
  until: string | null;
  weights: Record<string, number> | null;
  tested: boolean;
  assigned: number;
  observed: Record<string, number>;
  mismatch: boolean;
}

describe('weights history and the report', () => {
  it('a 10/90 ramp to 50/50 is no sample-ratio mismatch, and the report lists both periods', async () => {
    t = await experimentEnv();
    const app = await t.startApp();
    // A fixed salt makes the split, and so the test, the same on every run.
    const created = await createExperiment(app, { experimentId: 'ramp', salt: 'ramp-test-salt', ...weights(10, 90) });
    expect(created.statusCode).toBe(201);
    expect(created.json().weightsPeriod).toBe(1);
    for (const chunk of [0, 1]) await assign(app, 'ramp', ids(`first-${chunk}`, 1_000));
    expect((await patch(app, 'ramp', weights(50, 50))).weightsPeriod).toBe(2);
    for (const chunk of [0, 1]) await assign(app, 'ramp', ids(`second-${chunk}`, 1_000));

    const report = (await app.inject({ url: '/v1/experiments/ramp/report', headers: auth })).json();
    const srm = report.sampleRatioMismatch;
    expect(report.assignedTotal).toBe(4_000);
    expect(srm.mismatch).toBe(false);
    expect(srm.pValue).toBeGreaterThanOrEqual(0.001);
    expect(srm.degreesOfFreedom).toBe(2);
    const periods = srm.periods as Period[];
    expect(periods.map((p) => [p.period, p.weights, p.assigned, p.tested, p.mismatch])).toEqual([
      [1, { A: 10, B: 90 }, 2_000, true, false],
      [2, { A: 50, B: 50 }, 2_000, true, false],
    ]);
    expect(periods[0]?.until).toBe(periods[1]?.from);
    expect(periods[1]?.until).toBeNull();
    expect(periods[0]?.observed.A).toBeLessThan(300); // about 200 of 2,000 at 10%
    expect(srm.expected.A).toBeCloseTo(200 + 1_000, 6);

    // The same counts tested as one run against today's weights: what the report used to say.
    const observed = Object.fromEntries(
      (report.variants as Array<{ variant: string; assigned: number }>).map((v) => [v.variant, v.assigned]),
    );
    expect(sampleRatioMismatch(observed, report.weights).mismatch).toBe(true);

    // Only a change of weights opens a period.
    await patch(app, 'ramp', { status: 'paused' });
    await patch(app, 'ramp', { ...weights(50, 50), status: 'active' });
    expect((await app.inject({ url: '/v1/experiments/ramp', headers: auth })).json().weightsPeriod).toBe(2);
    expect(await t.query('SELECT period FROM weight_periods ORDER BY period')).toEqual([{ period: 1 }, { period: 2 }]);
    expect(await t.query('SELECT period, count(*)::int AS n FROM assignments GROUP BY 1 ORDER BY 1')).toEqual([
      { period: 1, n: 2_000 },
      { period: 2, n: 2_000 },
    ]);
  });

  it('a real mismatch within a period is flagged, and that period is the one marked', async () => {
    t = await experimentEnv();
    const app = await t.startApp();
    await createExperiment(app, { experimentId: 'skew', salt: 'skew-test-salt', ...weights(1, 1) });
    await assign(app, 'skew', ids('early', 1_000));
    await patch(app, 'skew', weights(1, 3));
    const later = await assign(app, 'skew', ids('late', 1_000));
    // Something downstream loses most of one arm of the second period (a filter, a leak): the
    // report counts what it can still see, contaminated candidates excluded.
    const lost = later.filter((a) => a.variant === 'B').slice(0, 500);
    await t.query(
      `INSERT INTO contaminations (experiment_id, candidate_key, assigned_variant, exposed_variants)
       SELECT 'skew', k, 'B', ARRAY['A', 'B'] FROM unnest($1::text[]) AS k`,
      [lost.map((a) => a.candidateKey)],
    );
    const srm = (await app.inject({ url: '/v1/experiments/skew/report', headers: auth })).json().sampleRatioMismatch;
    expect(srm.mismatch).toBe(true);
    expect((srm.periods as Period[]).map((p) => p.mismatch)).toEqual([false, true]);
  });

  it('every assignment stores the period whose weights computed it, while weights change under concurrent requests', async () => {
    t = await experimentEnv();
    const app = await t.startApp();
    await createExperiment(app, { experimentId: 'churn', ...weights(10, 90) });
    const ramps = [weights(90, 10), weights(1, 1), weights(0, 1), weights(3, 1), weights(1, 0)];
    // Each round's batches race its weight change; the next round starts after it.
    for (const [round, ramp] of ramps.entries()) {
      await Promise.all([
        ...Array.from({ length: 6 }, (_, i) => assign(app, 'churn', ids(`r${round}-${i}`, 100))),
        patch(app, 'churn', ramp),
      ]);
    }
    const rows = await t.query<{ variant: string; bucket: number; weights: Array<{ name: string; weight: number }> }>(
      `SELECT a.variant, a.bucket, p.weights FROM assignments a JOIN weight_periods p USING (experiment_id, period)`,
    );
    expect(rows).toHaveLength(3_000);
    expect(rows.filter((r) => variantForBucket(r.weights, r.bucket) !== r.variant)).toEqual([]);
    expect(await t.query('SELECT 1 FROM assignments WHERE period IS NULL')).toEqual([]);
    expect((await t.query('SELECT DISTINCT period FROM assignments')).length).toBeGreaterThan(1);
    expect((await t.query('SELECT period FROM weight_periods')).length).toBe(1 + ramps.length);
    const srm = (await app.inject({ url: '/v1/experiments/churn/report', headers: auth })).json().sampleRatioMismatch;
    expect((srm.periods as Period[]).reduce((n, p) => n + p.assigned, 0)).toBe(3_000);
    expect(srm.periods.flatMap((p: { unexpected: object }) => Object.keys(p.unexpected))).toEqual([]);
  });

  it('the migration gives existing experiments their known weights, and an untested period where they are not known', async () => {
    t = await experimentEnv();
    const schema = uniqueName('experiment_legacy');
    const firstOnly = mkdtempSync(join(tmpdir(), 'experiment-migrations-'));
    copyFileSync(join(migrationsDir, '1764400000000_experiment.sql'), join(firstOnly, '1764400000000_experiment.sql'));
    // The outbox as it was then: shared migrations added since sort after this service's own.
    for (const file of ['1764000000000_outbox.sql', '1764700000000_outbox_parked.sql'])
      copyFileSync(join(sharedMigrationsDir, file), join(firstOnly, file));
    const pool = new pg.Pool({
      connectionString: t.databaseUrl,
      options: `-c search_path=${quoteIdent(schema)}`,
      max: 2,
    });
    t.onCleanup(async () => {
      await pool.query(`DROP SCHEMA IF EXISTS ${quoteIdent(schema)} CASCADE`);
      await pool.end();
      rmSync(firstOnly, { recursive: true, force: true });
    });
    await migrate({ databaseUrl: t.databaseUrl, schema, dir: firstOnly });
    // Before weight history: one experiment never changed, one changed on day 2 (weights unknown).
    await pool.query(`
      INSERT INTO experiments (experiment_id, salt, status, created_at, updated_at) VALUES
        ('still', 'salt-still', 'active', '2025-01-01T00:00:00Z', '2025-01-01T00:00:00Z'),
        ('ramped', 'salt-ramped', 'active', '2025-01-01T00:00:00Z', '2025-01-02T00:00:00Z');
      INSERT INTO variants (experiment_id, name, weight, position) VALUES
        ('still', 'A', 1, 0), ('still', 'B', 1, 1), ('ramped', 'A', 1, 0), ('ramped', 'B', 1, 1);
      INSERT INTO assignments (experiment_id, candidate_key, variant, bucket, assigned_at)
        SELECT 'still', 's' || i, CASE WHEN i % 2 = 0 THEN 'A' ELSE 'B' END, 0.5, '2025-01-01T12:00Z' FROM generate_series(1, 400) i;
      -- Day 1 of "ramped" ran at 10/90 (not recorded anywhere); day 2 onwards at 50/50.
      INSERT INTO assignments (experiment_id, candidate_key, variant, bucket, assigned_at)
        SELECT 'ramped', 'early' || i, CASE WHEN i % 10 = 0 THEN 'A' ELSE 'B' END, 0.5, '2025-01-01T12:00Z' FROM generate_series(1, 1000) i;
      INSERT INTO assignments (experiment_id, candidate_key, variant, bucket, assigned_at)
        SELECT 'ramped', 'late' || i, CASE WHEN i % 2 = 0 THEN 'A' ELSE 'B' END, 0.5, '2025-01-02T12:00Z' FROM generate_series(1, 1000) i;
    `);
    // The migrations after the first one, in order: this one, then whatever later releases added.
    const ran = await migrate({ databaseUrl: t.databaseUrl, schema, dir: migrationsDir, outbox: true });
    expect(ran.slice(0, 4)).toEqual([
      '1765300000000_weight-history-and-imports',
      '1767200000000_outbox-trace-context',
      '1767300000000_outbox-event-ids',
      '1767400000000_imported-assignments',
    ]);
    expect(ran.slice(4)).toEqual([...ran.slice(4)].sort());
    for (const later of ran.slice(4)) expect(later > '1767400000000').toBe(true);
    const periods = await pool.query(
      `SELECT experiment_id, period, effective_from, weights FROM weight_periods ORDER BY experiment_id, period`,
    );
    expect(periods.rows).toEqual([
      {
        experiment_id: 'ramped',
        period: 1,
        effective_from: new Date('2025-01-01T00:00:00Z'),
        weights: null,
      },
      {
        experiment_id: 'ramped',
        period: 2,
        effective_from: new Date('2025-01-02T00:00:00Z'),
        weights: weights(1, 1).variants,
      },
      {
        experiment_id: 'still',
        period: 1,
        effective_from: new Date('2025-01-01T00:00:00Z'),
        weights: weights(1, 1).variants,
      },
    ]);

    const app = await t.startApp({ DATABASE_SCHEMA: schema });
    const ramped = (await app.inject({ url: '/v1/experiments/ramped/report', headers: auth })).json();
    expect(ramped.sampleRatioMismatch).toMatchObject({ mismatch: false, untested: 1_000 });
    expect(
      (ramped.sampleRatioMismatch.periods as Period[]).map((p) => [p.period, p.tested, p.assigned, p.observed]),
    ).toEqual([
      [1, false, 1_000, { A: 100, B: 900 }],
      [2, true, 1_000, { A: 500, B: 500 }],
    ]);
    const still = (await app.inject({ url: '/v1/experiments/still/report', headers: auth })).json();
    expect(still.sampleRatioMismatch).toMatchObject({ mismatch: false, untested: 0, chiSquare: 0 });
    // New assignments and weight changes continue the history.
    await patch(app, 'ramped', weights(1, 3));
    await assign(app, 'ramped', ['fresh']);
    expect((await pool.query(`SELECT period FROM assignments WHERE candidate_key = 'fresh'`)).rows).toEqual([
      { period: 3 },
    ]);
  });
});
