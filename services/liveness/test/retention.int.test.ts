/**
 * Conversation retention (ADR 014, "Retention you can set"), like the planner's request-status
 * purge: the retention task runs every 200 ms against the real database; the test ages the rows.
 * A closed conversation unchanged for longer than CONVERSATION_RETENTION_DAYS goes with its events
 * and its planned steps; an open one, one closed recently, and one closed long ago but changed since
 * stay. The purge finds its rows through the partial index on closed conversations' `updated_at`.
 */
import { randomUUID } from 'node:crypto';
import { planScans, waitFor, type ServiceTestEnv } from '@outreach/testkit';
import type { FastifyInstance } from 'fastify';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { auth, livenessEnv } from './liveness-env.js';

let t: ServiceTestEnv;
let app: FastifyInstance;
beforeAll(async () => {
  t = await livenessEnv();
  app = await t.startApp({ CONVERSATION_PURGE_INTERVAL_MS: '200', CONVERSATION_RETENTION_DAYS: '30' });
}, 120_000);
afterAll(async () => {
  await t?.cleanup();
});

const CAMPAIGN = 'camp-retention';
/** A conversation with two events and a planned step, open; `closed` closes it (the status written, as the sweep and projection do). */
async function conversation(id: string, closed: boolean): Promise<void> {
  await t.query(
    `INSERT INTO conversations (conversation_id, campaign_id, candidate_key, status) VALUES ($1, $2, $3, 'open')`,
    [id, CAMPAIGN, `key-${id}`],
  );
  for (let i = 0; i < 2; i++)
    await t.query(
      `INSERT INTO conversation_events (event_id, conversation_id, event_type, event_time, source_topic, source_partition, source_offset, payload)
       VALUES ($1, $2, 'MessageReceived', now(), 't', 0, $3, '{}')`,
      [randomUUID(), id, i],
    );
  await t.query(
    `INSERT INTO planned_steps (campaign_id, candidate_key, step, conversation_id, planned_at, source_topic, source_partition, source_offset, event_id)
     VALUES ($1, $2, 'intro', $3, now(), 't', 0, 0, $4)`,
    [CAMPAIGN, `key-${id}`, id, randomUUID()],
  );
  if (closed)
    await t.query(
      `UPDATE conversations SET status = 'closed', closed_reason = 'sequence_completed' WHERE conversation_id = $1`,
      [id],
    );
}

const found = async (id: string) =>
  (await app.inject({ url: `/v1/conversations/${encodeURIComponent(id)}`, headers: auth })).statusCode;
const counts = async (id: string) => {
  const [row] = await t.query<{ events: number; planned: number }>(
    `SELECT (SELECT count(*) FROM conversation_events WHERE conversation_id = $1)::int AS events,
            (SELECT count(*) FROM planned_steps WHERE conversation_id = $1)::int AS planned`,
    [id],
  );
  return row;
};

describe('conversation retention', () => {
  it('purges closed conversations past the retention with their events and planned steps, and nothing else', async () => {
    const [old, recent, open, changed] = ['old', 'recent', 'open', 'changed'].map(
      (n) => `conv-${n}-${randomUUID()}`,
    ) as [string, string, string, string];
    await conversation(old, true);
    await conversation(recent, true);
    await conversation(open, false);
    await conversation(changed, true);
    for (const id of [old, recent, open, changed]) expect(await found(id), id).toBe(200);
    // 31 days pass for the old one; the one closed long ago changed yesterday; the open one is idle.
    const age = "now() - interval '31 days'";
    await t.query(`UPDATE conversations SET updated_at = ${age} WHERE conversation_id = $1`, [old]);
    await t.query(`UPDATE conversations SET updated_at = now() - interval '1 day' WHERE conversation_id = $1`, [
      changed,
    ]);
    await t.query(`UPDATE conversations SET updated_at = ${age} WHERE conversation_id = $1`, [open]);

    await waitFor(async () => (await found(old)) === 404, {
      timeoutMs: 30_000,
      description: 'the old conversation purged',
    });
    expect(await counts(old)).toEqual({ events: 0, planned: 0 });
    for (const id of [recent, open, changed]) {
      expect(await found(id), id).toBe(200);
      expect(await counts(id), id).toEqual({ events: 2, planned: 1 });
    }
    // The purge's scan is the partial index on closed conversations, not the table.
    const scans = await planScans(
      app.pg,
      `SELECT conversation_id FROM conversations WHERE status = 'closed'
         AND updated_at < now() - make_interval(days => 30) ORDER BY updated_at LIMIT 1000`,
    );
    expect(scans.find((s) => s.relation === 'conversations')?.indexes).toEqual(['conversations_closed_idx']);
  });
});
