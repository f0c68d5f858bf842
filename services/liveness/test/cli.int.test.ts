/**
 * The seed and sweep commands, run as processes the way a load test runs them (from the repository
 * root, from source), against a schema that does not exist yet: the seed migrates it, plants
 * exactly `--due` stalls among `--open` conversations and refuses a campaign in use; the sweep flags
 * exactly those, once, and the rows and stored events agree with the domain's fold.
 */
import { spawnSync } from 'node:child_process';
import { join } from 'node:path';
import { createPool, quoteIdent } from '@outreach/shared';
import { uniqueName } from '@outreach/testkit';
import type { Pool } from 'pg';
import { afterAll, beforeAll, expect, inject, it } from 'vitest';
import { deadlines, project, stallDeadline, type ConversationInput } from '../src/domain/conversation.js';

const root = join(import.meta.dirname, '..', '..', '..');
const databaseUrl = inject('databaseUrl');
const GRACES = { inboundMs: 120_000, outboundMs: 3_600_000, overdueMs: 300_000, replyWindowMs: 86_400_000 };
let schema: string;
let pool: Pool;

beforeAll(() => {
  schema = uniqueName('liveness_cli');
  pool = createPool({ connectionString: databaseUrl, applicationName: 'liveness-cli-test', schema, max: 2 });
});

afterAll(async () => {
  await pool.query(`DROP SCHEMA IF EXISTS ${quoteIdent(schema)} CASCADE`);
  await pool.end();
});

/** Runs `node --conditions=source --import tsx services/liveness/src/cli/<command>.ts ...` from the root. */
function liveness(command: 'seed' | 'sweep', ...args: string[]) {
  const run = spawnSync(
    process.execPath,
    ['--conditions=source', '--import', 'tsx', `services/liveness/src/cli/${command}.ts`, ...args],
    {
      cwd: root,
      // No KAFKA_BROKERS: the commands only need the database.
      env: {
        PATH: process.env.PATH,
        DATABASE_URL: databaseUrl,
        DATABASE_SCHEMA: schema,
        GRACE_INBOUND_MS: String(GRACES.inboundMs),
        GRACE_OUTBOUND_MS: String(GRACES.outboundMs),
        GRACE_OVERDUE_MS: String(GRACES.overdueMs),
        REPLY_WINDOW_MS: String(GRACES.replyWindowMs),
        LOG_LEVEL: 'warn',
      },
      encoding: 'utf8',
      timeout: 120_000,
    },
  );
  const lines = run.stdout.trim().split('\n');
  return { status: run.status, stderr: run.stderr, lines, result: JSON.parse(lines.at(-1) || 'null') as unknown };
}

const count = async (where: string) =>
  (await pool.query<{ n: number }>(`SELECT count(*)::int AS n FROM conversations WHERE ${where}`)).rows[0]?.n;

it('seeds N open conversations with M past their deadline, refuses to seed a campaign twice, and the sweep flags the M once', async () => {
  const seeded = liveness('seed', '--open', '1000', '--due', '100');
  expect(seeded.status, seeded.stderr).toBe(0);
  expect(seeded.lines).toHaveLength(1);
  expect(seeded.result).toEqual({ seeded: 1000, due: 100, seconds: expect.any(Number) });
  expect(await count(`campaign_id = 'bench' AND status = 'open'`)).toBe(1000);
  expect(await count(`stall_deadline <= now()`)).toBe(100);
  expect(await count(`stall_deadline > now() + interval '23 hours'`)).toBe(900);

  // Each row is the fold of its stored event: the projection would have written the same.
  const { rows } = await pool.query<{
    id: string;
    at: Date;
    payload: ConversationInput;
    obligation: Date | null;
    overdue: Date | null;
    stall: Date | null;
  }>(
    `SELECT c.conversation_id AS id, e.event_time AS at, e.payload, c.obligation_deadline AS obligation,
            c.overdue_deadline AS overdue, c.stall_deadline AS stall
     FROM conversations c JOIN conversation_events e USING (conversation_id)
     WHERE c.conversation_id IN ('bench:seed-1', 'bench:seed-100', 'bench:seed-101', 'bench:seed-1000')
     ORDER BY c.conversation_id`,
  );
  expect(rows).toHaveLength(4);
  for (const row of rows) {
    const due = deadlines(project([{ eventId: row.id, at: row.at.getTime(), input: row.payload }]), GRACES);
    expect({
      obligation: row.obligation?.getTime() ?? null,
      overdue: row.overdue?.getTime() ?? null,
      reply: null,
    }).toEqual(due);
    expect(row.stall?.getTime() ?? null).toBe(stallDeadline(due));
  }

  const again = liveness('seed', '--open', '10', '--due', '1', '--campaign', 'Bench');
  expect(again.status).toBe(3);
  expect(again.stderr).toMatch(/campaign bench already has conversations/);
  expect(await count('true')).toBe(1000);
  const impossible = liveness('seed', '--open', '10', '--due', '11', '--campaign', 'other');
  expect(impossible.status).toBe(2);
  expect(impossible.stderr).toMatch(/--due \(11\) cannot exceed --open \(10\)/);

  // Batches of 30: the first sweep goes on until it has flagged all 100; the next two find nothing.
  const swept = liveness('sweep', '--repeat', '3', '--limit', '30');
  expect(swept.status, swept.stderr).toBe(0);
  expect(swept.lines).toHaveLength(1);
  expect(swept.result).toEqual({
    flagged: 100,
    closed: 0,
    sweepsMs: [expect.any(Number), expect.any(Number), expect.any(Number)],
  });
  expect(swept.stderr.match(/"alert":"conversation_stalled"/g)).toHaveLength(100);
  expect(await count(`stalled_reason = 'no_next_step' AND stall_count = 1`)).toBe(100);
  expect(await count(`stalled_reason IS NOT NULL`)).toBe(100);
  const outbox = await pool.query<{ n: number }>('SELECT count(*)::int AS n FROM outbox');
  expect(outbox.rows[0]?.n).toBe(100);

  const idle = liveness('sweep');
  expect(idle.status, idle.stderr).toBe(0);
  expect(idle.result).toEqual({ flagged: 0, closed: 0, sweepsMs: [expect.any(Number)] });
});
