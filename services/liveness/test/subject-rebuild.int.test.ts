/**
 * Rebuilds do not resurrect (ADR 014): after a person's erasure, neither a late event about them nor
 * the rebuild from the log (conversation.events.v1 and outreach.send-recorded.v1 from the beginning)
 * brings their conversations back: the projector skips what the live schema's subject_erasures names.
 */
import { loadSuppressionKey, subjectHash } from '@outreach/shared';
import {
  sendRecordedEvent,
  TEST_SUPPRESSION_KEY_ENV,
  waitFor,
  withLivePool,
  type ServiceTestEnv,
} from '@outreach/testkit';
import type { FastifyInstance } from 'fastify';
import type { Pool } from 'pg';
import { afterAll, expect, it } from 'vitest';
import { auth, livenessEnv, rebuildFromLog } from './liveness-env.js';

const DEFAULTS = { inboundMs: 3_600_000, outboundMs: 3_600_000, overdueMs: 3_600_000, replyWindowMs: 3_600_000 };
const key = loadSuppressionKey({ ...TEST_SUPPRESSION_KEY_ENV, SUPPRESSION_KEY_FILE: '' })!;
let t: ServiceTestEnv | undefined;
let app: FastifyInstance | undefined;
afterAll(async () => {
  await app?.close();
  await t?.cleanup();
});

/** Rows of every table of the schema `pool` is on, as text, that mention `needle`. */
async function mentions(pool: Pick<Pool, 'query'>, needle: string): Promise<string[]> {
  const { rows: tables } = await pool.query<{ table_name: string }>(
    `SELECT table_name FROM information_schema.tables WHERE table_schema = current_schema() AND table_type = 'BASE TABLE'`,
  );
  const hits: string[] = [];
  for (const { table_name } of tables) {
    const { rows } = await pool.query<{ text: string }>(`SELECT t::text AS text FROM "${table_name}" t`);
    for (const row of rows) if (row.text.includes(needle)) hits.push(`${table_name}: ${row.text}`);
  }
  return hits;
}

it('after an erasure, a late event and the rebuild from the log leave the person out', async () => {
  t = await livenessEnv(DEFAULTS);
  app = await t.startApp();
  const env = t;
  await env.publish('sendRecorded', [
    sendRecordedEvent({ campaignId: 'camp-r', candidateKey: 'cand-erased-person', step: 'intro' }),
    sendRecordedEvent({ campaignId: 'camp-r', candidateKey: 'cand-kept', step: 'intro' }),
  ]);
  await waitFor(async () => (await env.query('SELECT 1 FROM conversations')).length === 2 || undefined, {
    timeoutMs: 30_000,
    description: 'both conversations',
  });
  const hash = subjectHash(key, 'candidate', 'cand-erased-person');
  const erased = await app.inject({
    method: 'POST',
    url: '/v1/subject-parts/erase',
    headers: auth,
    payload: { candidates: [{ key: 'cand-erased-person', hash }], addresses: [], subject: hash },
  });
  expect(erased.statusCode, erased.body).toBe(200);
  expect(erased.json().status).toBe('erased');

  // A late event about the person, then one about someone else: the second projected, the first not.
  await env.publish('sendRecorded', [
    sendRecordedEvent({ campaignId: 'camp-r', candidateKey: 'cand-erased-person', step: 'follow-up' }),
  ]);
  await env.publish('sendRecorded', [
    sendRecordedEvent({ campaignId: 'camp-r', candidateKey: 'cand-marker', step: 'intro' }),
  ]);
  await waitFor(
    async () =>
      (await env.query(`SELECT 1 FROM conversations WHERE candidate_key = 'cand-marker'`)).length > 0 || undefined,
    { timeoutMs: 30_000, description: 'the marker conversation' },
  );

  let rebuiltHits: string[] | undefined;
  const result = await rebuildFromLog(env, DEFAULTS, async (pool) => {
    rebuiltHits = await mentions(pool, 'cand-erased-person');
  });
  expect(rebuiltHits).toEqual([]);
  expect(result.conversations).toBe(2);
  expect(result.matches).toBe(true);
  expect(await withLivePool(env, (pool) => mentions(pool, 'cand-erased-person'))).toEqual([]);
}, 120_000);
