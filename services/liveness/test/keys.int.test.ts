/**
 * Canonical keys at the liveness service's ingresses (issue #15): conversations are recorded under
 * the canonical campaign id (SendRecorded carries it; the projector folds what agents write), so an
 * operator's `Camp-G` must reach them through the graces and stalled-list routes. An event whose ids
 * hold an address is dead-lettered with a reason naming the field, and a 404 echoes no id.
 */
import { randomUUID } from 'node:crypto';
import { dlqTopicOf } from '@outreach/shared';
import { canonicalCampaignId, type MessageReceived, type SequencePlanned } from '@outreach/contracts';
import { readTopic, waitFor, type ServiceTestEnv } from '@outreach/testkit';
import type { FastifyInstance } from 'fastify';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { auth, livenessEnv } from './liveness-env.js';

let t: ServiceTestEnv;
let app: FastifyInstance;

beforeAll(async () => {
  t = await livenessEnv();
  app = await t.startApp();
});
afterAll(() => t?.cleanup());

/** The first dead-lettered copy of an event from the conversation topic, once there is one. */
async function deadLettered(eventId: string) {
  const messages = await readTopic(t.kafka, dlqTopicOf(t.topic('conversationEvents')), (read) =>
    read.some((m) => m.headers['event-id'] === eventId),
  );
  return messages.find((m) => m.headers['event-id'] === eventId);
}

function received(fields: Partial<MessageReceived>): MessageReceived {
  return {
    type: 'MessageReceived',
    eventId: randomUUID(),
    occurredAt: Date.now(),
    producer: 'agent',
    correlationId: 'corr-g',
    causationId: null,
    conversationId: 'camp-g:cand-g',
    campaignId: 'camp-g',
    candidateKey: 'cand-g',
    messageId: null,
    ...fields,
  };
}

const conversation = async (id: string) =>
  app.inject({ url: `/v1/conversations/${encodeURIComponent(id)}`, headers: auth });

it('graces set for a spelling of a campaign apply to its conversations and read back under any spelling', async () => {
  const canonical = 'camp-g';
  // An agent writes the campaign as it likes: the conversation is recorded under the canonical id.
  await t.publish('conversationEvents', [received({ campaignId: ' Camp-G' })]);
  await waitFor(async () => (await conversation('camp-g:cand-g')).statusCode === 200, {
    timeoutMs: 30_000,
    description: 'the conversation projected',
  });
  expect((await conversation('camp-g:cand-g')).json()).toMatchObject({ campaignId: canonical });
  expect(canonicalCampaignId(' Camp-G\u200b')).toBe(canonical);

  const put = await app.inject({
    method: 'PUT',
    url: `/v1/campaigns/${encodeURIComponent(' Camp-G\u200b')}/graces`,
    headers: auth,
    payload: { inboundMs: 1_000, outboundMs: 2_000, overdueMs: 3_000 },
  });
  expect(put.statusCode, put.body).toBe(200);
  expect(put.json()).toMatchObject({ campaignId: canonical, conversationsUpdated: 1 });
  for (const spelling of [canonical, 'CAMP-G', 'camp-\uff47']) {
    const read = await app.inject({ url: `/v1/campaigns/${encodeURIComponent(spelling)}/graces`, headers: auth });
    expect(read.json(), spelling).toMatchObject({ source: 'campaign', inboundMs: 1_000 });
  }
  // A one-second inbound grace: the conversation stalls, and the stalled list finds it by any spelling.
  await waitFor(
    async () => {
      const r = await app.inject({ url: '/v1/conversations/stalled?campaignId=CAMP-G%E2%80%8B', headers: auth });
      return (r.json() as { conversations: unknown[] }).conversations.length === 1;
    },
    { timeoutMs: 30_000, description: 'the stalled conversation listed under a spelling of its campaign' },
  );
});

it('refuses a campaign id holding an address (400), and echoes no id in a 404', async () => {
  for (const url of [
    '/v1/campaigns/ivan%40leak.example/graces',
    '/v1/conversations/stalled?campaignId=ivan%40leak.example',
  ]) {
    const r = await app.inject({ url, headers: auth });
    expect(r.statusCode, url).toBe(400);
    expect(r.json().message).toMatch(/campaignId must not contain an at-sign/);
    expect(r.body).not.toMatch(/leak/);
  }
  const missing = await conversation('camp-x:olga@leak.example');
  expect(missing.statusCode).toBe(404);
  expect(missing.body).not.toMatch(/olga|leak/);
});

it('dead-letters an event whose ids hold an address, naming the fields, and projects nothing of it', async () => {
  const event = received({
    conversationId: 'camp-h:pia@leak.example',
    candidateKey: 'pia@leak.example',
    campaignId: 'camp-h',
  });
  await t.publish('conversationEvents', [event]);
  const dead = await deadLettered(event.eventId);
  expect(dead?.headers['dlq-reason']).toBe(
    'conversationId, candidateKey must not contain an at-sign (conversation topics are free of addresses)',
  );
  expect((await conversation(event.conversationId)).statusCode).toBe(404);
});

it("dead-letters a plan whose steps hold an address (they would be served on the conversation's timeline)", async () => {
  const plan: SequencePlanned = {
    type: 'SequencePlanned',
    eventId: randomUUID(),
    occurredAt: Date.now(),
    producer: 'agent',
    correlationId: 'corr-p',
    causationId: null,
    conversationId: 'camp-p:cand-p',
    campaignId: 'camp-p',
    candidateKey: 'cand-p',
    steps: ['intro', 'ask-pia@leak.example'],
  };
  await t.publish('conversationEvents', [plan]);
  const dead = await deadLettered(plan.eventId);
  expect(dead?.headers['dlq-reason']).toBe(
    'steps must not contain an at-sign (conversation topics are free of addresses)',
  );
  expect((await conversation(plan.conversationId)).statusCode).toBe(404);
});
