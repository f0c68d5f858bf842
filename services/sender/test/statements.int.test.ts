/**
 * The hot path's round trips per chunk, counted: a chunk of requests is claimed (with a duplicate),
 * checked (a suppressed address, a paused campaign), fenced (a suppression written after the checks,
 * an exposure conflict) and recorded. Every statement a phase sends (BEGIN and COMMIT included) is
 * counted; the counts do not depend on the chunk's size, and must not grow.
 */
import { testEmailHashKey, type IsolatedSchema } from '@outreach/testkit';
import type { Pool } from 'pg';
import { afterAll, beforeAll, expect, inject, it } from 'vitest';
import { SendsRepository, type Claim, type RecordEntry } from '../src/adapters/sends-repository.js';
import { validateSendRequest, type ValidSend } from '../src/domain/request.js';
import { SendCommands } from '../src/workflow/send-commands.js';
import { migratedSenderSchema, sendRequested } from './harness.js';
import { recordingPool } from './recording-pool.js';

const databaseUrl = inject('databaseUrl');
let db: IsolatedSchema;
beforeAll(async () => {
  db = await migratedSenderSchema(databaseUrl, 'sender_statements');
});
afterAll(() => db?.drop());

/** A pool that counts every statement sent through it, or through a client it hands out. */
function counting(pool: Pool): { pool: Pool; count: () => number } {
  const recording = recordingPool(pool);
  return { pool: recording.pool, count: () => recording.statements.length };
}

function send(fields: Parameters<typeof sendRequested>[0]): ValidSend {
  const validation = validateSendRequest(sendRequested(fields), testEmailHashKey());
  if (!validation.ok) throw new Error(validation.reason);
  return validation.send;
}

it('a chunk takes a fixed number of statements per phase, whatever it holds', async () => {
  const { pool, count } = counting(db.pool);
  const repository = new SendsRepository(pool, 'statements.send-recorded', 60_000, testEmailHashKey());
  const commands = new SendCommands(repository);
  await db.pool.query(`INSERT INTO campaigns (campaign_id, paused) VALUES ('paused', true)`);
  await db.pool.query(`INSERT INTO suppressions (email_norm, reason) VALUES ('suppressed@example.com', 'manual')`);
  const chunk = [
    ...Array.from({ length: 6 }, (_, i) =>
      send({ campaignId: 'c1', candidateId: `a${i}`, email: `a${i}@example.com` }),
    ),
    send({ campaignId: 'c1', candidateId: 'other', email: 'a0@example.com' }),
    send({ campaignId: 'c1', candidateId: 'suppressed', email: 'suppressed@example.com' }),
    send({ campaignId: 'paused', candidateId: 'held', email: 'held@example.com' }),
    send({ campaignId: 'c1', candidateId: 'x', email: 'x@example.com', experimentId: 'exp', variant: 'A' }),
    send({ campaignId: 'c2', candidateId: 'x', email: 'x@example.com', experimentId: 'exp', variant: 'B' }),
  ];
  const phases: Record<string, number> = {};
  const measure = async <T>(phase: string, work: () => Promise<T>): Promise<T> => {
    const before = count();
    const result = await work();
    phases[phase] = count() - before;
    return result;
  };

  const { claimed, conflicts } = await measure('claim', () => commands.claim(chunk));
  const duplicates = conflicts.filter((c) => c.kind === 'duplicate');
  expect(duplicates).toHaveLength(1);
  expect(await measure('recordDuplicates', () => repository.recordDuplicates(duplicates))).toBe(1);
  const checked = await measure('checks', () => commands.applyChecks(claimed));
  expect(checked).toMatchObject({ suppressed: 1, held: 1 });
  expect(checked.ready).toHaveLength(8);
  await db.pool.query(`INSERT INTO suppressions (email_norm, reason) VALUES ('a1@example.com', 'manual')`);
  const ready: Claim[] = checked.ready.map(({ sendId, token }) => ({ sendId, token }));
  const fenced = await measure('fence', () => commands.fenceMany(ready, 'test-1'));
  expect(fenced.map((f) => f.kind).sort()).toEqual([
    'exposure_conflict',
    'fenced',
    'fenced',
    'fenced',
    'fenced',
    'fenced',
    'fenced',
    'suppressed',
  ]);
  const entries = fenced.flatMap((f, i): RecordEntry[] =>
    f.kind === 'fenced'
      ? [
          {
            claim: ready[i] as Claim,
            row: f.row,
            command: 'RecordResult',
            event: { type: 'Sent', providerMessageId: `<${f.row.sendId}@test>` },
          },
        ]
      : [],
  );
  expect(await measure('record', () => repository.recordMany(entries))).toEqual(entries.map(() => true));

  expect(phases).toEqual({ claim: 2, recordDuplicates: 5, checks: 6, fence: 12, record: 5 });
});

it('a claim carries the gate as its INSERT saw it, so a clear chunk needs no checks transaction', async () => {
  const repository = new SendsRepository(db.pool, 'statements.send-recorded', 60_000, testEmailHashKey());
  await db.pool.query(
    `INSERT INTO campaigns (campaign_id, paused) VALUES ('paused-hint', true) ON CONFLICT DO NOTHING`,
  );
  await db.pool.query(`INSERT INTO suppressions (email_norm, reason) VALUES ('hint-s@example.com', 'manual')`);
  const { claimed } = await repository.claim([
    send({ campaignId: 'hint', candidateId: 'clear', email: 'Hint-Clear@Example.com' }),
    send({ campaignId: 'hint', candidateId: 'sup', email: 'HINT-S@example.com' }),
    send({ campaignId: 'paused-hint', candidateId: 'held', email: 'hint-held@example.com' }),
  ]);
  expect(Object.fromEntries(claimed.map((c) => [c.emailNorm, c.gateClear]))).toEqual({
    'hint-clear@example.com': true,
    'hint-s@example.com': false,
    'hint-held@example.com': false,
  });
  // With the kill switch on, no claim is clear: every one goes through the checks and is held there.
  await db.pool.query('UPDATE sending_control SET paused = true');
  try {
    const during = await repository.claim([send({ campaignId: 'hint', candidateId: 'k', email: 'k@example.com' })]);
    expect(during.claimed.map((c) => c.gateClear)).toEqual([false]);
  } finally {
    await db.pool.query('UPDATE sending_control SET paused = false');
  }
});
