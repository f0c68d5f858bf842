/**
 * Large lists are paged on the server: 100,000 audit rows seeded straight into PostgreSQL, and the
 * Audit page renders its first page quickly (an index range scan of one page, not a scan of the
 * table), then pages with its cursor: each page the next ids in order, none twice, to the end.
 * (It caught the first slice ordering by the text `id` column: 99999 before 100000, 9 before 10.)
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createLogger, migrate } from '@outreach/shared';
import type { FastifyInstance } from 'fastify';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { buildApp, migrationsDir } from '../src/app.js';
import { loadConfig } from '../src/config.js';
import { hashPassword } from '../src/security/users.js';
import { newSession, signSession } from '../src/security/session.js';

const ROWS = 100_000;
const PAGE = 50;
const KEY = 'k'.repeat(48);
const schema = `console_large_${Date.now().toString(36)}`;
let app: FastifyInstance;
let pool: pg.Pool;
let dir: string;
let cookie: string;

beforeAll(async () => {
  const databaseUrl = inject('databaseUrl');
  await migrate({ databaseUrl, schema, dir: migrationsDir, outbox: false });
  pool = new pg.Pool({ connectionString: databaseUrl, options: `-c search_path=${schema}` });
  // One statement: 100,000 actions over the last 100,000 seconds, some with hostile text.
  await pool.query(
    `INSERT INTO audit (id, at, actor, via, action, target, reason, outcome, detail)
     SELECT g, now() - make_interval(secs => $1::int - g), 'ada', 'local',
            CASE WHEN g % 2 = 0 THEN 'campaign.pause' ELSE 'send.resolve.sent' END,
            'target-' || g, CASE WHEN g % 997 = 0 THEN '<script>alert(' || g || ')</script>' ELSE 'reason ' || g END,
            'done', NULL
       FROM generate_series(1, $1::int) AS g`,
    [ROWS],
  );
  const { rows } = await pool.query<{ n: string; top: string }>('SELECT count(*) AS n, max(id) AS top FROM audit');
  expect(rows[0]).toEqual({ n: String(ROWS), top: String(ROWS) });
  await pool.query(`SELECT setval(pg_get_serial_sequence('audit', 'id'), $1)`, [ROWS]);
  await pool.query('ANALYZE audit');
  dir = mkdtempSync(join(tmpdir(), 'console-large-'));
  writeFileSync(join(dir, 'users'), `ada reader ${await hashPassword('unused-password', { N: 1024, r: 8, p: 1 })}\n`);
  const config = loadConfig({
    DATABASE_URL: databaseUrl,
    DATABASE_SCHEMA: schema,
    PLANNER_URL: 'http://127.0.0.1:9',
    SENDER_URL: 'http://127.0.0.1:9',
    EXPERIMENT_URL: 'http://127.0.0.1:9',
    LIVENESS_URL: 'http://127.0.0.1:9',
    CONSOLE_SESSION_KEY: KEY,
    CONSOLE_USERS_FILE: join(dir, 'users'),
    CONSOLE_COOKIE_SECURE: 'false',
    CONSOLE_PAGE_SIZE: String(PAGE),
  });
  app = await buildApp({ config, logger: createLogger({ name: 'console', level: 'silent' }) });
  const session = newSession({ user: 'ada', role: 'reader', via: 'local' }, 3_600_000);
  cookie = `console_session=${signSession(session, Buffer.from(KEY))}`;
}, 120_000);

afterAll(async () => {
  await app?.close();
  await pool?.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
  await pool?.end();
  if (dir) rmSync(dir, { recursive: true, force: true });
});

/** The ids on a rendered Audit page (its targets are `target-<id>`), and its `Older` cursor. */
function parsePage(body: string): { ids: number[]; next: string | null } {
  const ids = [...body.matchAll(/<td>target-(\d+)<\/td>/g)].map((m) => Number(m[1]));
  const next = /data-testid="next-page" href="\/audit\?before=(\d+)"/.exec(body)?.[1] ?? null;
  return { ids, next };
}

describe('the Audit page over 100,000 rows', () => {
  it('renders the first page from an index range scan, in well under a second', async () => {
    const started = performance.now();
    const response = await app.inject({ url: '/audit', headers: { cookie } });
    const elapsed = performance.now() - started;
    expect(response.statusCode).toBe(200);
    const { ids, next } = parsePage(response.body);
    expect(ids).toEqual(Array.from({ length: PAGE }, (_, i) => ROWS - i));
    expect(next).toBe(String(ROWS - PAGE + 1));
    expect(elapsed).toBeLessThan(1_000);
    // The page's own query reads one page of the primary key's index, whatever the table's size.
    const plan = await pool.query<{ 'QUERY PLAN': string }>(
      `EXPLAIN SELECT audit.id::text AS id, at, actor, via, action, target, reason, outcome, detail
         FROM audit WHERE ($1::bigint IS NULL OR audit.id < $1::bigint) ORDER BY audit.id DESC LIMIT $2`,
      [String(ROWS / 2), PAGE + 1],
    );
    const text = plan.rows.map((r) => r['QUERY PLAN']).join('\n');
    expect(text).toMatch(/Index (Only )?Scan Backward using audit_pkey/);
    expect(text).not.toMatch(/Seq Scan|Sort/);
    // The hostile reasons render as text.
    const deep = await app.inject({ url: `/audit?before=${997 * 50 + 1}`, headers: { cookie } });
    expect(deep.body).toContain('&lt;script&gt;alert(49850)&lt;/script&gt;');
    expect(deep.body).not.toContain('<script>alert(');
  });

  it('pages with its cursor: the next ids in order, none twice, and the last page has no cursor', async () => {
    let cursor: string | null = null;
    const seen: number[] = [];
    for (let page = 0; page < 5; page++) {
      const response = await app.inject({ url: `/audit${cursor ? `?before=${cursor}` : ''}`, headers: { cookie } });
      const { ids, next } = parsePage(response.body);
      expect(ids).toHaveLength(PAGE);
      seen.push(...ids);
      cursor = next;
    }
    expect(seen).toEqual(Array.from({ length: 5 * PAGE }, (_, i) => ROWS - i));
    // Deep in the list: as fast a page as the first, and the end has no cursor.
    const started = performance.now();
    const last = await app.inject({ url: '/audit?before=31', headers: { cookie } });
    expect(performance.now() - started).toBeLessThan(1_000);
    const { ids, next } = parsePage(last.body);
    expect(ids).toEqual(Array.from({ length: 30 }, (_, i) => 30 - i));
    expect(next).toBeNull();
    // A cursor that is no id is refused with a reason, not a 500.
    const bad = await app.inject({ url: '/audit?before=1%20OR%201=1', headers: { cookie } });
    expect(bad.statusCode).toBe(400);
  });
});
