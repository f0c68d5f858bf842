/**
 * Console pages against a stand-in for the four services (a real HTTP server that records what it is
 * asked), PostgreSQL for the audit and Kafka for the dead-letter pages (attack round 4): an address
 * in a link however its at-sign is spelt, an experiment variant nobody was assigned to, bad query and
 * form values answered with a page, and two replays of one DLQ at once.
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createKafka, createLogger, dlqTopicOf, migrate, topics } from '@outreach/shared';
import type { FastifyInstance } from 'fastify';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { buildApp, migrationsDir } from '../src/app.js';
import { loadConfig } from '../src/config.js';
import { replayTimeoutMs } from '../src/plugins/console.js';
import { hashPassword } from '../src/security/users.js';
import { newSession, signSession } from '../src/security/session.js';

const KEY = 'k'.repeat(48);
const run = Date.now().toString(36);
const schema = `console_pages_${run}`;
const prefix = `console-pages-${run}.`;
const source = `${prefix}${topics.outreachRequested.name}`;
const dlq = dlqTopicOf(source);
let app: FastifyInstance;
let pool: pg.Pool;
let dir: string;
let services: Server;
const asked: string[] = [];
let csrf: string;
let cookie: string;

const report = {
  experimentId: 'exp-1',
  status: 'running',
  weights: { a: 1, b: 1, c: 2 },
  assignedTotal: 10,
  variants: [
    { variant: 'b', assigned: 4, exposedCandidates: 4, exposures: 4, importedCandidates: 0, repliedCandidates: 1 },
    { variant: 'a', assigned: 6, exposedCandidates: 6, exposures: 6, importedCandidates: 0, repliedCandidates: 2 },
  ],
  sampleRatioMismatch: { pValue: 0.01, mismatch: true, threshold: 0.001 },
  contamination: { candidates: 0, withImportedHistory: 0, listed: 0 },
  contaminated: [],
};

beforeAll(async () => {
  services = createServer((request, response) => {
    asked.push(request.url ?? '');
    const body = request.url === '/v1/experiments/exp-1/report' ? report : { message: 'not here' };
    response.writeHead(request.url === '/v1/experiments/exp-1/report' ? 200 : 404, {
      'content-type': 'application/json',
    });
    response.end(JSON.stringify(body));
  });
  await new Promise<void>((resolve) => services.listen(0, '127.0.0.1', resolve));
  const url = `http://127.0.0.1:${(services.address() as AddressInfo).port}`;

  const kafka = createKafka({ brokers: inject('kafkaBrokers').split(','), clientId: 'console-pages-test' });
  const admin = kafka.admin();
  await admin.connect();
  await admin.createTopics({ topics: [{ topic: source }, { topic: dlq }], waitForLeaders: true });
  await admin.disconnect();
  const producer = kafka.producer();
  await producer.connect();
  await producer.send({
    topic: dlq,
    messages: Array.from({ length: 3 }, (_, i) => ({
      value: JSON.stringify({ n: i }),
      headers: { 'dlq-error-code': 'REJECTED', 'dlq-reason': 'test', 'dlq-source-topic': source },
    })),
  });
  await producer.disconnect();

  const databaseUrl = inject('databaseUrl');
  await migrate({ databaseUrl, schema, dir: migrationsDir, outbox: false });
  pool = new pg.Pool({ connectionString: databaseUrl, options: `-c search_path=${schema}` });
  dir = mkdtempSync(join(tmpdir(), 'console-pages-'));
  writeFileSync(join(dir, 'users'), `ada operator ${await hashPassword('unused-password', { N: 1024, r: 8, p: 1 })}\n`);
  const config = loadConfig({
    DATABASE_URL: databaseUrl,
    DATABASE_SCHEMA: schema,
    PLANNER_URL: url,
    SENDER_URL: url,
    EXPERIMENT_URL: url,
    LIVENESS_URL: url,
    CONSOLE_SESSION_KEY: KEY,
    CONSOLE_USERS_FILE: join(dir, 'users'),
    CONSOLE_COOKIE_SECURE: 'false',
    KAFKA_BROKERS: inject('kafkaBrokers'),
    TOPIC_PREFIX: prefix,
  });
  app = await buildApp({ config, logger: createLogger({ name: 'console', level: 'silent' }) });
  const session = newSession({ user: 'ada', role: 'operator', via: 'local' }, 3_600_000);
  csrf = session.csrf;
  cookie = `console_session=${signSession(session, Buffer.from(KEY))}`;
}, 120_000);

afterAll(async () => {
  await app?.close();
  await pool?.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
  await pool?.end();
  await new Promise((resolve) => services?.close(resolve));
  const admin = createKafka({ brokers: inject('kafkaBrokers').split(','), clientId: 'console-pages-test' }).admin();
  await admin.connect();
  await admin.deleteTopics({ topics: [source, dlq] }).catch(() => undefined);
  await admin.disconnect();
  if (dir) rmSync(dir, { recursive: true, force: true });
});

const get = (url: string) => app.inject({ method: 'GET', url, headers: { cookie } });
const post = (url: string, form: Record<string, string>) =>
  app.inject({
    method: 'POST',
    url,
    headers: { cookie, 'content-type': 'application/x-www-form-urlencoded', 'sec-fetch-site': 'same-origin' },
    payload: new URLSearchParams({ _csrf: csrf, ...form }).toString(),
  });

describe('an address in a link', () => {
  it.each([
    ['full-width', 'victim.three%EF%BC%A0example.com', 'victim.three\uff20example.com'],
    ['small', 'victim.three%EF%B9%ABexample.com', 'victim.three\ufe6bexample.com'],
    ['percent-encoded', 'victim.three%2540example.com', 'victim.three%40example.com'],
    ['plain', 'victim.three%40example.com', 'victim.three@example.com'],
    ['behind an invisible character', 'victim.three%E2%80%8B%40example.com', 'victim.three\u200b@example.com'],
  ])('is refused 400 with its at-sign %s, asked of no service and not echoed', async (_how, inUrl, decoded) => {
    const before = asked.length;
    const answer = await get(`/sends?campaignId=camp-b&candidateId=${inUrl}`);
    expect(answer.statusCode).toBe(400);
    expect(answer.body).toContain('holds an address');
    expect(answer.body).not.toContain('victim.three');
    expect(answer.body).not.toContain(decoded);
    expect(asked.slice(before)).toEqual([]);
  });

  it('is refused in any lookup field, the others echoed', async () => {
    const answer = await get('/sends?requestId=x%EF%BC%A0example.com&campaignId=camp-b');
    expect(answer.statusCode).toBe(400);
    expect(answer.body).toContain('That requestId holds an address');
    expect(answer.body).toContain('value="camp-b"');
  });
});

describe('the experiments page', () => {
  it('shows every variant the weights name, one nobody was assigned to with zeros', async () => {
    const answer = await get('/experiments?experimentId=exp-1');
    expect(answer.statusCode).toBe(200);
    const rows = [...answer.body.matchAll(/<tr data-variant="([^"]+)"/g)].map((m) => m[1]);
    expect(rows.slice(0, 3)).toEqual(['a', 'b', 'c']);
    const c = /<tr data-variant="c">([\s\S]*?)<\/tr>/.exec(answer.body)?.[1] ?? '';
    expect(c).toContain('<td data-field="assigned">0</td>');
    expect(c).toContain('<td data-field="share">0.0%</td>');
  });
});

describe('bad values', () => {
  it.each([
    ['/stalled?reason=bogus', 'reason must be one of'],
    ['/stalled?minAgeMinutes=-1', 'minAgeMinutes must match pattern'],
    ['/dlq?code=lower', 'code must match pattern'],
    [`/sends?requestId=${'r'.repeat(300)}`, 'requestId must NOT have more than 256 characters'],
  ])('%s is a page with a 400 and the reason', async (url, reason) => {
    const answer = await get(url);
    expect(answer.statusCode).toBe(400);
    expect(answer.headers['content-type']).toContain('text/html');
    expect(answer.body).toContain('data-testid="notice-refused"');
    expect(answer.body).toContain(reason);
  });

  it('an address over 320 characters is a page with a 400 that does not echo it', async () => {
    const email = `${'v'.repeat(320)}@example.com`;
    const answer = await post('/sends/by-address', { campaignId: 'camp-b', email });
    expect(answer.statusCode).toBe(400);
    expect(answer.headers['content-type']).toContain('text/html');
    expect(answer.body).toContain('email must NOT have more than 320 characters');
    expect(answer.body).not.toContain('vvvvvvvv');
  });
});

describe('replaying a DLQ', () => {
  it('keeps its timeout below the HTTP request timeout', () => {
    expect(replayTimeoutMs({ DLQ_READ_TIMEOUT_MS: 10_000, HTTP_REQUEST_TIMEOUT_MS: 30_000 })).toBe(24_000);
    expect(replayTimeoutMs({ DLQ_READ_TIMEOUT_MS: 1_000, HTTP_REQUEST_TIMEOUT_MS: 30_000 })).toBe(6_000);
  });

  it('refuses a second replay of one DLQ while the first runs (409, a reason, audited), and the first is done', async () => {
    const dry = await post('/dlq/replay', { topic: dlq, code: 'REJECTED', reason: 'test' });
    expect(dry.statusCode).toBe(200);
    const permit = /name="permit"\s+value="([^"]+)"/.exec(dry.body)?.[1] ?? '';
    expect(permit).not.toBe('');
    const form = { topic: dlq, code: 'REJECTED', reason: 'both at once', permit };
    const [first, second] = await Promise.all([post('/dlq/replay', form), post('/dlq/replay', form)]);
    const answers = [first, second].map((a) => a.statusCode).sort();
    expect(answers).toEqual([200, 409]);
    const refused = first.statusCode === 409 ? first : second;
    const done = first.statusCode === 200 ? first : second;
    expect(refused.body).toContain('a replay of this DLQ is running');
    expect(done.body).toContain('data-replayed="3"');
    const { rows } = await pool.query<{ outcome: string }>(
      `SELECT outcome FROM audit WHERE action = 'dlq.replay' ORDER BY id`,
    );
    expect(rows.map((r) => r.outcome).sort()).toEqual(['done', 'refused']);
    // The guard is released: a third replay runs (and finds nothing left).
    const third = await post('/dlq/replay', form);
    expect(third.statusCode).toBe(200);
    expect(third.body).toContain('data-replayed="0"');
  }, 120_000);
});
