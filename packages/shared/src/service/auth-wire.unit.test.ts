/**
 * Access control on the wire (issue #15): the real buildHttpApp, a route per scope, and a raw
 * socket where fastify's inject would normalize the bytes. Near-miss tokens (a trailing U+00A0, a tab
 * for a space, two tokens, NUL/CR/LF), method-override headers, per-token rate limits that no
 * forged header or path spelling resets, and path spellings no route probe lists.
 */
import net from 'node:net';
import type { FastifyInstance } from 'fastify';
import { afterEach, describe, expect, it } from 'vitest';
import { BaseConfigSchema, loadConfig } from '../config.js';
import { createLogger } from '../logger.js';
import type { ScopedTokens } from './auth.js';
import { buildHttpApp, trustProxyOf } from './http.js';

const TOKENS = { publish: 'tok-publish-AAAA', operate: 'tok-operate-BBBB', read: 'tok-read-CCCC' } as const;
const staticTokens: ScopedTokens = {
  publish: [TOKENS.publish],
  operate: [TOKENS.operate],
  read: [TOKENS.read],
  dsn: [],
  erase: [],
};

let apps: FastifyInstance[] = [];
afterEach(async () => {
  for (const app of apps) await app.close();
  apps = [];
});

async function start(options: {
  rateLimit?: { max: number; windowMs: number };
  trustProxy?: string;
}): Promise<{ app: FastifyInstance; port: number }> {
  const app = await buildHttpApp({
    name: 'auth-wire',
    logger: createLogger({ name: 'auth-wire', level: 'silent' }),
    apiTokens: staticTokens,
    ...(options.rateLimit ? { rateLimit: options.rateLimit } : {}),
    ...(options.trustProxy !== undefined ? { trustProxy: options.trustProxy } : {}),
  });
  app.get('/v1/secret', { config: { scope: 'read' } }, async () => ({ secret: 'read-data' }));
  app.post('/v1/secret/pause', { config: { scope: 'operate' } }, async () => ({ paused: true }));
  app.post('/v1/ingress', { config: { scope: 'publish' } }, async () => ({ accepted: true }));
  await app.listen({ host: '127.0.0.1', port: 0 });
  apps.push(app);
  const address = app.server.address();
  if (address === null || typeof address === 'string') throw new Error('no port');
  return { app, port: address.port };
}

/** Writes exactly these bytes and returns the status line's code (0 if the server closed without one). */
function raw(port: number, bytes: Buffer | string): Promise<{ status: number; text: string }> {
  return new Promise((resolve, reject) => {
    const socket = net.connect(port, '127.0.0.1');
    const chunks: Buffer[] = [];
    socket.setTimeout(5_000, () => socket.destroy(new Error('no answer')));
    socket.on('data', (c) => chunks.push(c));
    socket.on('error', (error) => ((error as NodeJS.ErrnoException).code === 'ECONNRESET' ? undefined : reject(error)));
    socket.on('close', () => {
      const text = Buffer.concat(chunks).toString('latin1');
      resolve({ status: Number(/^HTTP\/1\.[01] (\d{3})/.exec(text)?.[1] ?? 0), text });
    });
    socket.write(bytes);
  });
}

const request = (method: string, path: string, headerLines: string[]) =>
  `${method} ${path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\nContent-Length: 0\r\n${headerLines.map((h) => `${h}\r\n`).join('')}\r\n`;

describe('token tricks never reach a protected route without the right scoped token', () => {
  it('refuses near-miss tokens, other schemes and other scopes on every route', async () => {
    const { port } = await start({});
    const right = TOKENS.read;
    const attempts: Array<[string, string[]]> = [
      ['no header', []],
      ['empty', ['Authorization:']],
      ['scheme only', ['Authorization: Bearer']],
      ['one byte longer', [`Authorization: Bearer ${right}X`]],
      ['one byte shorter', [`Authorization: Bearer ${right.slice(0, -1)}`]],
      ['upper-cased token', [`Authorization: Bearer ${right.toUpperCase()}`]],
      ['lower-cased token', [`Authorization: Bearer ${right.toLowerCase()}`]],
      ['Basic scheme with the token', [`Authorization: Basic ${right}`]],
      ['Basic token:', [`Authorization: Basic ${Buffer.from(`${right}:`).toString('base64')}`]],
      ['Basic :token', [`Authorization: Basic ${Buffer.from(`:${right}`).toString('base64')}`]],
      ['Token scheme', [`Authorization: Token ${right}`]],
      ['Bearer glued', [`Authorization: Bearer${right}`]],
      ['tab separator', [`Authorization: Bearer\t${right}`]],
      ['two tokens comma-joined', [`Authorization: Bearer ${TOKENS.operate}, Bearer ${right}`]],
      ['two tokens space-joined', [`Authorization: Bearer ${TOKENS.operate} ${right}`]],
      ['token in a query-like suffix', [`Authorization: Bearer ${right}?`]],
      ['another scope', [`Authorization: Bearer ${TOKENS.operate}`]],
      ['publish scope', [`Authorization: Bearer ${TOKENS.publish}`]],
      [
        'two headers, neither right',
        [`Authorization: Bearer ${TOKENS.operate}`, `Authorization: Bearer ${TOKENS.publish}`],
      ],
      ['two headers, invalid first', ['Authorization: Bearer nope', `Authorization: Bearer ${TOKENS.operate}`]],
      ['proxy-authorization', [`Proxy-Authorization: Bearer ${right}`]],
      ['x-forwarded-authorization', [`X-Forwarded-Authorization: Bearer ${right}`]],
      ['token with NBSP', [`Authorization: Bearer ${right}\u00a0`]],
    ];
    const got: Record<string, number> = {};
    for (const [label, headers] of attempts) {
      got[label] = (await raw(port, Buffer.from(request('GET', '/v1/secret', headers), 'latin1'))).status;
    }
    // Every attempt is refused (401/403, or 400 by the parser), never answered 200.
    const reached = Object.entries(got).filter(([, status]) => status < 400 || status >= 500);
    expect(reached, JSON.stringify(got)).toEqual([]);
    // Query-string tokens are not a scheme this API takes.
    expect((await raw(port, request('GET', `/v1/secret?access_token=${right}`, []))).status).toBe(401);
  });

  it('refuses a token carrying NUL, CR or LF bytes (raw socket)', async () => {
    const { port } = await start({});
    for (const tail of ['\u0000', '\r', '\n', '\u000b', '\u007f']) {
      const bytes = Buffer.from(
        `GET /v1/secret HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\nAuthorization: Bearer ${TOKENS.operate}${tail}\r\n\r\n`,
        'latin1',
      );
      const { status } = await raw(port, bytes);
      expect([0, 400, 401, 403], `tail ${JSON.stringify(tail)} answered ${status}`).toContain(status);
    }
  });

  it('treats the scheme case-insensitively and spaces leniently only for the right token', async () => {
    const { port } = await start({});
    for (const header of [`bearer ${TOKENS.read}`, `BEARER ${TOKENS.read}`, `Bearer    ${TOKENS.read}   `]) {
      expect((await raw(port, request('GET', '/v1/secret', [`Authorization: ${header}`]))).status, header).toBe(200);
      expect(
        (await raw(port, request('POST', '/v1/secret/pause', [`Authorization: ${header}`]))).status,
        `${header} on an operate route`,
      ).toBe(403);
    }
  });

  it('does not honour method-override headers (a read token cannot POST an operate route)', async () => {
    const { port } = await start({});
    for (const header of ['X-HTTP-Method-Override: GET', 'X-HTTP-Method: GET', 'X-Method-Override: GET']) {
      const { status } = await raw(
        port,
        request('POST', '/v1/secret/pause', [`Authorization: Bearer ${TOKENS.read}`, header]),
      );
      expect(status, header).toBe(403);
    }
  });
});

describe('rate limit per token: no fresh budget by varying what is not the token', () => {
  const limit = { max: 3, windowMs: 60_000 };

  it('a token that spent its budget stays limited whatever headers, spelling or route it uses', async () => {
    const { port } = await start({ rateLimit: limit });
    const auth = `Authorization: Bearer ${TOKENS.read}`;
    for (let i = 0; i < limit.max; i++)
      expect((await raw(port, request('GET', '/v1/secret', [auth]))).status).toBe(200);
    const variants: Array<[string, string, string, string[]]> = [
      ['plain', 'GET', '/v1/secret', [auth]],
      ['X-Forwarded-For', 'GET', '/v1/secret', [auth, 'X-Forwarded-For: 203.0.113.9']],
      ['X-Real-IP', 'GET', '/v1/secret', [auth, 'X-Real-IP: 203.0.113.10']],
      ['Forwarded', 'GET', '/v1/secret', [auth, 'Forwarded: for=203.0.113.11']],
      ['True-Client-IP', 'GET', '/v1/secret', [auth, 'True-Client-IP: 203.0.113.12']],
      ['lower-case scheme', 'GET', '/v1/secret', [`authorization: bearer ${TOKENS.read}`]],
      ['extra spaces', 'GET', '/v1/secret', [`Authorization: Bearer    ${TOKENS.read}  `]],
      ['HEAD', 'HEAD', '/v1/secret', [auth]],
      ['percent-encoded path', 'GET', '/%761/secret', [auth]],
      ['absolute-form', 'GET', 'http://other.example/v1/secret', [auth]],
      ['query string', 'GET', '/v1/secret?x=1', [auth]],
      ['another route', 'POST', '/v1/secret/pause', [auth]],
      ['no such route', 'GET', '/v1/nothing', [auth]],
    ];
    const statuses = Object.fromEntries(
      await Promise.all(
        variants.map(async ([label, method, path, headers]) => [
          label,
          (await raw(port, request(method, path, headers))).status,
        ]),
      ),
    );
    const fresh = Object.entries(statuses).filter(([, status]) => status !== 429);
    expect(fresh, JSON.stringify(statuses)).toEqual([]);
  });

  it('made-up tokens and forged client addresses share one per-address budget (no token brute force)', async () => {
    const { port } = await start({ rateLimit: limit });
    const statuses: number[] = [];
    for (let i = 0; i < 12; i++) {
      const headers = [
        `Authorization: Bearer guess-${i}`,
        `X-Forwarded-For: 198.51.100.${i}`,
        `X-Real-IP: 198.51.100.${i}`,
      ];
      statuses.push((await raw(port, request('GET', '/v1/secret', headers))).status);
    }
    expect(statuses.slice(0, limit.max)).toEqual(Array(limit.max).fill(401));
    expect(statuses.slice(limit.max)).toEqual(Array(12 - limit.max).fill(429));
    // The 429 carries a reason, like every 4xx.
    const limited = await raw(port, request('GET', '/v1/secret', ['Authorization: Bearer guess-x']));
    expect(limited.status).toBe(429);
    expect(limited.text).toMatch(/"message":"rate limit exceeded/);
  });
});

describe('behind a proxy (TRUST_PROXY)', () => {
  const limit = { max: 3, windowMs: 60_000 };
  const guess = (i: number, forwardedFor: string) => [
    `Authorization: Bearer guess-${i}`,
    `X-Forwarded-For: ${forwardedFor}`,
  ];

  it('clients behind a trusted proxy get a budget each; the proxy is not one client', async () => {
    // The test connects from 127.0.0.1, standing in for the ingress.
    const { port } = await start({ rateLimit: limit, trustProxy: '127.0.0.1' });
    const statuses: number[] = [];
    for (let i = 0; i < 12; i++)
      statuses.push((await raw(port, request('GET', '/v1/secret', guess(i, `198.51.100.${i}`)))).status);
    expect(statuses).toEqual(Array(12).fill(401));
    // One client still has one budget.
    const same: number[] = [];
    for (let i = 0; i < 5; i++)
      same.push((await raw(port, request('GET', '/v1/secret', guess(i, '198.51.100.200')))).status);
    expect(same).toEqual([401, 401, 401, 429, 429]);
  });

  it('a forwarded value that is no address gets no budget of its own, and no bucket keeps its bytes', async () => {
    // A caller a hop count trusts (TRUST_PROXY=1: anyone who reaches the pod directly) writes the
    // forwarded value itself. Unique 8 KB strings were a bucket each: 20,000 of them held 166 MB
    // of heap in one limiter (50,000 kept per limiter, one limiter per public route purpose).
    const { port } = await start({ rateLimit: limit, trustProxy: '1' });
    const statuses: number[] = [];
    const junk = (i: number) => (i % 2 === 0 ? `junk-${i}-${'x'.repeat(8_000)}` : `fe80::1%${i}${'z'.repeat(8_000)}`);
    for (let i = 0; i < 6; i++)
      statuses.push((await raw(port, request('GET', '/v1/secret', guess(i, junk(i))))).status);
    expect(statuses).toEqual([401, 401, 401, 429, 429, 429]);
  });

  it('a proxy we do not trust cannot choose its clients’ addresses', async () => {
    const { port } = await start({ rateLimit: limit, trustProxy: '10.0.0.0/8' });
    const statuses: number[] = [];
    for (let i = 0; i < 6; i++)
      statuses.push((await raw(port, request('GET', '/v1/secret', guess(i, `198.51.100.${i}`)))).status);
    expect(statuses).toEqual([401, 401, 401, 429, 429, 429]);
  });
});

describe('TRUST_PROXY spellings', () => {
  it('parses addresses, CIDRs and hop counts, and refuses "true"', () => {
    expect(trustProxyOf('')).toBe(false);
    const twoHops = trustProxyOf('2') as (address: string, hop: number) => boolean;
    expect([0, 1, 2].map((hop) => twoHops('10.0.0.1', hop))).toEqual([true, true, false]);
    expect(trustProxyOf('10.0.0.0/8, 192.168.1.1')).toEqual(['10.0.0.0/8', '192.168.1.1']);
    expect(() =>
      loadConfig(BaseConfigSchema, { KAFKA_BROKERS: 'k:1', DATABASE_URL: 'postgres://x', TRUST_PROXY: 'true' }),
    ).toThrow(/TRUST_PROXY/);
  });
});

describe('path spellings the route probe does not list never reach a protected route without a token', () => {
  it('overlong UTF-8, look-alikes, ;params, fragments, encoded slashes and odd targets', async () => {
    const { port } = await start({});
    const targets = [
      '/v1/secret;x=1',
      '/v1;x/secret',
      '/v1/secret#frag',
      '/v1/secret%23frag',
      '/v1/secret%3Fx=1',
      '/v1%2fsecret',
      '/v1%2Fsecret',
      '/v1/%2e/secret',
      '/v1/sub/%2e%2e/secret',
      '/v1/sub/%2E%2E/secret',
      '/v1/sub/..%2fsecret',
      '/v1%c0%afsecret',
      '/v1/%c0%ae%c0%ae/v1/secret',
      '/%ef%bd%961/secret', // full-width v
      '/\uff561/secret',
      '/v1/s\u0435cret', // Cyrillic e
      '/v1/secret%00',
      '/v1/secret%20',
      '/v1/secret\t',
      '/v1\\secret',
      '//v1/secret',
      '/./v1/secret',
      'http://localhost:1/v1/secret',
      'http://user@evil.example/v1/secret',
      'HTTP://LOCALHOST/v1/secret',
      '*',
      'v1/secret',
    ];
    const got: Record<string, number> = {};
    for (const target of targets) {
      for (const method of ['GET', 'HEAD', 'POST', 'OPTIONS', 'PROPFIND']) {
        const bytes = Buffer.from(request(method, target, []), 'utf8');
        got[`${method} ${target}`] = (await raw(port, bytes)).status;
      }
    }
    const reached = Object.entries(got).filter(([, status]) => ![0, 400, 401, 404, 405, 414].includes(status));
    expect(reached, JSON.stringify(got)).toEqual([]);
  });
});
