/**
 * The sent log's retention (ADR 014, "Retention you can set"), against the real database, broker and
 * an SMTP sink, like the feedback and request-status purges: the walk runs every 200 ms, the test
 * ages the rows. A send that ended longer than SENT_LOG_RETENTION_DAYS ago loses its address,
 * candidate id and content and keeps its keys; a repeat of it (the same campaign, candidate and
 * step) after that is still refused, never mailed a second time. One partition, so a marker request
 * published after the repeat is consumed after it.
 */
import { inject, expect, it, afterAll, beforeAll } from 'vitest';
import { waitFor } from '@outreach/testkit';
import { senderTestEnv, sendRequested, type SenderTestEnv } from './harness.js';

const infra = { kafkaBrokers: inject('kafkaBrokers'), databaseUrl: inject('databaseUrl') };
let t: SenderTestEnv;
beforeAll(async () => {
  t = await senderTestEnv(infra, {
    partitions: 1,
    env: { SENT_LOG_RETENTION_DAYS: '30', SENT_LOG_PURGE_INTERVAL_MS: '200' },
  });
  await t.startApp();
}, 120_000);
afterAll(async () => {
  await t?.cleanup();
});

interface Row {
  send_id: string;
  status: string;
  email: string;
  email_norm: string;
  email_hash: string;
  candidate_id: string;
  candidate_key: string;
  subject: string;
  body: string;
}
const row = async (sendId: string) =>
  (await t.query<Row>('SELECT * FROM sends WHERE send_id = $1', [sendId]))[0] as Row;
const sentTo = (address: string) => t.sink.messages.filter((m) => m.to.includes(address)).length;

it('keeps a tombstone of a send past the retention, and a repeat of it is still refused', async () => {
  const ada = sendRequested({ campaignId: 'camp-ret', candidateId: 'cand-ada', email: 'ada@example.com' });
  const bob = sendRequested({ campaignId: 'camp-ret', candidateId: 'cand-bob', email: 'bob@example.com' });
  await t.publishRequests([ada, bob]);
  await waitFor(async () => (await row(ada.sendId))?.status === 'sent' && (await row(bob.sendId))?.status === 'sent', {
    timeoutMs: 30_000,
    description: 'both sent',
  });
  const before = await row(ada.sendId);
  // 31 days pass for Ada's send.
  await t.query(`UPDATE sends SET updated_at = now() - interval '31 days' WHERE send_id = $1`, [ada.sendId]);
  await waitFor(async () => (await row(ada.sendId)).email_norm.startsWith('retained:'), {
    timeoutMs: 30_000,
    description: "Ada's send retained",
  });
  expect(await row(ada.sendId)).toMatchObject({
    status: 'sent',
    email: '',
    email_norm: `retained:${before.email_hash}`,
    email_hash: before.email_hash,
    candidate_id: '',
    candidate_key: before.candidate_key,
    subject: '',
    body: '',
  });
  // No trace of the address; the candidate is known by its key alone (the id itself unless it is
  // address-shaped, ADR 007), which is what refuses the repeat below.
  expect(JSON.stringify(await row(ada.sendId))).not.toMatch(/ada@example\.com/);
  // Bob's is recent: whole.
  expect(await row(bob.sendId)).toMatchObject({ email: 'bob@example.com', candidate_id: 'cand-bob' });

  // The same request again (the planner replaying it) and a new one for Ada at the same step: the
  // same send, refused; then a marker, consumed after them.
  const again = sendRequested({ campaignId: 'camp-ret', candidateId: 'cand-ada', email: 'ada@example.com' });
  expect(again.sendId).toBe(ada.sendId);
  const marker = sendRequested({ campaignId: 'camp-ret', candidateId: 'cand-marker', email: 'mark@example.com' });
  await t.publishRequests([ada, again, marker]);
  await waitFor(async () => (await row(marker.sendId))?.status === 'sent', {
    timeoutMs: 30_000,
    description: 'the marker sent',
  });
  expect(sentTo('ada@example.com')).toBe(1);
  expect(
    await t.query('SELECT send_id FROM sends WHERE campaign_id = $1 AND candidate_key = $2', [
      'camp-ret',
      before.candidate_key,
    ]),
  ).toHaveLength(1);
  // Still the tombstone: the repeat wrote nothing of the address back.
  expect((await row(ada.sendId)).email_norm).toBe(`retained:${before.email_hash}`);
});
