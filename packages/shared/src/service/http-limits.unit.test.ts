/**
 * What the shared HTTP shell holds against a client who means harm, on a real listening socket:
 * slow bodies and slow headers are cut off at the request timeout (docs/attacks.md, "Slow clients"),
 * JSON nested past MAX_JSON_DEPTH is a 400 before anything parses it ("JSON bodies"), and a flood of
 * readiness probes reads a cached result instead of running the checks ("Readiness probes").
 */
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { MAX_JSON_DEPTH } from '@outreach/contracts';
import { Type } from '@sinclair/typebox';
import { slowClients } from '@outreach/testkit';
import type { FastifyInstance } from 'fastify';
import { afterEach, describe, expect, it } from 'vitest';
import { createLogger } from '../logger.js';
import { waitFor } from '../wait.js';
import { HealthProblem } from './health.js';
import { loadConfig } from '../config.js';
import { buildHttpApp, DEFAULT_HTTP_TIMEOUTS, type HttpAppOptions } from './http.js';

const logger = createLogger({ name: 'http-limits-test', level: 'silent' });
const token = 'all-scopes';
const apps: FastifyInstance[] = [];
afterEach(async () => {
  for (const app of apps.splice(0)) await app.close();
});

async function listening(options: Partial<HttpAppOptions> = {}): Promise<{ app: FastifyInstance; port: number }> {
  const app = await buildHttpApp({
    name: 'limits',
    logger,
    apiTokens: { publish: [token], operate: [token], read: [token], dsn: [token], erase: [token] },
    ...options,
  });
  apps.push(app);
  app.post('/v1/echo', { config: { scope: 'publish' } }, async (request) => ({ got: typeof request.body }));
  await app.listen({ host: '127.0.0.1', port: 0 });
  return { app, port: (app.server.address() as AddressInfo).port };
}

/** GET `path` over a fresh connection (no keep-alive pool): status and parsed body. */
function get(port: number, path: string): Promise<{ status: number; body: unknown }> {
  return new Promise((resolve, reject) => {
    const request = http.get({ host: '127.0.0.1', port, path, agent: false }, (response) => {
      const chunks: Buffer[] = [];
      response.on('data', (chunk: Buffer) => chunks.push(chunk));
      response.on('end', () =>
        resolve({ status: response.statusCode ?? 0, body: JSON.parse(Buffer.concat(chunks).toString('utf8')) }),
      );
    });
    request.on('error', reject);
  });
}

const post = (port: number, body: string) =>
  fetch(`http://127.0.0.1:${port}/v1/echo`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', authorization: `Bearer ${token}` },
    body,
  });

describe('request timeout', { timeout: 30_000 }, () => {
  it('closes slow-body and slow-header connections within the timeout (plus the 1 s check), and keeps serving', async () => {
    const requestMs = 1_500;
    const { port } = await listening({ timeouts: { requestMs, connectionMs: 60_000 } });
    // With a valid token, so the request gets past the checks that answer before the body is read.
    const body = `POST /v1/echo HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${token}\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n{`;
    const [slowBody, slowHeaders] = await Promise.all([
      slowClients(port, { count: 100, head: body, trickleMs: 200, giveUpMs: 10_000 }),
      slowClients(port, {
        count: 100,
        head: 'GET /health/live HTTP/1.1\r\nHost: x\r\n',
        trickleMs: 200,
        giveUpMs: 10_000,
      }),
    ]);
    for (const attack of [slowBody, slowHeaders]) {
      expect(attack.stillOpen).toBe(0);
      expect(Math.max(...attack.closedAfterMs)).toBeLessThan(requestMs + 1_000 + 1_000);
      expect(Math.min(...attack.closedAfterMs)).toBeGreaterThanOrEqual(requestMs - 100);
      expect(new Set(attack.statuses)).toEqual(new Set([408]));
    }
    expect((await get(port, '/health/live')).status).toBe(200);
  });

  it('every service gets the timeouts by default (the base config, read by buildServiceApp)', async () => {
    const config = loadConfig(Type.Object({}), { KAFKA_BROKERS: 'k:9092', DATABASE_URL: 'postgres://x' });
    expect([config.HTTP_REQUEST_TIMEOUT_MS, config.HTTP_CONNECTION_TIMEOUT_MS]).toEqual([
      DEFAULT_HTTP_TIMEOUTS.requestMs,
      DEFAULT_HTTP_TIMEOUTS.connectionMs,
    ]);
    const { app } = await listening();
    expect(app.initialConfig).toMatchObject({ requestTimeout: 30_000, connectionTimeout: 60_000 });
    expect(app.server.headersTimeout).toBe(30_000);
    expect(() =>
      loadConfig(Type.Object({}), {
        KAFKA_BROKERS: 'k:9092',
        DATABASE_URL: 'postgres://x',
        HTTP_REQUEST_TIMEOUT_MS: '0',
      }),
    ).toThrow(/HTTP_REQUEST_TIMEOUT_MS/);
  });

  it('closes a connection that never sends a byte after the connection timeout', async () => {
    const { port } = await listening({ timeouts: { requestMs: 30_000, connectionMs: 1_000 } });
    const silent = await slowClients(port, { count: 20, head: '', trickleMs: 60_000, giveUpMs: 5_000 });
    expect(silent.stillOpen).toBe(0);
    expect(Math.max(...silent.closedAfterMs)).toBeLessThan(2_500);
  });

  it('an idle keep-alive connection outlives the connection timeout (an ingress reuses it; keepAliveTimeout rules)', async () => {
    const { port } = await listening({ timeouts: { requestMs: 1_000, connectionMs: 1_000 } });
    const agent = new http.Agent({ keepAlive: true, maxSockets: 1 });
    const localPort = () =>
      new Promise<number>((resolve, reject) => {
        const request = http.get({ host: '127.0.0.1', port, path: '/health/live', agent }, (response) => {
          response.resume();
          response.on('end', () => resolve(request.socket?.localPort ?? 0));
        });
        request.on('error', reject);
      });
    const first = await localPort();
    // The time itself is what is tested: longer idle than the connection timeout.
    await new Promise((resolve) => setTimeout(resolve, 1_500));
    expect(await localPort()).toBe(first);
    agent.destroy();
  });
});

describe('JSON depth', () => {
  const nested = (levels: number) => `${'['.repeat(levels)}${']'.repeat(levels)}`;

  it(`takes ${MAX_JSON_DEPTH} levels and refuses one more with a 400 that says why`, async () => {
    const { port } = await listening();
    expect((await post(port, nested(MAX_JSON_DEPTH))).status).toBe(200);
    const deeper = await post(port, nested(MAX_JSON_DEPTH + 1));
    expect(deeper.status).toBe(400);
    expect(await deeper.json()).toEqual({
      error: 'BAD_REQUEST',
      message: `JSON nested deeper than ${MAX_JSON_DEPTH} levels (at offset ${MAX_JSON_DEPTH})`,
    });
    // fastify's own checks still run after the scan: prototype poisoning and broken JSON.
    expect((await post(port, '{"__proto__":{"x":1}}')).status).toBe(400);
    expect((await post(port, '{"a":')).status).toBe(400);
  });

  it("refuses the attacker's 960 KB of nesting, 16 at once, while readiness answers at once", async () => {
    const { port } = await listening();
    const bomb = nested(480_000);
    expect(bomb.length).toBe(960_000);
    const started = performance.now();
    const bombs = Promise.all(Array.from({ length: 16 }, () => post(port, bomb)));
    const ready = await get(port, '/health/ready');
    const readyAfterMs = performance.now() - started;
    const answers = await bombs;
    expect(answers.map((a) => a.status)).toEqual(Array(16).fill(400));
    expect(await answers[0]?.json()).toMatchObject({ message: expect.stringMatching(/nested deeper than/) });
    expect(ready.status).toBe(200);
    // Before the scan, 16 of these pushed readiness to 2.8 s against the kubelet's 3 s timeout.
    expect(readyAfterMs).toBeLessThan(1_000);
  });
});

describe('rate limit', () => {
  it('a burst of concurrent requests past the limit: exactly the limit pass, each told its own count', async () => {
    const { app } = await listening({ rateLimit: { max: 20, windowMs: 60_000 } });
    const answers = await Promise.all(
      Array.from({ length: 30 }, () =>
        app.inject({ method: 'POST', url: '/v1/echo', payload: {}, headers: { authorization: `Bearer ${token}` } }),
      ),
    );
    const statuses = answers.map((a) => a.statusCode).sort();
    expect(statuses).toEqual([...Array(20).fill(200), ...Array(10).fill(429)]);
    // An anonymous flood of the same route is counted apart: the token's bucket is full, not theirs.
    expect((await app.inject({ method: 'POST', url: '/v1/echo', payload: {} })).statusCode).toBe(401);
  });
});

// Thousands of connections take seconds on a busy 2-core machine.
describe('readiness under a flood', { timeout: 30_000 }, () => {
  it('3,000 concurrent GETs read the cached result: all 200, each check run at most once per refresh', async () => {
    const refreshMs = 500;
    const { app, port } = await listening({ readiness: { refreshMs } });
    const runs = { database: 0, broker: 0 };
    app.readiness.set('database', async () => {
      runs.database++;
      await new Promise((resolve) => setTimeout(resolve, 20));
    });
    app.readiness.set('broker', async () => {
      runs.broker++;
    });
    expect((await get(port, '/health/ready')).status).toBe(200);
    const before = { ...runs };
    const started = Date.now();
    const answers = await Promise.all(Array.from({ length: 3_000 }, () => get(port, '/health/ready')));
    const elapsed = Date.now() - started;
    expect(answers.filter((a) => a.status !== 200)).toEqual([]);
    const allowed = Math.ceil(elapsed / refreshMs) + 1;
    expect(runs.database - before.database).toBeLessThanOrEqual(allowed);
    expect(runs.broker - before.broker).toBeLessThanOrEqual(allowed);
    expect(answers[0]?.body).toEqual({ status: 'ready', service: 'limits', checks: { database: 'ok', broker: 'ok' } });
  });

  it('turns 503 with a code, never the error, within one refresh of a dependency failing, and back', async () => {
    const refreshMs = 300;
    const { app, port } = await listening({ readiness: { refreshMs, checkTimeoutMs: 200 } });
    let failure: Error | undefined;
    app.readiness.set('postgres', async () => {
      if (failure) throw failure;
    });
    app.readiness.set('consumer-1', async () => {
      if (failure) throw new HealthProblem('not_joined', 'consumer group secret-group-name: not a member');
    });
    expect((await get(port, '/health/ready')).status).toBe(200);
    failure = new Error('connect ECONNREFUSED 10.1.2.3:5432');
    const failedAt = Date.now();
    const down = await waitFor(
      async () => {
        const answer = await get(port, '/health/ready');
        return answer.status === 503 ? answer : undefined;
      },
      { timeoutMs: 5_000, intervalMs: 20, description: 'readiness to fail' },
    );
    expect(Date.now() - failedAt).toBeLessThan(refreshMs + 200);
    expect(down.body).toEqual({
      status: 'not_ready',
      service: 'limits',
      checks: { postgres: 'unavailable', 'consumer-1': 'not_joined' },
    });
    expect(JSON.stringify(down.body)).not.toMatch(/ECONNREFUSED|10\.1\.2\.3|secret-group-name/);
    failure = undefined;
    await waitFor(async () => (await get(port, '/health/ready')).status === 200, {
      timeoutMs: 2_000,
      description: 'readiness back',
    });
  });

  it('a check that hangs counts as timeout and is never started twice, however many runs and probes', async () => {
    const { app, port } = await listening({ readiness: { refreshMs: 100, checkTimeoutMs: 100 } });
    let started = 0;
    app.readiness.set('hangs', () => {
      started++;
      return new Promise<void>(() => undefined);
    });
    const answers = await Promise.all(Array.from({ length: 200 }, () => get(port, '/health/ready')));
    expect(new Set(answers.map((a) => a.status))).toEqual(new Set([503]));
    expect(answers[0]?.body).toMatchObject({ checks: { hangs: 'timeout' } });
    await new Promise((resolve) => setTimeout(resolve, 500));
    expect((await get(port, '/health/ready')).body).toMatchObject({ checks: { hangs: 'timeout' } });
    expect(started).toBe(1);
  });

  it('liveness names a dead part with a code, and its reason goes to the log only', async () => {
    const { app, port } = await listening();
    app.liveness.set(
      'consumer-1',
      () => 'consumer group secret-group-name: crashed: connect ECONNREFUSED 10.1.2.3:9092',
    );
    const live = await get(port, '/health/live');
    expect(live).toEqual({
      status: 503,
      body: { status: 'dead', service: 'limits', checks: { 'consumer-1': 'dead' } },
    });
  });
});
