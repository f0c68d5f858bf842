import { Type } from '@sinclair/typebox';
import { describe, expect, it } from 'vitest';
import { createLogger } from '../logger.js';
import { AppError } from './errors.js';
import { buildHttpApp } from './http.js';

const logger = createLogger({ name: 'http-test', level: 'silent' });

async function app(apiTokens: string[] = ['s3cret', 'other-token']) {
  const instance = await buildHttpApp({ name: 'probe', logger, apiTokens });
  instance.post(
    '/v1/things',
    { schema: { body: Type.Object({ name: Type.String({ minLength: 1 }) }) } },
    async (request) => ({
      created: (request.body as { name: string }).name,
    }),
  );
  instance.get('/v1/things', async () => ({ things: [] }));
  instance.get('/v1/missing', async () => {
    throw new AppError('NOT_FOUND', 'no such thing', { id: 'x' });
  });
  instance.get('/v1/boom', async () => {
    throw new Error('password=hunter2 leaked in an internal error');
  });
  return instance;
}

describe('buildHttpApp', () => {
  it('requires a bearer token on mutating /v1 routes, and not on reads', async () => {
    const http = await app();
    expect((await http.inject({ method: 'GET', url: '/v1/things' })).statusCode).toBe(200);
    const anonymous = await http.inject({ method: 'POST', url: '/v1/things', payload: { name: 'a' } });
    expect(anonymous.statusCode).toBe(401);
    expect(anonymous.json()).toMatchObject({
      error: 'UNAUTHORIZED',
      message: expect.stringMatching(/missing bearer token/),
    });
    const wrong = await http.inject({
      method: 'POST',
      url: '/v1/things',
      payload: { name: 'a' },
      headers: { authorization: 'Bearer nope' },
    });
    expect(wrong.json()).toMatchObject({ error: 'UNAUTHORIZED', message: 'invalid bearer token' });
    const ok = await http.inject({
      method: 'POST',
      url: '/v1/things',
      payload: { name: 'a' },
      headers: { authorization: 'Bearer other-token' },
    });
    expect(ok.statusCode).toBe(200);
    expect(ok.json()).toEqual({ created: 'a' });
  });

  it('refuses mutating routes when no tokens are configured', async () => {
    const http = await app([]);
    const response = await http.inject({
      method: 'POST',
      url: '/v1/things',
      payload: { name: 'a' },
      headers: { authorization: 'Bearer x' },
    });
    expect(response.statusCode).toBe(401);
    expect(response.json().message).toMatch(/API_TOKENS/);
  });

  it('answers bad input with a 400 and a reason, coded errors with their status, and hides 5xx internals', async () => {
    const http = await app();
    const auth = { authorization: 'Bearer s3cret' };
    const invalid = await http.inject({ method: 'POST', url: '/v1/things', payload: { name: '' }, headers: auth });
    expect(invalid.statusCode).toBe(400);
    expect(invalid.json()).toMatchObject({ error: 'BAD_REQUEST', message: expect.stringMatching(/name/) });
    expect((await http.inject({ method: 'GET', url: '/v1/missing' })).json()).toEqual({
      error: 'NOT_FOUND',
      message: 'no such thing',
      details: { id: 'x' },
    });
    const boom = await http.inject({ method: 'GET', url: '/v1/boom', headers: { 'x-correlation-id': 'corr-1' } });
    expect(boom.statusCode).toBe(500);
    expect(boom.body).not.toMatch(/hunter2/);
    expect(boom.json()).toEqual({ error: 'INTERNAL', message: 'internal error', correlationId: 'corr-1' });
    expect((await http.inject({ method: 'GET', url: '/nowhere' })).statusCode).toBe(404);
  });

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
    expect(ready.json()).toEqual({ status: 'not_ready', service: 'probe', checks: { database: 'connection refused' } });
    const metrics = await http.inject({ method: 'GET', url: '/metrics' });
    expect(metrics.headers['content-type']).toMatch(/text\/plain/);
    expect(metrics.body).toMatch(/nodejs_heap_size_total_bytes\{service="probe"\}/);
  });
});
