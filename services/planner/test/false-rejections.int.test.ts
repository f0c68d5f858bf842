/**
 * Issue #31, "a false rejection": any publish token could put an OutreachRejected on another
 * publisher's requestId by sending a bad body under it after the real request was taken. Against
 * the real broker and database: a refusal is told (outreach.rejected.v1, the record) only where it
 * moves the request's record, so a bad body reusing an accepted or planned requestId is answered
 * (HTTP 4xx) or dead-lettered (Kafka) and publishes nothing under that id; the victim's request
 * reads `planned`. A bad request under an id of its own is still told, once (the control: without
 * it these tests would pass on a planner that tells nothing).
 */
import { randomUUID } from 'node:crypto';
import { dlqTopicOf } from '@outreach/shared';
import { eventCodec, type OutreachRejected, type OutreachRequested } from '@outreach/contracts';
import { readTopic, waitFor, type ReadMessage, type ServiceTestEnv } from '@outreach/testkit';
import type { FastifyInstance } from 'fastify';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { takeOutreachRequests } from '../src/workflow/outreach-requests.js';
import { outreachRequested, plannerTestEnv } from './harness.js';

const publisherA = { authorization: 'Bearer publisher-a-token' };
const publisherB = { authorization: 'Bearer publisher-b-token' };
let planner: ServiceTestEnv;
let app: FastifyInstance;

beforeAll(async () => {
  // No experiment service: these requests name no experiment.
  planner = await plannerTestEnv({
    EXPERIMENT_URL: 'http://127.0.0.1:9',
    API_TOKENS_PUBLISH: 'publisher-a-token,publisher-b-token',
    API_TOKENS_READ: 'test-token',
  });
  app = await planner.startApp();
}, 120_000);
afterAll(() => planner?.cleanup());

const ENVELOPE = new Set(['type', 'eventId', 'occurredAt', 'producer', 'correlationId', 'causationId']);
/** The request as an HTTP body: its fields without the envelope. */
const bodyOf = (event: OutreachRequested) =>
  Object.fromEntries(Object.entries(event).filter(([k]) => !ENVELOPE.has(k)));
const post = (body: unknown, headers: Record<string, string>) =>
  app.inject({ method: 'POST', url: '/v1/outreach-requests', headers, payload: body as Record<string, unknown> });
const statusOf = async (requestId: string) =>
  (
    await app.inject({
      url: `/v1/outreach-requests/${encodeURIComponent(requestId)}`,
      headers: { authorization: 'Bearer test-token' },
    })
  ).json() as { status: string };

/** Every OutreachRejected on the topic, once the one keyed `until` is there (the control's). */
async function rejectionsUpTo(until: string): Promise<OutreachRejected[]> {
  const messages = await readTopic(planner.kafka, planner.topic('outreachRejected'), (m: readonly ReadMessage[]) =>
    m.some((message) => message.key === until),
  );
  return messages.map((m) => eventCodec.decode(m.value as Buffer) as OutreachRejected);
}

/** The planner's outbox published up to now (what a refusal told has reached the topic). */
async function outboxPublished(): Promise<void> {
  await waitFor(async () => (await planner.query('SELECT 1 FROM outbox WHERE published_at IS NULL')).length === 0, {
    timeoutMs: 30_000,
    description: "the planner's outbox published",
  });
}

describe('a bad body reusing another publisher’s requestId', () => {
  it('over HTTP: answered 400 to its sender, no OutreachRejected for that id, the request stays accepted and then planned', async () => {
    const victim = outreachRequested({ candidateId: 'http-victim', requestId: `http-victim-${randomUUID()}` });
    const accepted = await post(bodyOf(victim), publisherA);
    expect(accepted.statusCode, accepted.body).toBe(202);
    // B, with its own valid publish token, before and after the planner read A's request.
    const forgeries = [
      { ...bodyOf(victim), campaignId: ' ' }, // the domain refuses it
      { ...bodyOf(victim), email: 'not an address' },
      { requestId: victim.requestId }, // the schema refuses it
      { ...bodyOf(victim), contents: 'x' },
    ];
    for (const body of forgeries) expect((await post(body, publisherB)).statusCode).toBe(400);
    await waitFor(async () => (await statusOf(victim.requestId)).status === 'planned', {
      timeoutMs: 30_000,
      description: "A's request planned",
    });
    for (const body of forgeries) expect((await post(body, publisherB)).statusCode).toBe(400);
    expect((await statusOf(victim.requestId)).status).toBe('planned');

    // The control: B's own bad request is told, under its own id.
    const control = `http-control-${randomUUID()}`;
    expect((await post({ ...bodyOf(victim), requestId: control, campaignId: ' ' }, publisherB)).statusCode).toBe(400);
    await outboxPublished();
    const told = await rejectionsUpTo(control);
    expect(told.filter((e) => e.requestId === control)).toHaveLength(1);
    expect(told.filter((e) => e.requestId === victim.requestId)).toEqual([]);
    expect((await statusOf(control)).status).toBe('rejected');
  });

  it('over Kafka: dead-lettered, no OutreachRejected for that id, the planned request stays planned', async () => {
    const candidateId = 'kafka-victim';
    const victim = outreachRequested({ candidateId, requestId: `kafka-victim-${randomUUID()}` });
    await planner.publish('outreachRequested', [victim]);
    await waitFor(async () => (await statusOf(victim.requestId)).status === 'planned', {
      timeoutMs: 30_000,
      description: "A's request planned",
    });
    // Same candidate (so the same partition, after A's), another event, a body the rules refuse;
    // then the control, after it on that partition.
    const forged = outreachRequested({ candidateId, requestId: victim.requestId, campaignId: ' ' });
    const control = outreachRequested({ candidateId, requestId: `kafka-control-${randomUUID()}`, campaignId: ' ' });
    await planner.publish('outreachRequested', [forged, forged, control]);
    const dead = await readTopic(planner.kafka, dlqTopicOf(planner.topic('outreachRequested')), (m) =>
      m.some((message) => eventCodec.decode(message.value as Buffer).eventId === control.eventId),
    );
    expect(dead.filter((m) => eventCodec.decode(m.value as Buffer).eventId === forged.eventId).length).toBeGreaterThan(
      0,
    );
    await outboxPublished();
    const told = await rejectionsUpTo(control.requestId);
    expect(told.filter((e) => e.requestId === victim.requestId)).toEqual([]);
    expect(told.filter((e) => e.requestId === control.requestId)).toEqual([
      expect.objectContaining({ reason: 'invalid_request', causationId: control.eventId }),
    ]);
    expect((await statusOf(victim.requestId)).status).toBe('planned');
  });

  it('in one consumer batch with the request it reuses the id of: the plan wins, nothing is told', async () => {
    const victim = outreachRequested({ candidateId: 'batch-victim', requestId: `batch-victim-${randomUUID()}` });
    const forged = outreachRequested({ candidateId: 'batch-victim', requestId: victim.requestId, email: 'x' });
    const control = outreachRequested({
      candidateId: 'batch-ctl',
      requestId: `batch-control-${randomUUID()}`,
      email: 'x',
    });
    // The consumer's own path (the ingress handler calls exactly this), with the app's adapters: the
    // forgery ahead of the request in the batch, as a producer racing the victim would place it.
    const verdicts = await takeOutreachRequests(app.outreachRequests, { via: 'kafka' }, [forged, victim, control]);
    expect(verdicts.map((v) => v.kind)).toEqual(['rejected', 'planned', 'rejected']);
    await outboxPublished();
    const told = await rejectionsUpTo(control.requestId);
    expect(told.filter((e) => e.requestId === victim.requestId)).toEqual([]);
    expect((await statusOf(victim.requestId)).status).toBe('planned');
    expect((await statusOf(control.requestId)).status).toBe('rejected');
  });
});
