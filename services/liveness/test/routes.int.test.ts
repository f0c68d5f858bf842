/**
 * The liveness service's HTTP surface under attack (docs/attacks.md, "Paths and identity", "JSON
 * bodies"): every route's scope, every path spelling without a token, fuzzed input from each
 * route's schema, graces past what PostgreSQL holds, forged cursors, and a long conversation id.
 */
import { randomUUID } from 'node:crypto';
import type { MessageReceived } from '@outreach/contracts';
import {
  bearer,
  expectFuzzSurvived,
  ownService,
  ROUTE_TEST_TOKENS,
  routeScopeTests,
  routesUnderTest,
  serviceTestEnv,
  waitFor,
} from '@outreach/testkit';
import { describe, expect, inject, it } from 'vitest';
import { buildApp, migrationsDir } from '../src/app.js';
import { ConfigSchema } from '../src/config.js';

const infra = { kafkaBrokers: inject('kafkaBrokers'), databaseUrl: inject('databaseUrl') };
const read = bearer(ROUTE_TEST_TOKENS.read);
const svc = routesUnderTest((env) =>
  serviceTestEnv(
    ownService(import.meta.dirname, { name: 'liveness', configSchema: ConfigSchema, buildApp, migrationsDir }),
    infra,
    { env },
  ),
);

const graces = (campaignId: string, body: string) =>
  svc.app.inject({
    method: 'PUT',
    url: `/v1/campaigns/${campaignId}/graces`,
    headers: { ...bearer(ROUTE_TEST_TOKENS.operate), 'content-type': 'application/json' },
    payload: body,
  });

describe('liveness routes', () => {
  routeScopeTests(svc, 'graces need operate, reads need read', {
    'GET /v1/conversations/stalled': 'read',
    'POST /v1/subject-parts/export': 'read',
    'POST /v1/subject-parts/erase': 'erase',
    'GET /v1/conversations/:id': 'read',
    'GET /v1/campaigns/:campaignId/graces': 'read',
    'PUT /v1/campaigns/:campaignId/graces': 'operate',
  });

  it('refuses a grace past the bigint range, past 2^53 and past a year with a 400, not a database 500', async () => {
    for (const inboundMs of ['9223372036854775808', '9007199254740993', '1e400', String(366 * 86_400_000)]) {
      const response = await graces('camp-g', `{"inboundMs":${inboundMs},"outboundMs":60000,"overdueMs":0}`);
      expect(response.statusCode, inboundMs).toBe(400);
      expect(response.json().message, inboundMs).toMatch(/inboundMs|finite/);
    }
    const year = String(365 * 86_400_000);
    const ok = await graces('camp-g', `{"inboundMs":${year},"outboundMs":${year},"overdueMs":${year}}`);
    expect(ok.statusCode, ok.body).toBe(200);
  });

  it('refuses cursors it never wrote: dates PostgreSQL cannot hold, ids no row has', async () => {
    const cursor = (value: unknown) => Buffer.from(JSON.stringify(value)).toString('base64url');
    for (const after of [
      cursor(['+275760-09-13T00:00:00.000Z', 'x']),
      cursor(['-271821-04-20T00:00:00.000Z', 'x']),
      cursor(['2024-01-01T00:00:00Z', 'x']),
      cursor(['2024-01-01T00:00:00.000Z', 'x\u0000']),
      cursor(['2024-01-01T00:00:00.000Z', 42]),
      cursor({ flaggedAt: 1 }),
      cursor(7),
      'not base64 at all',
    ]) {
      const response = await svc.app.inject({
        url: `/v1/conversations/stalled?after=${encodeURIComponent(after)}`,
        headers: read,
      });
      expect(response.statusCode, after).toBe(400);
      expect(response.json().message).toMatch(/cursor/);
    }
    const fine = cursor(['2024-01-01T00:00:00.000Z', 'camp:x']);
    expect((await svc.app.inject({ url: `/v1/conversations/stalled?after=${fine}`, headers: read })).statusCode).toBe(
      200,
    );
  });

  it('finds a conversation with a long id', async () => {
    const conversationId = `camp-long:${'c'.repeat(2_000)}`;
    const received: MessageReceived = {
      type: 'MessageReceived',
      eventId: randomUUID(),
      occurredAt: Date.now(),
      producer: 'agent',
      correlationId: 'corr-long',
      causationId: null,
      conversationId,
      campaignId: 'camp-long',
      candidateKey: 'c'.repeat(2_000),
      messageId: null,
    };
    await svc.t.publish('conversationEvents', [received]);
    const url = `/v1/conversations/${encodeURIComponent(conversationId)}`;
    await waitFor(async () => (await svc.app.inject({ url, headers: read })).statusCode === 200, {
      timeoutMs: 30_000,
      description: 'the long conversation projected',
    });
    expect((await svc.app.inject({ url, headers: read })).json()).toMatchObject({ conversationId });
  });

  it('answers fuzzed input without a 5xx, and every 4xx with a reason', { timeout: 600_000 }, async () => {
    const campaign = { campaignId: 'camp-fuzz' };
    const examples = {
      'PUT /v1/campaigns/:campaignId/graces': [
        { params: campaign, body: { inboundMs: 60_000, outboundMs: 3_600_000, overdueMs: 0 } },
      ],
      'GET /v1/campaigns/:campaignId/graces': [{ params: campaign }],
      'GET /v1/conversations/stalled': [{ query: { campaignId: 'camp-fuzz', reason: 'no_next_step', limit: 10 } }],
    };
    await expectFuzzSurvived(svc.app, {
      numRuns: 200,
      examples,
      pastValidation: { stored: (route, status) => route.method === 'PUT' && status === 200 },
    });
  });
});
