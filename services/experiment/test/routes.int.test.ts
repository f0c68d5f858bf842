/**
 * The experiment service's HTTP surface under attack (docs/attacks.md, "Paths and identity", "JSON
 * bodies"): every route's scope, every path spelling without a token, fuzzed input from each
 * route's schema, and integers past what their columns hold.
 */
import {
  bearer,
  expectFuzzSurvived,
  ownService,
  ROUTE_TEST_TOKENS,
  routeScopeTests,
  routesUnderTest,
  serviceTestEnv,
} from '@outreach/testkit';
import { describe, expect, inject, it } from 'vitest';
import { buildApp, migrationsDir } from '../src/app.js';
import { ConfigSchema } from '../src/config.js';

const infra = { kafkaBrokers: inject('kafkaBrokers'), databaseUrl: inject('databaseUrl') };
const svc = routesUnderTest(
  (env) =>
    serviceTestEnv(
      ownService(import.meta.dirname, { name: 'experiment', configSchema: ConfigSchema, buildApp, migrationsDir }),
      infra,
      { env },
    ),
  // Small dry runs keep the fuzzer quick; the bound itself is what is under test.
  () => ({ MAX_DRY_RUN: '2000' }),
);

const fiftyFifty = [
  { name: 'A', weight: 1 },
  { name: 'B', weight: 1 },
];

describe('experiment routes', () => {
  routeScopeTests(svc, 'definitions need operate, assignments publish, reads read', {
    'POST /v1/experiments': 'operate',
    'POST /v1/subject-parts/export': 'read',
    'POST /v1/subject-parts/erase': 'erase',
    'GET /v1/experiments/:id': 'read',
    'PATCH /v1/experiments/:id': 'operate',
    'PUT /v1/experiments/:id/assignments/:candidateId': 'publish',
    'GET /v1/experiments/:id/assignments/:candidateId': 'read',
    'POST /v1/experiments/:id/assignments': 'publish',
    'GET /v1/experiments/:id/report': 'read',
    'POST /v1/experiments/:id/dry-run': 'operate',
  });

  it("refuses a redefinition with the planner's token (publish + read), which assigns", async () => {
    const patch = await svc.app.inject({
      method: 'PATCH',
      url: '/v1/experiments/any',
      headers: bearer(ROUTE_TEST_TOKENS.publish),
      payload: { status: 'stopped' },
    });
    expect(patch.statusCode).toBe(403);
  });

  it('refuses integers past their columns with a 400 naming the field', async () => {
    const create = (variants: unknown) =>
      svc.app.inject({
        method: 'POST',
        url: '/v1/experiments',
        headers: { ...bearer(ROUTE_TEST_TOKENS.operate), 'content-type': 'application/json' },
        payload: `{"experimentId":"bounds","variants":${String(variants)}}`,
      });
    for (const weight of ['2147483648', '9007199254740993', '1e400', '-1', '1.5']) {
      const response = await create(`[{"name":"A","weight":${weight}},{"name":"B","weight":1}]`);
      expect(response.statusCode, weight).toBe(400);
      expect(response.json().message, weight).toMatch(/weight|finite/);
    }
    expect((await create(JSON.stringify(fiftyFifty))).statusCode).toBe(201);
    const dryRun = await svc.app.inject({
      method: 'POST',
      url: '/v1/experiments/bounds/dry-run',
      headers: bearer(ROUTE_TEST_TOKENS.operate),
      payload: { n: 2 ** 53 + 2 },
    });
    expect(dryRun.statusCode).toBe(400);
    expect(dryRun.json().message).toMatch(/n/);
  });

  it('answers fuzzed input without a 5xx, and every 4xx with a reason', { timeout: 600_000 }, async () => {
    const id = { id: 'fuzz-exp' };
    const examples = {
      'POST /v1/experiments': [
        { body: { experimentId: 'fuzz-exp', variants: fiftyFifty, status: 'active', exclusionGroup: null } },
      ],
      'GET /v1/experiments/:id': [{ params: id }],
      'PATCH /v1/experiments/:id': [
        {
          params: id,
          body: {
            variants: [
              { name: 'A', weight: 2 },
              { name: 'B', weight: 1 },
            ],
          },
        },
      ],
      'PUT /v1/experiments/:id/assignments/:candidateId': [{ params: { ...id, candidateId: 'c1' } }],
      'GET /v1/experiments/:id/assignments/:candidateId': [{ params: { ...id, candidateId: 'c1' } }],
      'POST /v1/experiments/:id/assignments': [{ params: id, body: { candidateIds: ['c1', 'c2', 'c3'] } }],
      'GET /v1/experiments/:id/report': [{ params: id }],
      'POST /v1/experiments/:id/dry-run': [{ params: id, body: { n: 100 } }],
    };
    await expectFuzzSurvived(svc.app, {
      numRuns: 150,
      examples,
      pastValidation: {
        // 201, or 409 for the example's id once it exists: either way past validation, into the database.
        created: (route, status) =>
          route.method === 'POST' && route.url === '/v1/experiments' && (status === 201 || status === 409),
      },
    });
  });
});
