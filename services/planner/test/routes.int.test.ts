/**
 * The planner's HTTP surface under attack (docs/attacks.md, "Paths and identity", "JSON bodies"): every
 * route's scope, every path spelling without a token, fuzzed input from the ingress schema, and the
 * known 5xx cases: a delay past 2^53, a body over Kafka's message limit, sendAt at the ends of a
 * date-time; the largest body that passes does reach the topic, and a long conversation id is found again.
 * The conversation-event ingress is attacked the same way (its behaviour: conversation-events.int.test.ts).
 */
import { readFileSync } from 'node:fs';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
import { MAX_BODY_BYTES } from '@outreach/shared';
import { eventCodec, type OutreachRequested } from '@outreach/contracts';
import {
  bearer,
  expectFuzzSurvived,
  rawRequest,
  readTopic,
  ROUTE_TEST_TOKENS,
  routeScopeTests,
  routesUnderTest,
  waitFor,
} from '@outreach/testkit';
import { createServer } from 'node:http';
import { afterAll, describe, expect, it } from 'vitest';
import { plannerTestEnv } from './harness.js';

const publish = bearer(ROUTE_TEST_TOKENS.publish);
const read = bearer(ROUTE_TEST_TOKENS.read);
/**
 * The peers' side of the data-subject protocol, over real HTTP, knowing no one (their own parts are
 * tested in test/subjects.int.test.ts): the planner's subject routes are fuzzed, not its peers.
 */
async function subjectPeers(): Promise<string> {
  const server = createServer((request, response) => {
    // Anything else (the experiment service's own routes) as if nothing listened.
    if (!request.url?.startsWith('/v1/subject-parts/')) {
      request.socket.destroy();
      return;
    }
    request.resume();
    request.on('end', () => {
      response.setHeader('content-type', 'application/json');
      response.end(
        JSON.stringify(
          request.url?.endsWith('/erase')
            ? { status: 'not_found', rows: {}, candidateKeys: [] }
            : { tables: {}, next: null },
        ),
      );
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  afterAll(() => new Promise<void>((resolve) => server.close(() => resolve())));
  return `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
}

const svc = routesUnderTest(plannerTestEnv, async () => {
  const peers = await subjectPeers();
  return {
    // Only the subject protocol answers there: a request naming an experiment is accepted
    // unchecked, never a 5xx.
    EXPERIMENT_URL: peers,
    EXPERIMENT_TIMEOUT_MS: '500',
    SENDER_URL: peers,
    LIVENESS_URL: peers,
  };
});

const base = {
  requestId: 'r-base',
  campaignId: 'camp-routes',
  candidateId: 'cand-1',
  email: 'cand-1@example.com',
  step: 'intro',
  contents: [{ subject: 'Hi', body: 'Body' }],
};
const post = (payload: unknown, headers: Record<string, string> = publish) =>
  svc.app.inject({
    method: 'POST',
    url: '/v1/outreach-requests',
    headers,
    payload: payload as Record<string, unknown>,
  });

describe('planner routes', () => {
  routeScopeTests(svc, 'ingress needs publish, reads need read', {
    'POST /v1/conversations/:conversationId/events': 'publish',
    'POST /v1/outreach-requests': 'publish',
    'GET /v1/subjects/:candidateId': 'read',
    'POST /v1/subjects/search': 'read',
    'POST /v1/subjects/:candidateId/erase': 'erase',
    'POST /v1/subjects/erase': 'erase',
    'GET /v1/outreach-requests/:requestId': 'read',
    'GET /v1/steps/summary': 'read',
    'GET /v1/conversations/:conversationId/steps': 'read',
    'POST /v1/steps/waiting': 'read',
  });

  it("counts what waits behind a send: the candidate's other scheduled steps and the follow-ups of sequences waiting on that step", async () => {
    const pg = (svc.app as unknown as { pg: { query(sql: string, params?: unknown[]): Promise<unknown> } }).pg;
    await pg.query(
      `INSERT INTO scheduled_steps (campaign_id, candidate_key, step, conversation_id, send_id, send, due_at, status)
       VALUES ('camp-wait', 'k1', 'intro', 'c1', gen_random_uuid(), '{}', now(), 'emitted'),
              ('camp-wait', 'k1', 'call', 'c1', gen_random_uuid(), '{}', now() + interval '1 day', 'scheduled'),
              ('camp-wait', 'k1', 'later', 'c1', gen_random_uuid(), '{}', now() + interval '2 day', 'scheduled'),
              ('camp-wait', 'k1', 'gone', 'c1', gen_random_uuid(), '{}', now(), 'cancelled')`,
    );
    await pg.query(
      `INSERT INTO sequences (campaign_id, candidate_key, head_step, conversation_id, template, follow_ups, previous_step, next_index, status)
       VALUES ('camp-wait', 'k1', 'intro', 'c1', '{}', '[{}, {}, {}]', 'intro', 0, 'active'),
              ('camp-wait', 'k1', 'other', 'c1', '{}', '[{}, {}]', 'intro', 1, 'active'),
              ('camp-wait', 'k1', 'done', 'c1', '{}', '[{}]', 'intro', 0, 'stopped')`,
    );
    const answer = await svc.app.inject({
      method: 'POST',
      url: '/v1/steps/waiting',
      headers: bearer(ROUTE_TEST_TOKENS.read),
      payload: {
        sends: [
          { campaignId: 'camp-wait', candidateKey: 'k1', step: 'intro' },
          { campaignId: 'camp-wait', candidateKey: 'nobody', step: 'intro' },
        ],
      },
    });
    expect(answer.statusCode, answer.body).toBe(200);
    expect(answer.json()).toEqual({
      waiting: [
        { campaignId: 'camp-wait', candidateKey: 'k1', step: 'intro', scheduled: 2, followUps: 4 },
        { campaignId: 'camp-wait', candidateKey: 'nobody', step: 'intro', scheduled: 0, followUps: 0 },
      ],
    });
    const tooMany = await svc.app.inject({
      method: 'POST',
      url: '/v1/steps/waiting',
      headers: bearer(ROUTE_TEST_TOKENS.read),
      payload: { sends: Array.from({ length: 501 }, () => ({ campaignId: 'c', candidateKey: 'k', step: 's' })) },
    });
    expect(tooMany.statusCode).toBe(400);
  });

  it('refuses the wrong scope: an operator cannot send email, a publisher cannot read conversations', async () => {
    expect((await post(base, bearer(ROUTE_TEST_TOKENS.operate))).statusCode).toBe(403);
    expect((await svc.app.inject({ url: '/v1/steps/summary', headers: publish })).statusCode).toBe(403);
  });

  it('serves the API document committed in docs/api (npm run specs:gen) at /docs/json, and the UI at /docs', async () => {
    // Before the fuzzer, which spends the docs' per-address rate limit.
    const live = await svc.app.inject({ url: '/docs/json' });
    expect(live.statusCode).toBe(200);
    const committed = readFileSync(join(import.meta.dirname, '../../../docs/api/planner.openapi.json'), 'utf8');
    expect(live.json()).toEqual(JSON.parse(committed));
    const ui = await svc.app.inject({ url: '/docs' });
    expect([ui.statusCode, ui.headers['content-type']]).toEqual([200, 'text/html; charset=utf-8']);
  });

  it('refuses a delay past 2^53 and past a year with a 400 naming the field, not an Avro 500', async () => {
    const followUp = (delayMs: string) =>
      svc.app.inject({
        method: 'POST',
        url: '/v1/outreach-requests',
        headers: { ...publish, 'content-type': 'application/json' },
        payload: JSON.stringify(base).replace(
          /}$/,
          `,"followUps":[{"step":"f1","delayMs":${delayMs},"contents":[{"subject":"s","body":"b"}]}]}`,
        ),
      });
    for (const delayMs of ['9007199254740993', '18446744073709551616', '1e400', String(367 * 24 * 3_600_000)]) {
      const response = await followUp(delayMs);
      expect(response.statusCode, delayMs).toBe(400);
      expect(response.json().message, delayMs).toMatch(/delayMs|finite/);
    }
    expect((await followUp(String(30 * 24 * 3_600_000))).statusCode).toBe(202);
  });

  it('refuses a body over the limit with a 413, and the largest body it takes reaches Kafka', async () => {
    const big = { ...base, requestId: 'r-big', contents: [{ subject: 'Hi', body: 'x'.repeat(1_500_000) }] };
    const tooLarge = await post(big);
    expect(tooLarge.statusCode).toBe(413);
    expect(tooLarge.json()).toMatchObject({
      error: 'FST_ERR_CTP_BODY_TOO_LARGE',
      message: expect.stringMatching(/too large/),
    });

    // Just under the limit: ten follow-ups of 95 000 bytes each, every byte of it in the event.
    const followUps = Array.from({ length: 10 }, (_, i) => ({
      step: `f${i}`,
      delayMs: 86_400_000 * (i + 1),
      contents: [{ subject: 's', body: 'é'.repeat(47_500) }],
    }));
    const largest = { ...base, requestId: 'r-largest', candidateId: 'cand-largest', followUps };
    let text = JSON.stringify(largest);
    const pad = MAX_BODY_BYTES - Buffer.byteLength(text) - 10;
    largest.contents = [{ subject: 'Hi', body: `Body${'y'.repeat(Math.min(pad, 90_000))}` }];
    text = JSON.stringify(largest);
    expect(Buffer.byteLength(text)).toBeGreaterThan(MAX_BODY_BYTES - 20_000);
    expect(Buffer.byteLength(text)).toBeLessThanOrEqual(MAX_BODY_BYTES);
    const accepted = await svc.app.inject({
      method: 'POST',
      url: '/v1/outreach-requests',
      headers: { ...publish, 'content-type': 'application/json' },
      payload: text,
    });
    expect(accepted.statusCode, accepted.body).toBe(202);
    const messages = await readTopic(svc.t.kafka, svc.t.topic('outreachRequested'), (m) =>
      m.some((message) => (eventCodec.decode(message.value as Buffer) as OutreachRequested).requestId === 'r-largest'),
    );
    expect(messages.length).toBeGreaterThan(0);
  });

  it('takes sendAt at the ends of what a date-time holds and the longest delays without a 5xx, and stays live', async () => {
    const DAY_AND_YEAR = 366 * 24 * 60 * 60 * 1000;
    const followUps = Array.from({ length: 9 }, (_, i) => ({
      step: `f${i}`,
      delayMs: DAY_AND_YEAR,
      contents: [{ subject: `s${i}`, body: 'b' }],
    }));
    for (const sendAt of [
      '9999-12-31T23:59:59.999Z',
      '0001-01-01T00:00:00Z',
      '1969-12-31T23:59:59Z',
      '2024-02-30T00:00:00Z',
    ]) {
      const r = await post({ ...base, requestId: `when-${sendAt}`, candidateId: `when-${sendAt}`, sendAt, followUps });
      expect(r.statusCode, `${sendAt}: ${r.body}`).toBeLessThan(500);
      if (r.statusCode >= 400) expect(r.json(), sendAt).toMatchObject({ message: expect.any(String) });
    }
    // The consumer took the year-9999 request in (its step is scheduled) without dying.
    const url = `/v1/conversations/${encodeURIComponent('camp-routes:when-9999-12-31T23:59:59.999Z')}/steps`;
    await waitFor(
      async () => {
        const r = await svc.app.inject({ url, headers: read });
        return r.statusCode === 200 && (r.json() as { steps: unknown[] }).steps.length > 0;
      },
      { timeoutMs: 30_000, description: 'the year-9999 request planned' },
    );
    expect((await svc.app.inject({ url: '/health/live' })).statusCode).toBe(200);
  });

  it('finds the steps of a conversation with a long id again', async () => {
    const conversationId = `conv-${'c'.repeat(1_019)}`;
    expect(conversationId).toHaveLength(1_024);
    // A step due later is what the planner schedules (and lists) per conversation.
    const sendAt = new Date(Date.now() + 86_400_000).toISOString();
    const accepted = await post({ ...base, requestId: 'r-long', candidateId: 'cand-long', conversationId, sendAt });
    expect(accepted.statusCode, accepted.body).toBe(202);
    const url = `/v1/conversations/${encodeURIComponent(conversationId)}/steps`;
    await waitFor(async () => (await svc.app.inject({ url, headers: read })).json().steps.length > 0, {
      timeoutMs: 30_000,
      description: 'the long conversation planned',
    });
    expect((await post({ ...base, requestId: 'r-longer', conversationId: `${conversationId}x` })).statusCode).toBe(400);
  });

  it('GET /v1/outreach-requests/:requestId under attack: spellings of the id, traversal, limits, tokens', async () => {
    // Ids a publisher may really use: a slash, a space, non-ASCII; each is found as given. A dot
    // segment (`.`, `..`) is refused: a URL client collapses it, so it could never be looked up.
    const ids = ['r-status', 'ats/7731 b', 'Zürich-1'];
    for (const requestId of ['..', '.']) {
      const refused = await post({ ...base, requestId, candidateId: 'cand-dots', sendAt: '2099-01-01T00:00:00Z' });
      expect([refused.statusCode, refused.json().message]).toEqual([
        400,
        expect.stringMatching(/requestId must not be "\." or "\.\."/),
      ]);
    }
    for (const requestId of ids) {
      const posted = await post({
        ...base,
        requestId,
        candidateId: `cand-${requestId}`,
        sendAt: '2099-01-01T00:00:00Z',
      });
      expect(posted.statusCode, posted.body).toBe(202);
    }
    const get = (target: string, headers: Record<string, string> = read) => svc.app.inject({ url: target, headers });
    await waitFor(
      async () =>
        (await svc.t.query(`SELECT 1 FROM requests WHERE request_id = ANY($1) AND status = 'planned'`, [ids]))
          .length === ids.length,
      { timeoutMs: 30_000, description: 'the three requests planned' },
    );
    const found = async (target: string) => {
      const response = await get(target);
      return [response.statusCode, response.json().requestId ?? response.json().message];
    };
    // Percent-encoded: every letter, the slash and the space; upper-case escapes. Decoded once, not twice.
    expect(await found('/v1/outreach-requests/%72%2D%73%74%61%74%75%73')).toEqual([200, 'r-status']);
    expect(await found('/v1/outreach-requests/ats%2F7731%20b')).toEqual([200, 'ats/7731 b']);
    expect(await found('/v1/outreach-requests/Z%C3%BCrich-1')).toEqual([200, 'Zürich-1']);
    expect((await get('/v1/outreach-requests/r%252Dstatus')).statusCode).toBe(404);
    // A dot-dot id sent as is (a client that keeps `%2E%2E`) is an id no request can have: 400 naming
    // the field; a WHATWG URL client, like the inject one, removes it as a dot segment first. Never
    // a step up the path to another route.
    if (!svc.app.server.listening) await svc.app.listen({ host: '127.0.0.1', port: 0 });
    const port = (svc.app.server.address() as AddressInfo).port;
    const dots = await rawRequest(port, 'GET', '/v1/outreach-requests/%2E%2E', read);
    expect([dots.status, JSON.parse(dots.body).message]).toEqual([
      400,
      expect.stringMatching(/requestId must not be "\." or "\.\."/),
    ]);
    const normalized = await get('/v1/outreach-requests/%2E%2E');
    expect(normalized.statusCode).not.toBe(200);
    const traversal = await get('/v1/outreach-requests/%2E%2E%2Fsteps%2Fsummary');
    expect([traversal.statusCode, traversal.json().error]).toEqual([404, 'NOT_FOUND']);
    expect(traversal.json()).not.toHaveProperty('steps');
    // Unknown: 404 with a reason that does not echo the id.
    const unknown = await get('/v1/outreach-requests/no-such-request-42');
    expect(unknown.statusCode).toBe(404);
    expect(unknown.json().message).toMatch(/no outreach request with this requestId/);
    expect(unknown.body).not.toContain('no-such-request-42');
    // Ids no request can have: 400 naming the field, never the value.
    for (const [target, reason] of [
      ['/v1/outreach-requests/ada%40example.com', /requestId must not contain an at-sign/],
      ['/v1/outreach-requests/ada%EF%BC%A0example.com', /requestId must not contain an at-sign/],
      ['/v1/outreach-requests/r%0A1', /requestId contains line breaks or control characters/],
      ['/v1/outreach-requests/%20%20', /requestId is missing or empty/],
      [`/v1/outreach-requests/${'r'.repeat(257)}`, /requestId|256/],
    ] as const) {
      const response = await get(target);
      expect([response.statusCode, response.json().message], target).toEqual([400, expect.stringMatching(reason)]);
      expect(response.body, target).not.toContain('ada');
    }
    expect((await get(`/v1/outreach-requests/${'r'.repeat(5_000)}`)).statusCode).toBe(414);
    expect((await get('/v1/outreach-requests/%E0%A4%A')).statusCode).toBe(400);
    // Tokens: none, a made-up one, a publisher's (publish only), an operator's: never the status.
    expect((await get('/v1/outreach-requests/r-status', {})).statusCode).toBe(401);
    expect((await get('/v1/outreach-requests/r-status', { authorization: 'Bearer made-up' })).statusCode).toBe(401);
    expect((await get('/v1/outreach-requests/r-status', { authorization: 'Basic cjpz' })).statusCode).toBe(401);
    expect((await get('/v1/outreach-requests/r-status', publish)).statusCode).toBe(403);
    const operator = bearer(ROUTE_TEST_TOKENS.operate);
    expect((await get('/v1/outreach-requests/r-status', operator)).statusCode).toBe(403);
    // Other methods on the route are not routes.
    expect([404, 405]).toContain(
      (await svc.app.inject({ method: 'DELETE', url: '/v1/outreach-requests/r-status', headers: read })).statusCode,
    );
  });

  it('answers fuzzed input without a 5xx, and every 4xx with a reason', { timeout: 600_000 }, async () => {
    const examples = {
      'POST /v1/outreach-requests': [
        {
          body: {
            ...base,
            requestId: 'r-fuzz',
            experimentId: null,
            conversationId: 'conv-fuzz',
            sendAt: '2030-01-01T00:00:00Z',
            followUps: [
              { step: 'f1', delayMs: 86_400_000, contents: [{ variant: null, subject: 'Again', body: 'Still?' }] },
            ],
          },
        },
      ],
      'GET /v1/conversations/:conversationId/steps': [{ params: { conversationId: 'camp-routes:cand-1' } }],
      'POST /v1/steps/waiting': [
        { body: { sends: [{ campaignId: 'camp-routes', candidateKey: 'cand-1', step: 'intro' }] } },
      ],
      'GET /v1/outreach-requests/:requestId': [{ params: { requestId: 'r-base' } }],
      'POST /v1/conversations/:conversationId/events': [
        {
          params: { conversationId: 'camp-routes:cand-1' },
          body: { type: 'MessageReceived', campaignId: 'camp-routes', candidateKey: 'cand-1', messageId: 'm-fuzz' },
        },
        {
          params: { conversationId: 'camp-routes:cand-1' },
          body: { type: 'StepCompleted', campaignId: 'camp-routes', candidateKey: 'cand-1', stepId: 'call' },
        },
        {
          params: { conversationId: 'camp-routes:cand-2' },
          body: {
            type: 'ConversationClosed',
            eventId: '00000000-0000-4000-8000-00000000f022',
            campaignId: 'camp-routes',
            candidateKey: 'cand-2',
            reason: 'hired',
          },
        },
      ],
    };
    await expectFuzzSurvived(svc.app, {
      numRuns: 200,
      examples,
      pastValidation: {
        'requests accepted': (route, status) => route.url === '/v1/outreach-requests' && status === 202,
        'events accepted': (route, status) =>
          route.url === '/v1/conversations/:conversationId/events' && status === 202,
      },
    });
  });
});
