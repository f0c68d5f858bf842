/**
 * The sender's HTTP surface under attack (docs/attacks.md, "Paths and identity", "JSON bodies"), derived
 * from the routes it registers: every route's scope, every path spelling without a token, other
 * scopes' tokens, fuzzed input from each route's schema; and the long values that must work.
 */
import { generateKeyPairSync } from 'node:crypto';
import { bearer, expectFuzzSurvived, ROUTE_TEST_TOKENS, routeScopeTests, routesUnderTest } from '@outreach/testkit';
import { TEST_SNS_TOPIC_ARN } from './fixtures/feedback-fixtures.js';
import { describe, expect, inject, it } from 'vitest';
import { senderTestEnv } from './harness.js';

const infra = { kafkaBrokers: inject('kafkaBrokers'), databaseUrl: inject('databaseUrl') };
const svc = routesUnderTest(
  (env) => senderTestEnv(infra, { env }),
  () => ({
    // The feedback intakes on, so fuzzed bodies meet their parsers and signature checks, not a 404.
    SES_SNS_TOPIC_ARNS: TEST_SNS_TOPIC_ARN,
    SENDGRID_WEBHOOK_PUBLIC_KEY: generateKeyPairSync('ec', { namedCurve: 'prime256v1' })
      .publicKey.export({ type: 'spki', format: 'der' })
      .toString('base64'),
    MAILGUN_WEBHOOK_SIGNING_KEY: 'test-mailgun-signing-key-0123456789abcdef',
  }),
);

describe('sender routes', () => {
  routeScopeTests(svc, 'writes need operate, every read needs read, the DSN hook its own dsn', {
    'GET /v1/campaigns': 'read',
    'GET /v1/campaigns/:campaignId': 'read',
    'POST /v1/campaigns/:campaignId/pause': 'operate',
    'POST /v1/campaigns/:campaignId/resume': 'operate',
    'GET /v1/reports/duplicates': 'read',
    'GET /v1/sends/check': 'read',
    'GET /v1/sends': 'read',
    'GET /v1/sends/:sendId': 'read',
    'POST /v1/sends/:sendId/resolve': 'operate',
    'GET /v1/sending': 'read',
    'PUT /v1/sending': 'operate',
    'POST /v1/subject-parts/export': 'read',
    'POST /v1/subject-parts/erase': 'erase',
    'PUT /v1/suppressions/:email': 'operate',
    'GET /v1/suppressions/:email': 'read',
    'DELETE /v1/suppressions/:email': 'operate',
    // Anyone holding an email's link; the token authenticates (and a GET changes nothing).
    'GET /v1/unsubscribe/:token': 'public',
    'POST /v1/unsubscribe/:token': 'public',
    // Provider webhooks, authenticated by their signatures; the bounce mailbox hook holds a token.
    'POST /v1/feedback/ses': 'public',
    'POST /v1/feedback/sendgrid': 'public',
    'POST /v1/feedback/mailgun': 'public',
    'POST /v1/feedback/dsn': 'dsn',
  });

  it("refuses the issue's own request: no token, `%76` for `v`, and the address stays unsuppressed", async () => {
    const attack = await svc.app.inject({
      method: 'PUT',
      url: '/%761/suppressions/x%40example.com',
      payload: { reason: 'manual' },
    });
    expect(attack.statusCode).toBe(401);
    const lookup = await svc.app.inject({
      url: '/v1/suppressions/x%40example.com',
      headers: bearer(ROUTE_TEST_TOKENS.read),
    });
    expect(lookup.statusCode).toBe(404);
  });

  it('suppresses, finds and lifts a 254-character address', async () => {
    const address = `${'a'.repeat(64)}@${'b'.repeat(63)}.${'c'.repeat(63)}.${'d'.repeat(57)}.com`;
    expect(address).toHaveLength(254);
    const url = `/v1/suppressions/${encodeURIComponent(address)}`;
    const operate = bearer(ROUTE_TEST_TOKENS.operate);
    const put = await svc.app.inject({ method: 'PUT', url, headers: operate, payload: { reason: 'unsubscribe' } });
    expect(put.statusCode, put.body).toBe(200);
    expect((await svc.app.inject({ url, headers: bearer(ROUTE_TEST_TOKENS.read) })).json()).toMatchObject({
      suppressed: true,
      reason: 'unsubscribe',
    });
    expect((await svc.app.inject({ method: 'DELETE', url, headers: operate })).json()).toEqual({ suppressed: false });
    const tooLong = await svc.app.inject({
      method: 'PUT',
      url: `${url}x`,
      headers: operate,
      payload: { reason: 'manual' },
    });
    expect(tooLong.statusCode).toBe(400);
    expect(tooLong.json().message).toMatch(/254/);
  });

  it('answers fuzzed input without a 5xx, and every 4xx with a reason', { timeout: 600_000 }, async () => {
    // Valid requests the fuzzer mutates; in registration order (the GET finds what the PUT stored).
    const examples = {
      'PUT /v1/suppressions/:email': [{ params: { email: 'fuzz@example.com' }, body: { reason: 'manual', note: 'n' } }],
      'GET /v1/suppressions/:email': [{ params: { email: 'fuzz@example.com' } }],
      'POST /v1/campaigns/:campaignId/pause': [{ params: { campaignId: 'camp-fuzz' }, body: { reason: 'fuzzing' } }],
      'POST /v1/campaigns/:campaignId/resume': [{ params: { campaignId: 'camp-fuzz' } }],
      'GET /v1/campaigns': [{ query: { after: 'camp-a', limit: 10, paused: true } }],
      'GET /v1/sends/check': [
        { query: { campaignId: 'camp-fuzz', candidateId: 'c1', step: 'intro', email: 'c1@example.com' } },
      ],
      'GET /v1/sends': [{ query: { status: 'held', campaignId: 'camp-fuzz', limit: 10 } }],
      'PUT /v1/sending': [{ body: { paused: false, reason: 'fuzzing' } }],
    };
    await expectFuzzSurvived(svc.app, {
      numRuns: 150,
      examples,
      pastValidation: { suppressed: (route, status) => route.method === 'PUT' && status === 200 },
    });
  });
});
