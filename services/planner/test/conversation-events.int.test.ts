/**
 * The HTTP ingress for conversation events (issue #21), against the real broker and database: a
 * reply posted over HTTP reaches `conversation.events.v1` through the outbox, keyed and in canonical
 * form, and the planner's own consumer stops the conversation's scheduled steps on it; the same
 * event id twice is one event; a close and a completed step go the same way; a bad body is a 400
 * naming what is wrong, never a 5xx.
 */
import {
  eventCodec,
  type ConversationClosed,
  type MessageReceived,
  type OutreachEvent,
  type StepCompleted,
} from '@outreach/contracts';
import { readTopic, waitFor, type ReadMessage, type ServiceTestEnv } from '@outreach/testkit';
import type { FastifyInstance } from 'fastify';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { auth, plannerTestEnv } from './harness.js';

let t: ServiceTestEnv;
let app: FastifyInstance;

beforeAll(async () => {
  t = await plannerTestEnv({ EXPERIMENT_URL: 'http://127.0.0.1:9' });
  app = await t.startApp();
});
afterAll(() => t?.cleanup());

const postEvent = (conversationId: string, body: unknown) =>
  app.inject({
    method: 'POST',
    url: `/v1/conversations/${encodeURIComponent(conversationId)}/events`,
    headers: { ...auth, 'content-type': 'application/json' },
    payload: typeof body === 'string' ? body : JSON.stringify(body),
  });

const decoded = (messages: readonly ReadMessage[]) =>
  messages.map((m) => ({ message: m, event: eventCodec.decode(m.value as Buffer) as OutreachEvent }));

/** The conversation topic once every id in `eventIds` is on it. */
async function onTopic(eventIds: readonly string[]) {
  const messages = await readTopic(t.kafka, t.topic('conversationEvents'), (read) => {
    const seen = new Set(decoded(read).map(({ event }) => event.eventId));
    return eventIds.every((id) => seen.has(id));
  });
  return decoded(messages);
}

describe('POST /v1/conversations/:conversationId/events', () => {
  it('publishes a reply on the conversation topic, and the planner stops the scheduled steps on it', async () => {
    const conversationId = 'conv-http-reply';
    const planned = await app.inject({
      method: 'POST',
      url: '/v1/outreach-requests',
      headers: auth,
      payload: {
        requestId: 'r-reply',
        campaignId: 'camp-http',
        candidateId: 'cand-reply',
        email: 'cand-reply@example.com',
        step: 'intro',
        conversationId,
        sendAt: new Date(Date.now() + 86_400_000).toISOString(),
        contents: [{ subject: 'Hi', body: 'Body' }],
      },
    });
    expect(planned.statusCode, planned.body).toBe(202);
    const stepsUrl = `/v1/conversations/${conversationId}/steps`;
    const statuses = async () =>
      ((await app.inject({ url: stepsUrl, headers: auth })).json() as { steps: Array<{ status: string }> }).steps.map(
        (s) => s.status,
      );
    await waitFor(async () => (await statuses()).join() === 'scheduled', {
      timeoutMs: 30_000,
      description: 'the step scheduled',
    });

    const reply = await postEvent(` ${conversationId}\u200B`, {
      type: 'MessageReceived',
      campaignId: 'Camp-HTTP',
      candidateKey: 'cand-reply',
      messageId: 'inbox-42',
    });
    expect(reply.statusCode, reply.body).toBe(202);
    const {
      eventId,
      conversationId: canonical,
      duplicate,
    } = reply.json() as {
      eventId: string;
      conversationId: string;
      duplicate: boolean;
    };
    expect({ canonical, duplicate }).toEqual({ canonical: conversationId, duplicate: false });

    const found = (await onTopic([eventId])).find(({ event }) => event.eventId === eventId);
    expect(found?.event).toMatchObject({
      type: 'MessageReceived',
      producer: 'planner-http',
      conversationId,
      campaignId: 'camp-http',
      candidateKey: 'cand-reply',
      messageId: 'inbox-42',
      causationId: null,
    } satisfies Partial<MessageReceived>);
    expect(found?.message.key).toBe('cand-reply');
    expect(found?.message.headers).toMatchObject({ 'event-id': eventId, 'event-type': 'MessageReceived' });

    // The planner's conversation consumer read it as it reads an agent's reply.
    await waitFor(async () => (await statuses()).join() === 'cancelled', {
      timeoutMs: 30_000,
      description: 'the scheduled step cancelled by the reply',
    });
  });

  it('takes the same event id once, however often it is sent', async () => {
    const eventId = '5f0c3a9e-8d21-4c7b-9f3e-2a6b1c4d8e01';
    const close = {
      type: 'ConversationClosed',
      eventId,
      campaignId: 'camp-http',
      candidateKey: 'cand-dup',
      reason: 'hired',
    };
    const first = await postEvent('conv-http-dup', close);
    const second = await postEvent('conv-http-dup', close);
    expect([first.statusCode, second.statusCode]).toEqual([202, 202]);
    expect([first.json().duplicate, second.json().duplicate]).toEqual([false, true]);
    // A reply derives its id from its message id: sent twice, it is one event too.
    const reply = { type: 'MessageReceived', campaignId: 'camp-http', candidateKey: 'cand-dup', messageId: 'm-dup' };
    const replies = [await postEvent('conv-http-dup', reply), await postEvent('conv-http-dup', reply)];
    expect(replies.map((r) => r.json().duplicate)).toEqual([false, true]);
    expect(replies[0]?.json().eventId).toBe(replies[1]?.json().eventId);
    // A later event on the same key: once it is on the topic, everything before it is too.
    const marker = await postEvent('conv-http-dup', {
      type: 'StepCompleted',
      campaignId: 'camp-http',
      candidateKey: 'cand-dup',
      stepId: 'Call',
    });
    expect(marker.statusCode, marker.body).toBe(202);
    const events = (await onTopic([marker.json().eventId])).map(({ event }) => event);
    expect(events.filter((e) => e.eventId === eventId)).toHaveLength(1);
    expect(events.filter((e) => e.eventId === replies[0]?.json().eventId)).toHaveLength(1);
    expect(events.find((e) => e.eventId === eventId)).toMatchObject({
      type: 'ConversationClosed',
      reason: 'hired',
    } satisfies Partial<ConversationClosed>);
    expect(events.find((e) => e.eventId === marker.json().eventId)).toMatchObject({
      type: 'StepCompleted',
      stepId: 'call',
      conversationId: 'conv-http-dup',
    } satisfies Partial<StepCompleted>);
  });

  it('answers a bad body with a 400 that says what is wrong, never a 5xx', async () => {
    const valid = { type: 'MessageReceived', campaignId: 'camp-http', candidateKey: 'cand-bad', messageId: null };
    const cases: Array<[string, string, unknown, RegExp]> = [
      ['unknown type', 'conv-bad', { ...valid, type: 'CandidateWaved' }, /type/],
      ['no type', 'conv-bad', { campaignId: 'c', candidateKey: 'k' }, /type/],
      ['missing stepId', 'conv-bad', { ...valid, type: 'StepCompleted' }, /stepId/],
      ['a field of another type', 'conv-bad', { ...valid, stepId: 'call' }, /additional properties/],
      ['an event id that is no UUID', 'conv-bad', { ...valid, eventId: 'evt-1' }, /eventId/],
      ['an address as campaign id', 'conv-bad', { ...valid, campaignId: 'ada@example.com' }, /campaignId .*at-sign/],
      ['an address in the message id', 'conv-bad', { ...valid, messageId: '<x@mail.example>' }, /messageId .*at-sign/],
      ['an address as conversation id', 'ada@example.com', valid, /conversationId .*at-sign/],
      [
        'the liveness close',
        'conv-bad',
        { type: 'ConversationClosed', campaignId: 'c', candidateKey: 'k', reason: 'sequence_completed' },
        /liveness/,
      ],
      ['an empty candidate', 'conv-bad', { ...valid, candidateKey: ' ' }, /candidateKey is missing or empty/],
      ['a long campaign id', 'conv-bad', { ...valid, campaignId: 'c'.repeat(257) }, /campaignId/],
      ['not JSON', 'conv-bad', '{"type":', /JSON|body/i],
    ];
    for (const [label, conversationId, body, reason] of cases) {
      const response = await postEvent(conversationId, body);
      expect(response.statusCode, `${label}: ${response.body}`).toBe(400);
      expect(response.json().message, label).toMatch(reason);
      expect(response.body, label).not.toMatch(/ada@example\.com|x@mail/);
    }
    // Without a token nothing is taken (every scope and spelling: routes.int.test.ts).
    const anonymous = await app.inject({
      method: 'POST',
      url: '/v1/conversations/conv-bad/events',
      payload: valid,
    });
    expect(anonymous.statusCode).toBe(401);
  });
});
