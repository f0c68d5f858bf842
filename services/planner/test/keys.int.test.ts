/**
 * Canonical keys at the planner's two ingresses (issue #15): requests for one send, spelled
 * differently and arriving through Kafka and HTTP, are planned as one SendRequested under the
 * canonical keys, and follow-up steps are planned under their canonical names.
 */
import { eventCodec, sendIdFor, type OutreachRequested, type SendRequested } from '@outreach/contracts';
import { readTopic, type ServiceTestEnv } from '@outreach/testkit';
import { afterEach, expect, it } from 'vitest';
import { auth, outreachRequested, plannerTestEnv } from './harness.js';

let planner: ServiceTestEnv;
afterEach(() => planner?.cleanup());

const request = (fields: Partial<OutreachRequested>) =>
  outreachRequested({ campaignId: 'camp-p', candidateId: 'cand-p', email: 'pat@example.com', ...fields });

it('plans one SendRequested for every spelling of a send, through Kafka and HTTP', async () => {
  // No request here names an experiment, so the experiment service is never called.
  planner = await plannerTestEnv({ EXPERIMENT_URL: 'http://127.0.0.1:9', SCHEDULER_INTERVAL_MS: '100' });
  const app = await planner.startApp();
  const followUps = (step: string) => [
    { step, delayMs: 86_400_000, contents: [{ variant: null, subject: 'Again', body: 'Any thoughts?' }] },
  ];
  const viaKafka = [
    request({ followUps: followUps('follow-up') }),
    request({ campaignId: ' CAMP-P', step: 'Intro', followUps: followUps('Follow-Up') }),
    request({ campaignId: 'camp-\uff50', candidateId: 'cand-p\u200b', email: 'PAT@Example.COM' }),
    request({ candidateId: '\ufeffcand-\uff50 ', step: ' INTRO\u2060', email: ' pat@example.com\u200b' }),
  ];
  await planner.publish('outreachRequested', viaKafka);
  const posted = await app.inject({
    method: 'POST',
    url: '/v1/outreach-requests',
    headers: auth,
    payload: {
      requestId: 'http-1',
      campaignId: 'Camp-P\u00ad',
      candidateId: 'cand-p ',
      email: 'Pat@EXAMPLE.com',
      step: 'INTRO',
      contents: [{ subject: 'Hello', body: 'Would you like to talk?' }],
    },
  });
  expect(posted.statusCode, posted.body).toBe(202);
  expect(posted.json()).toMatchObject({
    sendId: sendIdFor('camp-p', 'cand-p', 'intro'),
    conversationId: 'camp-p:cand-p',
  });
  // Every spelling has the same canonical candidate key, hence the same partition: once a later
  // request of that candidate is planned, every variant before it has been planned too.
  await planner.publish('outreachRequested', [request({ step: 'sentinel', candidateId: 'cand-p' })]);

  const sends = (
    await readTopic(planner.kafka, planner.topic('sendRequested'), (messages) =>
      messages.some((m) => (eventCodec.decode(m.value as Buffer) as SendRequested).step === 'sentinel'),
    )
  ).map((m) => eventCodec.decode(m.value as Buffer) as SendRequested);
  const intro = sends.filter((s) => s.step !== 'sentinel');
  expect(intro).toHaveLength(1);
  expect(intro[0]).toMatchObject({
    sendId: sendIdFor('camp-p', 'cand-p', 'intro'),
    campaignId: 'camp-p',
    candidateKey: 'cand-p',
    step: 'intro',
    emailNorm: 'pat@example.com',
  });
  // The follow-up is stored under its canonical step, once.
  const stored = await planner.query<{ step: string }>(
    `SELECT jsonb_array_elements(follow_ups)->>'step' AS step FROM sequences`,
  );
  expect(stored.map((r) => r.step)).toEqual(['follow-up']);
});
