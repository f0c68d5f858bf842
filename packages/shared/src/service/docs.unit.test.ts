import SwaggerParser from '@apidevtools/swagger-parser';
import { Type } from '@sinclair/typebox';
import type { FastifyInstance } from 'fastify';
import { afterEach, describe, expect, it } from 'vitest';
import { createLogger } from '../logger.js';
import { scopeTable } from '@outreach/testkit';
import { scopePluginRoutes } from './auth.js';
import { openApiDocument } from './docs.js';
import { buildHttpApp } from './http.js';

const logger = createLogger({ name: 'docs-test', level: 'silent' });
const apps: FastifyInstance[] = [];
afterEach(async () => {
  for (const app of apps.splice(0)) await app.close();
});

type Operation = { 'x-scope': string; security: unknown[]; responses: Record<string, unknown>; requestBody?: unknown };
type Document = { openapi: string; paths: Record<string, Record<string, Operation>> };

async function app(): Promise<FastifyInstance> {
  const instance = await buildHttpApp({
    name: 'probe',
    logger,
    apiTokens: { publish: ['p'], operate: ['o'], read: ['r'], dsn: [], erase: [] },
  });
  apps.push(instance);
  await instance.register(
    async (v1) => {
      v1.post(
        '/things',
        {
          config: { scope: 'publish' },
          schema: { body: Type.Object({ name: Type.String({ maxLength: 5 }) }, { additionalProperties: false }) },
        },
        async () => ({ ok: true }),
      );
      v1.get('/things/:id', { config: { scope: 'read' } }, async () => ({ id: 1 }));
    },
    { prefix: '/v1' },
  );
  return instance;
}

describe('API docs', () => {
  it('serves the routes as OpenAPI 3.1 at /docs/json and Swagger UI at /docs, without a token', async () => {
    const instance = await app();
    const json = await instance.inject({ url: '/docs/json' });
    expect(json.statusCode).toBe(200);
    const document = json.json() as Document;
    expect(document.openapi).toBe('3.1.0');
    await expect(SwaggerParser.validate(structuredClone(document) as never)).resolves.toBeDefined();
    expect(Object.keys(document.paths)).toEqual([
      '/health/live',
      '/health/ready',
      '/metrics',
      '/v1/things',
      '/v1/things/{id}',
    ]);
    const ui = await instance.inject({ url: '/docs' });
    expect(ui.statusCode).toBe(200);
    expect(ui.headers['content-type']).toMatch(/text\/html/);
    expect((await instance.inject({ url: '/docs/static/swagger-initializer.js' })).statusCode).toBe(200);
    // The shell's own not-found answer, which does not echo the path.
    expect((await instance.inject({ url: '/docs/static/nothing-here.js' })).json()).toMatchObject({
      error: 'NOT_FOUND',
      message: 'no route for GET on this path',
    });
  });

  it('names the scope of each operation, the token scheme for it, and the answers the shell gives', async () => {
    const document = (await (await app()).inject({ url: '/docs/json' })).json() as Document;
    const post = document.paths['/v1/things']?.post;
    expect(post).toMatchObject({ 'x-scope': 'publish', security: [{ publishToken: [] }] });
    expect(Object.keys(post?.responses ?? {})).toEqual(['200', '400', '401', '403', '413', '429', '503']);
    const read = document.paths['/v1/things/{id}']?.get;
    expect(read).toMatchObject({ 'x-scope': 'read', security: [{ readToken: [] }] });
    expect(Object.keys(read?.responses ?? {})).not.toContain('413');
    expect(document.paths['/health/ready']?.get).toMatchObject({ 'x-scope': 'public', security: [] });
    expect(Object.keys(document.paths['/health/ready']?.get?.responses ?? {})).toEqual(['200']);
  });

  it('gives the same document without readying the app (what `server.js openapi` prints)', async () => {
    const built = await app();
    const offline = await openApiDocument(built, 'probe');
    await built.ready();
    expect(offline).toEqual((await built.inject({ url: '/docs/json' })).json());
  });

  it('lists the docs as public routes, and limits them per client address, unlike the probes', async () => {
    const instance = await app();
    expect(scopeTable(instance)).toMatchObject({ 'GET /docs': 'public', 'GET /docs/json': 'public' });
    let limited: { statusCode: number; json: () => unknown } | undefined;
    for (let i = 0; i < 400 && !limited; i++) {
      const response = await instance.inject({ url: '/docs/json' });
      if (response.statusCode === 429) limited = response;
      else expect(response.statusCode).toBe(200);
    }
    expect(limited?.json()).toMatchObject({ error: 'RATE_LIMITED', message: expect.stringMatching(/API docs/) });
    expect((await instance.inject({ url: '/health/live' })).statusCode).toBe(200);
  });
});

describe('scopePluginRoutes', () => {
  it('gives routes that declare nothing the context scope, keeps a declared one, and still refuses elsewhere', async () => {
    const instance = await buildHttpApp({
      name: 'probe',
      logger,
      apiTokens: { publish: [], operate: [], read: ['r'], dsn: [], erase: [] },
    });
    apps.push(instance);
    await instance.register(async (plugin) => {
      scopePluginRoutes(plugin, 'read');
      await plugin.register(async (nested) => {
        nested.get('/nested', async () => ({ ok: true }));
      });
      plugin.get('/declared', { config: { scope: 'public' } }, async () => ({ ok: true }));
    });
    expect(scopeTable(instance)).toMatchObject({ 'GET /nested': 'read', 'GET /declared': 'public' });
    expect((await instance.inject({ url: '/nested' })).statusCode).toBe(401);
    expect((await instance.inject({ url: '/nested', headers: { authorization: 'Bearer r' } })).statusCode).toBe(200);
    expect((await instance.inject({ url: '/declared' })).statusCode).toBe(200);
    const other = await buildHttpApp({ name: 'probe', logger });
    apps.push(other);
    await expect(
      other.register(async (plain) => {
        plain.get('/forgotten', async () => ({}));
      }),
    ).rejects.toThrow(/declares no access/);
  });
});
