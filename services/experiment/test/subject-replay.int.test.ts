/**
 * Rebuilds do not resurrect (ADR 014): after a candidate's erasure, the replay of the exposure
 * projection from outreach.send-recorded.v1 (and the live projector, for a late event) files the
 * candidate's exposures under the pseudonym the erasure left, never the candidate key: the replay
 * reaches the live counts and holds nothing that names the person.
 */
import type { Pool } from 'pg';
import { loadSuppressionKey, subjectHash } from '@outreach/shared';
import { TEST_SUPPRESSION_KEY_ENV, waitFor, withLivePool, type ServiceTestEnv } from '@outreach/testkit';
import { afterEach, expect, it } from 'vitest';
import {
  auth,
  createExperiment,
  experimentEnv,
  postAssignments,
  replayFromLog,
  sendRecorded,
} from './experiment-env.js';

const key = loadSuppressionKey({ ...TEST_SUPPRESSION_KEY_ENV, SUPPRESSION_KEY_FILE: '' })!;
let t: ServiceTestEnv | undefined;
afterEach(async () => {
  await t?.cleanup();
  t = undefined;
});

/** Rows of every table of the schema `pool` is on, as text, that mention `needle`. */
async function mentions(pool: Pool, needle: string): Promise<string[]> {
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

it('after an erasure, the replay and a late exposure keep the person out, and the counts match', async () => {
  t = await experimentEnv();
  const env = t;
  const app = await env.startApp();
  const experiment = {
    experimentId: 'subj-exp',
    variants: [
      { name: 'A', weight: 1 },
      { name: 'B', weight: 1 },
    ],
  };
  expect((await createExperiment(app, experiment)).statusCode).toBe(201);
  const assigned = (await postAssignments(app, 'subj-exp', ['cand-erased-person', 'cand-kept'])).json()
    .assignments as Array<{ candidateKey: string; variant: string }>;
  await env.publish(
    'sendRecorded',
    assigned.map((a) =>
      sendRecorded({ experimentId: 'subj-exp', candidateKey: a.candidateKey, variant: a.variant, step: 'intro' }),
    ),
  );
  await waitFor(async () => (await env.query('SELECT 1 FROM exposure_events')).length === 2 || undefined, {
    timeoutMs: 30_000,
    description: 'both exposures',
  });
  const erasedKey = assigned.find((a) => a.candidateKey === 'cand-erased-person') as {
    candidateKey: string;
    variant: string;
  };
  const hash = subjectHash(key, 'candidate', erasedKey.candidateKey);
  const erased = await app.inject({
    method: 'POST',
    url: '/v1/subject-parts/erase',
    headers: auth,
    payload: { candidates: [{ key: erasedKey.candidateKey, hash }], addresses: [], subject: hash },
  });
  expect(erased.statusCode, erased.body).toBe(200);
  expect(erased.json().status).toBe('erased');

  // A late exposure of the person (a follow-up recorded after the erasure): under the pseudonym.
  await env.publish('sendRecorded', [
    sendRecorded({
      experimentId: 'subj-exp',
      candidateKey: erasedKey.candidateKey,
      variant: erasedKey.variant,
      step: 'follow-up',
    }),
  ]);
  await waitFor(async () => (await env.query('SELECT 1 FROM exposure_events')).length === 3 || undefined, {
    timeoutMs: 30_000,
    description: 'the late exposure',
  });

  let replayedHits: string[] | undefined;
  let pseudonymous = 0;
  const replay = await replayFromLog(env, {
    inspect: async (pool) => {
      replayedHits = await mentions(pool, 'cand-erased-person');
      pseudonymous = (await pool.query('SELECT 1 FROM exposure_events WHERE candidate_key = $1', [`erased:${hash}`]))
        .rowCount as number;
    },
  });
  expect(replayedHits).toEqual([]);
  expect(pseudonymous).toBe(2);
  expect(replay.matches).toBe(true);
  expect(await withLivePool(env, (pool) => mentions(pool, 'cand-erased-person'))).toEqual([]);
}, 120_000);
