import { Type } from '@sinclair/typebox';
import { Kafka, logLevel } from 'kafkajs';
import pg from 'pg';
import { afterEach, describe, expect, it } from 'vitest';
import { createLogger } from '../logger.js';
import { fuzzRoutes, probeRouteGuards } from '@outreach/testkit';
import type { ScopedTokens } from './auth.js';
import { AppError } from './errors.js';
import { buildHttpApp, MAX_BODY_BYTES } from './http.js';

const logger = createLogger({ name: 'http-test', level: 'silent' });

const tokens: ScopedTokens = {
  publish: ['publish-token'],
  operate: ['operate-token', 'operate-token-next'],
  read: ['read-token', 'all-scopes'],
  dsn: ['dsn-token'],
  erase: ['erase-token'],
};
const all = {
  publish: [...tokens.publish, 'all-scopes'],
  operate: [...tokens.operate, 'all-scopes'],
  read: tokens.read,
  dsn: [...tokens.dsn, 'all-scopes'],
  erase: [...tokens.erase, 'all-scopes'],
};
const bearer = (token: string) => ({ authorization: `Bearer ${token}` });

const apps: Array<Awaited<ReturnType<typeof buildHttpApp>>> = [];
afterEach(async () => {
  for (const app of apps.splice(0)) await app.close();
});

async function app(options: { apiTokens?: ScopedTokens; rateLimit?: { max: number; windowMs: number } } = {}) {
  const instance = await buildHttpApp({ name: 'probe', logger, apiTokens: options.apiTokens ?? all, ...options });
  apps.push(instance);
  await instance.register(
    async (v1) => {
      v1.post(
        '/things',
        {
          config: { scope: 'operate' },
          schema: {
            body: Type.Object(
              { name: Type.String({ minLength: 1, maxLength: 50 }), count: Type.Integer({ minimum: 0, maximum: 10 }) },
              { additionalProperties: false },
            ),
          },
        },
        async (request) => ({ created: (request.body as { name: string }).name }),
      );
      v1.put(
        '/suppressions/:email',
        {
          config: { scope: 'operate' },
          schema: { params: Type.Object({ email: Type.String({ maxLength: 254, pattern: '^[^\\s@]+@[^\\s@]+$' }) }) },
        },
        async (request) => ({ suppressed: (request.params as { email: string }).email.length }),
      );
      v1.post('/ingress', { config: { scope: 'publish' } }, async () => ({ accepted: true }));
      v1.get('/things', { config: { scope: 'read' } }, async () => ({ things: [] }));
      v1.get(
        '/list',
        {
          config: { scope: 'read' },
          schema: { querystring: Type.Object({ limit: Type.Integer({ minimum: 1, maximum: 100, default: 10 }) }) },
        },
        async (request) => ({ limit: (request.query as { limit: number }).limit }),
      );
      v1.get('/missing', { config: { scope: 'read' } }, async () => {
        throw new AppError('NOT_FOUND', 'no such thing', { id: 'x' });
      });
      v1.get('/boom', { config: { scope: 'read' } }, async () => {
        throw new Error('password=hunter2 leaked in an internal error');
      });
    },
    { prefix: '/v1' },
  );
  return instance;
}

/** POSTs a thing with a token that has every scope. */
const postThing = (http: Awaited<ReturnType<typeof app>>, payload: object) =>
  http.inject({ method: 'POST', url: '/v1/things', payload, headers: bearer('all-scopes') });

describe('access control', () => {
  it('refuses to register a route that declares no scope, so a new route cannot be forgotten', async () => {
    const instance = await buildHttpApp({ name: 'probe', logger });
    apps.push(instance);
    expect(() => instance.get('/v1/forgotten', async () => ({}))).toThrowError(
      /GET \/v1\/forgotten declares no access/,
    );
    expect(() =>
      instance.get('/v1/typo', { config: { scope: 'opearte' as 'operate' } }, async () => ({})),
    ).toThrowError(/declares no access/);
  });

  it('answers 401 without a valid token, 403 with another scope, and runs the handler with the right one', async () => {
    const http = await app();
    const post = (headers: Record<string, string>) =>
      http.inject({ method: 'POST', url: '/v1/things', payload: { name: 'a', count: 1 }, headers });
    const anonymous = await post({});
    expect(anonymous.statusCode).toBe(401);
    expect(anonymous.json()).toMatchObject({
      error: 'UNAUTHORIZED',
      message: expect.stringMatching(/missing bearer token/),
    });
    expect((await post(bearer('nope'))).json()).toMatchObject({
      error: 'UNAUTHORIZED',
      message: 'invalid bearer token',
    });
    const publisher = await post(bearer('publish-token'));
    expect(publisher.statusCode).toBe(403);
    expect(publisher.json()).toMatchObject({ error: 'FORBIDDEN', message: expect.stringMatching(/scope operate/) });
    expect((await post(bearer('read-token'))).statusCode).toBe(403);
    // Both tokens of a rotation work at once; a token listed in several scopes holds them all.
    expect((await post(bearer('operate-token'))).json()).toEqual({ created: 'a' });
    expect((await post(bearer('operate-token-next'))).json()).toEqual({ created: 'a' });
    expect((await post(bearer('all-scopes'))).statusCode).toBe(200);
    // Reads need the read scope too.
    expect((await http.inject({ url: '/v1/things' })).statusCode).toBe(401);
    expect((await http.inject({ url: '/v1/things', headers: bearer('operate-token') })).statusCode).toBe(403);
    expect((await http.inject({ url: '/v1/things', headers: bearer('read-token') })).statusCode).toBe(200);
  });

  it('refuses tokens that are nearly right, sent twice, or in another scheme', async () => {
    const http = await app();
    const cases = [
      '',
      'Bearer',
      'Bearer ',
      'Basic b3BlcmF0ZS10b2tlbjo=',
      'operate-token',
      'Bearer operate-toke',
      'Bearer operate-tokenX',
      'Bearer OPERATE-TOKEN',
      'Bearer operate-token, Bearer operate-token',
      'Bearer operate-token operate-token',
      'Bearer operate-token,operate-token',
      'Token operate-token',
    ];
    for (const authorization of cases) {
      const response = await http.inject({
        method: 'POST',
        url: '/v1/things',
        payload: { name: 'a', count: 1 },
        headers: { authorization },
      });
      expect(response.statusCode, authorization).toBe(401);
      expect(response.json().message, authorization).toMatch(/bearer|scheme/i);
    }
    const scheme = await http.inject({ method: 'POST', url: '/v1/things', headers: { authorization: 'Basic eDp5' } });
    expect(scheme.json().message).toMatch(/unsupported authorization scheme/);
    // The scheme is case-insensitive (RFC 9110), the token is not.
    expect(
      (
        await http.inject({
          method: 'POST',
          url: '/v1/things',
          payload: { name: 'a', count: 1 },
          headers: { authorization: 'bearer operate-token' },
        })
      ).statusCode,
    ).toBe(200);
  });

  it('names the missing variable when a scope has no tokens at all', async () => {
    const http = await app({ apiTokens: { publish: [], operate: [], read: ['read-token'], dsn: [], erase: [] } });
    const response = await http.inject({ method: 'POST', url: '/v1/ingress', headers: bearer('x') });
    expect(response.statusCode).toBe(401);
    expect(response.json().message).toMatch(/API_TOKENS_PUBLISH/);
  });

  it('decides on the matched route: no spelling of a protected path gets through without a token', async () => {
    const http = await app();
    const violations = await probeRouteGuards(http, {
      tokens: {
        publish: 'publish-token',
        operate: 'operate-token',
        read: 'read-token',
        dsn: 'dsn-token',
        erase: 'erase-token',
      },
    });
    expect(violations).toEqual([]);
  });

  it('leaves health and metrics open, and limits each token (or address) on its own', async () => {
    const http = await app({ rateLimit: { max: 3, windowMs: 60_000 } });
    const get = (headers: Record<string, string> = {}) => http.inject({ url: '/v1/things', headers });
    for (let i = 0; i < 3; i++) expect((await get(bearer('read-token'))).statusCode).toBe(200);
    const limited = await get(bearer('read-token'));
    expect(limited.statusCode).toBe(429);
    expect(limited.json()).toMatchObject({
      error: 'RATE_LIMITED',
      message: expect.stringMatching(/at most 3 requests per 60 s/),
    });
    expect(limited.headers['retry-after']).toBeDefined();
    // Another token has its own budget; made-up tokens share their address's budget.
    expect((await get(bearer('all-scopes'))).statusCode).toBe(200);
    for (let i = 0; i < 3; i++) expect((await get(bearer(`made-up-${i}`))).statusCode).toBe(401);
    expect((await get(bearer('made-up-4'))).statusCode).toBe(429);
    for (let i = 0; i < 10; i++) {
      expect((await http.inject({ url: '/health/live' })).statusCode).toBe(200);
      expect((await http.inject({ url: '/metrics' })).statusCode).toBe(200);
    }
  });
});

describe('buildHttpApp', () => {
  it('answers bad input with a 400 and a reason, coded errors with their status, and hides 5xx internals', async () => {
    const http = await app();
    const auth = bearer('all-scopes');
    const invalid = await postThing(http, { name: '', count: 1 });
    expect(invalid.statusCode).toBe(400);
    expect(invalid.json()).toMatchObject({ error: 'BAD_REQUEST', message: expect.stringMatching(/name/) });
    expect((await http.inject({ method: 'GET', url: '/v1/missing', headers: auth })).json()).toEqual({
      error: 'NOT_FOUND',
      message: 'no such thing',
      details: { id: 'x' },
    });
    const boom = await http.inject({
      method: 'GET',
      url: '/v1/boom',
      headers: { ...auth, 'x-correlation-id': 'corr-1' },
    });
    expect(boom.statusCode).toBe(500);
    expect(boom.body).not.toMatch(/hunter2/);
    expect(boom.json()).toEqual({ error: 'INTERNAL', message: 'internal error', correlationId: 'corr-1' });
  });

  it('never echoes the path (it may hold an address) to a caller without a token', async () => {
    const http = await app();
    const notFound = await http.inject({ url: '/nowhere/ada@example.com' });
    expect(notFound.statusCode).toBe(404);
    expect(notFound.json()).toEqual({ error: 'NOT_FOUND', message: 'no route for GET on this path' });
    const badEscape = await http.inject({ method: 'PUT', url: '/v1/suppressions/ada@example.com%zz' });
    expect(badEscape.statusCode).toBe(400);
    expect(badEscape.body).not.toMatch(/ada/);
  });

  it('takes a 254-character address as a path parameter', async () => {
    const http = await app();
    const address = `${'a'.repeat(64)}@${'b'.repeat(63)}.${'c'.repeat(63)}.${'d'.repeat(57)}.com`;
    expect(address).toHaveLength(254);
    const response = await http.inject({
      method: 'PUT',
      url: `/v1/suppressions/${encodeURIComponent(address)}`,
      headers: bearer('all-scopes'),
    });
    expect(response.json()).toEqual({ suppressed: 254 });
    const tooLong = await http.inject({
      method: 'PUT',
      url: `/v1/suppressions/a${encodeURIComponent(address)}`,
      headers: bearer('all-scopes'),
    });
    expect(tooLong.statusCode).toBe(400);
    expect(tooLong.json().message).toMatch(/254/);
  });

  it('refuses NUL characters and infinite numbers anywhere, bodies over the limit, and replaces an unusable correlation id', async () => {
    const http = await app();
    const auth = bearer('all-scopes');
    const nul = await postThing(http, { name: 'a\u0000', count: 1 });
    expect(nul.statusCode).toBe(400);
    expect(nul.json().message).toMatch(/body\/name contains a NUL/);
    const inPath = await http.inject({ method: 'PUT', url: '/v1/suppressions/a%00@example.com', headers: auth });
    expect(inPath.json().message).toMatch(/params\/email contains a NUL/);
    // Ajv coerces `1e400` to Infinity and lets it past `maximum`; PostgreSQL would answer with a 500.
    const infinite = await http.inject({ url: '/v1/list?limit=1e400', headers: auth });
    expect(infinite.statusCode).toBe(400);
    expect(infinite.json().message).toBe('querystring/limit is not a finite number');
    const inBody = await http.inject({
      method: 'POST',
      url: '/v1/things',
      headers: { ...auth, 'content-type': 'application/json' },
      payload: '{"name":"a","count":1e400}',
    });
    expect(inBody.statusCode).toBe(400);
    const large = await http.inject({
      method: 'POST',
      url: '/v1/things',
      headers: { ...auth, 'content-type': 'application/json' },
      payload: JSON.stringify({ name: 'x'.repeat(MAX_BODY_BYTES), count: 1 }),
    });
    expect(large.statusCode).toBe(413);
    expect(large.json().message).toMatch(/too large/);
    const odd = await http.inject({ url: '/v1/boom', headers: { ...auth, 'x-correlation-id': 'x'.repeat(5_000) } });
    expect(odd.json().correlationId).toMatch(/^[0-9a-f-]{36}$/);
  });

  it('survives fuzzing of its own routes: no 5xx but the one route built to fail', async () => {
    const http = await app();
    const violations = await fuzzRoutes(http, {
      headers: bearer('all-scopes'),
      numRuns: 60,
      skip: (route) => route.url === '/v1/boom',
    });
    expect(violations).toEqual([]);
  }, 60_000);

  it('fuzzing finds a planted bug: an unbounded integer that only fails past 2^53', async () => {
    const http = await buildHttpApp({ name: 'probe', logger, apiTokens: all });
    apps.push(http);
    http.post(
      '/v1/fragile',
      { config: { scope: 'operate' }, schema: { body: Type.Object({ delayMs: Type.Integer({ minimum: 1 }) }) } },
      async (request) => {
        if ((request.body as { delayMs: number }).delayMs > Number.MAX_SAFE_INTEGER) throw new Error('long overflow');
        return { ok: true };
      },
    );
    const violations = await fuzzRoutes(http, { headers: bearer('all-scopes'), numRuns: 200, seed: 1 });
    expect(violations).toEqual([
      expect.objectContaining({ status: 500, request: expect.stringMatching(/^\/v1\/fragile/) }),
    ]);
  }, 60_000);

  it('serves liveness, readiness from registered checks, and Prometheus metrics', async () => {
    const http = await app();
    expect((await http.inject({ method: 'GET', url: '/health/live' })).json()).toEqual({
      status: 'ok',
      service: 'probe',
    });
    http.readiness.set('database', async () => {
      throw new Error('connection refused');
    });
    const ready = await http.inject({ method: 'GET', url: '/health/ready' });
    expect(ready.statusCode).toBe(503);
    expect(ready.json()).toEqual({ status: 'not_ready', service: 'probe', checks: { database: 'unavailable' } });
    const metrics = await http.inject({ method: 'GET', url: '/metrics' });
    expect(metrics.headers['content-type']).toMatch(/text\/plain/);
    expect(metrics.body).toMatch(/nodejs_heap_size_total_bytes\{service="probe"\}/);
  });

  it('answers 503 with Retry-After, not 500, when the database or the broker is unreachable', async () => {
    // Real clients against a closed port: what a request meets while PostgreSQL or Kafka is down.
    const pool = new pg.Pool({
      connectionString: 'postgres://nobody@127.0.0.1:1/none',
      connectionTimeoutMillis: 2_000,
    });
    const producer = new Kafka({
      clientId: 'probe',
      brokers: ['127.0.0.1:1'],
      connectionTimeout: 300,
      retry: { retries: 0 },
      logLevel: logLevel.NOTHING,
    }).producer();
    const http = await buildHttpApp({ name: 'probe', logger, apiTokens: all });
    apps.push(http);
    http.get('/db', { config: { scope: 'public' } }, async () => (await pool.query('SELECT 1')).rows);
    http.get('/kafka', { config: { scope: 'public' } }, async () => {
      await producer.connect();
      return 'connected';
    });
    try {
      for (const url of ['/db', '/kafka']) {
        const response = await http.inject({ url });
        expect(response.statusCode, url).toBe(503);
        expect(response.headers['retry-after']).toBe('5');
        expect(response.json()).toMatchObject({ error: 'UNAVAILABLE' });
      }
    } finally {
      await pool.end();
    }
  });
});
