/**
 * An erased person opting back in (ADR 014): `DELETE /v1/suppressions/:email` lifts the hashed
 * suppression the erasure kept for the address (and the erasure's record of it), so a new request
 * is mailed again; before, it ends suppressed.
 */
import { loadSuppressionKey, subjectHash } from '@outreach/shared';
import { TEST_SUPPRESSION_KEY_ENV, waitFor } from '@outreach/testkit';
import { afterAll, expect, inject, it } from 'vitest';
import { API_TOKEN, senderTestEnv, sendRequested, type SenderTestEnv } from './harness.js';

const infra = { kafkaBrokers: inject('kafkaBrokers'), databaseUrl: inject('databaseUrl') };
const key = loadSuppressionKey({ ...TEST_SUPPRESSION_KEY_ENV, SUPPRESSION_KEY_FILE: '' })!;
const headers = { authorization: `Bearer ${API_TOKEN}` };
let t: SenderTestEnv | undefined;
afterAll(() => t?.cleanup());

it('lifts an erased address’s hashed suppression: suppressed before, mailed after, 404 once lifted', async () => {
  t = await senderTestEnv(infra);
  const env = t;
  const app = await env.startApp();
  const address = 'back.again@example.com';
  const hash = subjectHash(key, 'address', address);
  const erased = await app.inject({
    method: 'POST',
    url: '/v1/subject-parts/erase',
    headers,
    payload: { candidates: [], addresses: [{ email: address, hash }], subject: hash },
  });
  expect(erased.statusCode, erased.body).toBe(200);
  const statusOf = async (campaignId: string) =>
    (await env.query<{ status: string }>('SELECT status FROM sends WHERE campaign_id = $1', [campaignId]))[0]?.status;

  await env.publishRequests([sendRequested({ campaignId: 'camp-before', candidateId: 'Back-Again', email: address })]);
  await waitFor(async () => (await statusOf('camp-before')) === 'suppressed' || undefined, {
    timeoutMs: 30_000,
    description: 'the request before the opt-in suppressed',
  });

  const lifted = await app.inject({
    method: 'DELETE',
    url: `/v1/suppressions/${encodeURIComponent('Back.Again@Example.com')}`,
    headers,
  });
  expect(lifted.statusCode, lifted.body).toBe(200);
  expect(await env.query('SELECT 1 FROM suppression_hashes WHERE address_hash = $1', [hash])).toEqual([]);
  expect(await env.query('SELECT 1 FROM subject_erasures WHERE subject_hash = $1', [hash])).toEqual([]);

  await env.publishRequests([sendRequested({ campaignId: 'camp-after', candidateId: 'Back-Again', email: address })]);
  await waitFor(async () => (await statusOf('camp-after')) === 'sent' || undefined, {
    timeoutMs: 30_000,
    description: 'the request after the opt-in sent',
  });
  expect(env.sink.deliveredTo(address)).toHaveLength(1);

  const again = await app.inject({ method: 'DELETE', url: `/v1/suppressions/${encodeURIComponent(address)}`, headers });
  expect(again.statusCode).toBe(404);
}, 90_000);
