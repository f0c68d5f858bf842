/**
 * The liveness projector against the real broker and database: flags within grace + 2 s, overdue
 * steps, exactly-once flags among healthy conversations, recovery and re-flagging, redelivery
 * without false flags, the rebuild, and the seed-003 silent drop reproduced with BullMQ.
 */
import { randomUUID } from 'node:crypto';
import {
  eventCodec,
  type ConversationClosed,
  type ConversationStalled,
  type MessageReceived,
  type NextStepScheduled,
  type OutreachEvent,
  type StepCompleted,
} from '@outreach/contracts';
import { readTopic, waitFor, type ServiceTestEnv } from '@outreach/testkit';
import { Queue, Worker, type Job } from 'bullmq';
import { Redis } from 'ioredis';
import type { FastifyInstance } from 'fastify';
import { afterEach, describe, expect, it } from 'vitest';
import { auth, livenessEnv, rebuildFromLog, sweepsDone } from './liveness-env.js';

const GRACE_INBOUND_MS = 2_000;
const GRACE_OVERDUE_MS = 1_000;
const REPLY_WINDOW_MS = 3_600_000;
let t: ServiceTestEnv;
afterEach(() => t?.cleanup());

/** The service's default graces here: a short inbound grace and overdue grace, the rest an hour. */
const LIVENESS_DEFAULTS = {
  inboundMs: GRACE_INBOUND_MS,
  outboundMs: 3_600_000,
  overdueMs: GRACE_OVERDUE_MS,
  replyWindowMs: REPLY_WINDOW_MS,
};

const envelope = (conversationId: string) => ({
  eventId: randomUUID(),
  occurredAt: Date.now(),
  producer: 'agent',
  correlationId: conversationId,
  causationId: null,
  conversationId,
  campaignId: 'camp',
  candidateKey: conversationId.split(':')[1] ?? conversationId,
});
const received = (c: string): MessageReceived => ({ type: 'MessageReceived', ...envelope(c), messageId: null });
const scheduled = (c: string, stepId: string, dueAt: number): NextStepScheduled => ({
  type: 'NextStepScheduled',
  ...envelope(c),
  stepId,
  dueAt,
});
const completed = (c: string, stepId: string): StepCompleted => ({ type: 'StepCompleted', ...envelope(c), stepId });
const closed = (c: string): ConversationClosed => ({ type: 'ConversationClosed', ...envelope(c), reason: 'hired' });

async function stalledRows(): Promise<Array<{ conversationId: string; reason: string; count: number }>> {
  return t.query(
    `SELECT conversation_id AS "conversationId", stalled_reason AS reason, stall_count AS count FROM conversations WHERE stalled_reason IS NOT NULL`,
  );
}

/** Waits until the sweeper has run `n` more times: "nothing more was flagged" needs sweeps to have happened. */
async function afterSweeps(app: FastifyInstance, n: number): Promise<void> {
  const start = await sweepsDone(app);
  await waitFor(async () => (await sweepsDone(app)) >= start + n, {
    timeoutMs: 20_000,
    description: `${n} more sweeps`,
  });
}

describe('liveness projector', () => {
  it('flags an inbound message with no next step as no_next_step within grace + 2 s, once', async () => {
    t = await livenessEnv(LIVENESS_DEFAULTS);
    const app = await t.startApp();
    await t.publish('conversationEvents', [received('camp:quiet')]);
    await waitFor(async () => (await stalledRows()).length === 1, {
      timeoutMs: GRACE_INBOUND_MS + 2_000,
      description: 'the flag within grace + 2 s',
    });
    await afterSweeps(app, 3);
    expect(await stalledRows()).toEqual([{ conversationId: 'camp:quiet', reason: 'no_next_step', count: 1 }]);
    const conversation = (await app.inject({ url: '/v1/conversations/camp:quiet', headers: auth })).json();
    expect(conversation).toMatchObject({
      stalledReason: 'no_next_step',
      obligationKind: 'inbound',
      timeline: [expect.objectContaining({ type: 'MessageReceived' })],
    });
    const events = await readTopic(t.kafka, t.topic('liveness'), (m) => m.length >= 1);
    expect(events.map((m) => eventCodec.decode(m.value as Buffer))).toEqual([
      expect.objectContaining({ type: 'ConversationStalled', conversationId: 'camp:quiet', reason: 'no_next_step' }),
    ]);
    expect((await app.inject({ url: '/metrics' })).body).toMatch(
      /outreach_liveness_stalled_conversations\{[^}]*reason="no_next_step"[^}]*\} 1/,
    );
  });

  it('flags a scheduled step that never executes as next_step_overdue after its deadline plus grace', async () => {
    t = await livenessEnv(LIVENESS_DEFAULTS);
    await t.startApp();
    const dueAt = Date.now() + 1_000;
    await t.publish('conversationEvents', [received('camp:late'), scheduled('camp:late', 'follow-up', dueAt)]);
    const [row] = await waitFor(
      async () => {
        const rows = await stalledRows();
        return rows.length === 1 ? rows : undefined;
      },
      { timeoutMs: 1_000 + GRACE_OVERDUE_MS + 4_000, description: 'the overdue flag' },
    );
    expect(row).toMatchObject({ reason: 'next_step_overdue' });
    const [flag] = await t.query<{ flaggedAt: Date }>(`SELECT flagged_at AS "flaggedAt" FROM conversations`);
    expect(flag?.flaggedAt.getTime()).toBeGreaterThanOrEqual(dueAt + GRACE_OVERDUE_MS - 1_000);
  });

  it('1,000 healthy conversations mixed with 50 planted stalls give exactly 50 flags, with two projector instances', async () => {
    t = await livenessEnv(LIVENESS_DEFAULTS);
    const app = await t.startApp();
    // A second instance in the same group: it projects its share of partitions and sweeps too.
    await t.startApp();
    const events: OutreachEvent[] = [];
    const far = Date.now() + 3_600_000;
    for (let i = 0; i < 1_000; i++) {
      const id = `camp:healthy-${i}`;
      events.push(received(id));
      events.push(i % 3 === 0 ? closed(id) : scheduled(id, `reply-${i}`, far));
      if (i % 5 === 0) events.push(completed(id, `reply-${i}`), scheduled(id, `next-${i}`, far));
    }
    for (let i = 0; i < 50; i++) events.push(received(`camp:planted-${i}`));
    await t.publish('conversationEvents', events);
    await waitFor(async () => (await stalledRows()).length >= 50, { timeoutMs: 30_000, description: '50 flags' });
    await afterSweeps(app, 5);
    const flags = await stalledRows();
    expect(flags).toHaveLength(50);
    expect(flags.every((f) => f.conversationId.startsWith('camp:planted-') && f.count === 1)).toBe(true);
    const page1 = (
      await app.inject({ url: '/v1/conversations/stalled?campaignId=camp&reason=no_next_step&limit=30', headers: auth })
    ).json();
    const page2 = (
      await app.inject({ url: `/v1/conversations/stalled?campaignId=camp&limit=30&after=${page1.next}`, headers: auth })
    ).json();
    expect(page1.conversations).toHaveLength(30);
    expect(page2.conversations).toHaveLength(20);
    expect(
      new Set([...page1.conversations, ...page2.conversations].map((c: { conversationId: string }) => c.conversationId))
        .size,
    ).toBe(50);
    expect(page2.next).toBeNull();
    expect((await app.inject({ url: '/v1/conversations/stalled?after=garbage', headers: auth })).statusCode).toBe(400);
  });

  it('emits ConversationRecovered when a stalled conversation heals, and flags a later stall again', async () => {
    t = await livenessEnv(LIVENESS_DEFAULTS);
    const app = await t.startApp();
    await t.publish('conversationEvents', [received('camp:heal')]);
    await waitFor(async () => (await stalledRows()).length === 1, { timeoutMs: 10_000, description: 'the first flag' });
    await t.publish('conversationEvents', [scheduled('camp:heal', 'reply', Date.now() + 3_600_000)]);
    await waitFor(async () => (await stalledRows()).length === 0, { timeoutMs: 10_000, description: 'recovery' });
    await t.publish('conversationEvents', [received('camp:heal')]);
    await waitFor(async () => (await stalledRows()).length === 1, {
      timeoutMs: 10_000,
      description: 'the second flag',
    });
    expect((await stalledRows())[0]).toMatchObject({ count: 2 });
    const events = (await readTopic(t.kafka, t.topic('liveness'), (m) => m.length >= 3)).map((m) =>
      eventCodec.decode(m.value as Buffer),
    );
    expect(events.map((e) => e.type)).toEqual(['ConversationStalled', 'ConversationRecovered', 'ConversationStalled']);
    expect(new Set(events.map((e) => e.eventId)).size).toBe(3);
    await app.inject({ url: '/health/ready' });
  });

  it('raises no false flag when an old event is redelivered after a restart', async () => {
    t = await livenessEnv(LIVENESS_DEFAULTS);
    const app = await t.startApp();
    const message = received('camp:redelivered');
    await t.publish('conversationEvents', [message, scheduled('camp:redelivered', 'reply', Date.now() + 3_600_000)]);
    await waitFor(async () => (await t.query(`SELECT 1 FROM conversation_events`)).length === 2, {
      timeoutMs: 10_000,
      description: 'both projected',
    });
    await app.close();
    // The restarted projector sees the old message again, appended later.
    await t.publish('conversationEvents', [message]);
    const restarted = await t.startApp({ CONSUMER_GROUP: `${t.env.CONSUMER_GROUP}-restarted` });
    await waitFor(
      async () => (await readTopic(t.kafka, t.topic('conversationEvents'), (m) => m.length >= 3)).length === 3,
      { timeoutMs: 10_000, description: 'the redelivery on the topic' },
    );
    await afterSweeps(restarted, 3);
    await waitFor(async () => Date.now() > message.occurredAt + GRACE_INBOUND_MS + 500, {
      timeoutMs: GRACE_INBOUND_MS + 2_000,
      description: 'the inbound grace to pass',
    });
    await afterSweeps(restarted, 3);
    expect(await stalledRows()).toEqual([]);
    expect(await t.query(`SELECT count(*)::int AS n FROM conversation_events`)).toEqual([{ n: 2 }]);
  });

  it('rebuilding from the log reproduces the live projection exactly', async () => {
    t = await livenessEnv(LIVENESS_DEFAULTS);
    const app = await t.startApp();
    await app.inject({
      method: 'PUT',
      url: '/v1/campaigns/camp/graces',
      headers: { authorization: 'Bearer test-token' },
      payload: { inboundMs: 5_000, outboundMs: 60_000, overdueMs: 1_000 },
    });
    const events: OutreachEvent[] = [];
    for (let i = 0; i < 40; i++) {
      const id = `camp:r-${i}`;
      events.push(received(id), scheduled(id, 'x', Date.now() + 10_000));
      if (i % 4 === 0) events.push(completed(id, 'x'));
      if (i % 7 === 0) events.push(closed(id));
    }
    await t.publish('conversationEvents', events);
    await waitFor(async () => (await t.query('SELECT 1 FROM conversation_events')).length === events.length, {
      timeoutMs: 20_000,
      description: 'all projected',
    });
    const result = await rebuildFromLog(t, LIVENESS_DEFAULTS);
    expect(result).toMatchObject({ matches: true, conversations: 40, messages: events.length, differences: 0 });
  });

  it('seed 003: a job that reschedules itself under its own id is silently dropped by BullMQ, and this service flags the conversation', async () => {
    t = await livenessEnv(LIVENESS_DEFAULTS);
    await t.startApp();
    // BullMQ wants a constructed client in native ESM; workers need maxRetriesPerRequest null.
    const connection = new Redis({ host: '127.0.0.1', port: 6379, maxRetriesPerRequest: null });
    const queueName = `agent-turns-${randomUUID()}`;
    const queue = new Queue(queueName, { connection });
    const conversationId = 'camp:seed-003';
    const turns: string[] = [];
    let rescheduleResult: { id?: string | undefined } | undefined;

    // The agent: each turn answers, then defers its own continuation under the conversation's
    // deterministic job id (the "standard trick" for idempotent enqueues), and says so.
    const worker = new Worker(
      queueName,
      async (job: Job<{ turn: number }>) => {
        turns.push(`turn-${job.data.turn}`);
        await t.publish('conversationEvents', [completed(conversationId, `turn-${job.data.turn}`)]);
        const next = job.data.turn + 1;
        rescheduleResult = await queue.add(
          'turn',
          { turn: next },
          { jobId: `conversation:${conversationId}`, delay: 500 },
        );
        await t.publish('conversationEvents', [scheduled(conversationId, `turn-${next}`, Date.now() + 500)]);
      },
      { connection },
    );
    try {
      await t.publish('conversationEvents', [received(conversationId)]);
      await queue.add('turn', { turn: 1 }, { jobId: `conversation:${conversationId}` });

      await waitFor(async () => (await stalledRows()).length === 1, {
        timeoutMs: 15_000,
        description: 'the liveness flag',
      });
      // The queue reports nothing wrong: no failed job, nothing delayed, the turn ran once, and the
      // self-reschedule "succeeded" by returning the running job itself.
      expect(turns).toEqual(['turn-1']);
      expect(rescheduleResult?.id).toBe(`conversation:${conversationId}`);
      expect(await queue.getFailedCount()).toBe(0);
      expect(await queue.getDelayedCount()).toBe(0);
      expect(await queue.getWaitingCount()).toBe(0);
      expect((await stalledRows())[0]).toMatchObject({ conversationId, reason: 'next_step_overdue' });
      const flagged = (await readTopic(t.kafka, t.topic('liveness'), (m) => m.length >= 1)).map(
        (m) => eventCodec.decode(m.value as Buffer) as ConversationStalled,
      );
      expect(flagged[0]).toMatchObject({ conversationId, reason: 'next_step_overdue' });
    } finally {
      await worker.close();
      await queue.obliterate({ force: true });
      await queue.close();
      connection.disconnect();
    }
  });
});
