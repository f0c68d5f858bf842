/**
 * Issue #18 at the planner, against the real broker and database: a given conversation id reaches
 * every event of its conversation (SendRequested, NextStepScheduled, SequencePlanned, StepCancelled)
 * in its canonical form, and a derived one when none is given; the liveness service's
 * `sequence_completed` close stops nothing; a request for a step already emitted or cancelled is
 * answered (HTTP 409 with the state), counted and logged on every ingress, while the same request
 * again (a redelivery, a retry) stays quiet.
 */
import { randomUUID } from 'node:crypto';
import {
  eventCodec,
  sendIdFor,
  type ConversationClosed,
  type MessageReceived,
  type OutreachEvent,
  type SequencePlanned,
} from '@outreach/contracts';
import { freePort, readTopic, sendRecorded, waitFor, type ServiceTestEnv } from '@outreach/testkit';
import { afterEach, describe, expect, it } from 'vitest';
import { outreachRequested as request, plannerTestEnv } from './harness.js';

const auth = { authorization: 'Bearer test-token', 'content-type': 'application/json' };
let planner: ServiceTestEnv | undefined;
afterEach(async () => {
  await planner?.cleanup();
  planner = undefined;
});

async function plannerEnv(): Promise<ServiceTestEnv> {
  // No experiment service: these requests name no experiment.
  planner = await plannerTestEnv({ EXPERIMENT_URL: 'http://127.0.0.1:9', SCHEDULER_INTERVAL_MS: '100' });
  return planner;
}

const envelope = (conversationId: string, candidateKey: string) => ({
  eventId: randomUUID(),
  occurredAt: Date.now(),
  producer: 'agent',
  correlationId: 'c',
  causationId: null,
  conversationId,
  campaignId: 'camp',
  candidateKey,
});

async function decoded(t: ServiceTestEnv, topic: string, until: (events: OutreachEvent[]) => boolean) {
  const decode = (m: { value: Buffer | null }) => eventCodec.decode(m.value as Buffer);
  return (await readTopic(t.kafka, topic, (messages) => until(messages.map(decode)), 30_000)).map(decode);
}

describe('conversation ids', () => {
  it('carries a given conversation id, canonical, to every event of its conversation, and a derived one otherwise', async () => {
    const t = await plannerEnv();
    await t.startApp();
    const followUps = [
      { step: 'Nudge', delayMs: 60_000, contents: [{ variant: null, subject: 'Again', body: 'Still?' }] },
    ];
    await t.publish('outreachRequested', [
      // Spelled with a full-width digit and a zero-width space: one conversation, `Thread-7`.
      request({ candidateId: 'ada', requestId: 'r-ada', conversationId: ' Thread-\uff17\u200b', followUps }),
      request({ candidateId: 'bob', requestId: 'r-bob', sendAt: Date.now() + 300 }),
    ]);
    const sends = await decoded(t, t.topic('sendRequested'), (e) => e.length >= 2);
    expect(
      sends
        .map((e) => [
          e.type,
          (e as { candidateKey: string }).candidateKey,
          (e as { conversationId: string }).conversationId,
        ])
        .sort(),
    ).toEqual([
      ['SendRequested', 'ada', 'Thread-7'],
      ['SendRequested', 'bob', 'camp:bob'],
    ]);

    // The head was sent: the follow-up is scheduled in the same conversation; a reply (spelled
    // another way) cancels it there.
    const sent = sendRecorded('ada', 'intro', { conversationId: 'Thread-7', requestId: 'r-ada' });
    await t.publish('sendRecorded', [sent]);
    await decoded(t, t.topic('conversationEvents'), (e) =>
      e.some((x) => x.type === 'NextStepScheduled' && x.stepId === 'nudge'),
    );
    const reply: MessageReceived = { type: 'MessageReceived', ...envelope('Thread-7\u200b ', 'ada'), messageId: null };
    await t.publish('conversationEvents', [reply]);
    const events = await decoded(
      t,
      t.topic('conversationEvents'),
      (e) =>
        e.some((x) => x.type === 'StepCancelled') &&
        e.some((x) => x.type === 'NextStepScheduled' && x.candidateKey === 'bob'),
    );
    const ada = events.filter(
      (e) => e.producer === 'planner' && (e as { candidateKey: string }).candidateKey === 'ada',
    );
    expect(ada.map((e) => [e.type, (e as { conversationId: string }).conversationId])).toEqual([
      ['SequencePlanned', 'Thread-7'],
      ['NextStepScheduled', 'Thread-7'],
      ['StepCancelled', 'Thread-7'],
    ]);
    expect(ada[0]).toMatchObject({ steps: ['intro', 'nudge'] });
    const bob = events.filter((e) => (e as { candidateKey: string }).candidateKey === 'bob');
    expect(bob.map((e) => [e.type, (e as { conversationId: string }).conversationId])).toEqual([
      ['SequencePlanned', 'camp:bob'],
      ['NextStepScheduled', 'camp:bob'],
    ]);
  });
});

describe('closes', () => {
  it("stops nothing on the liveness service's sequence_completed close, and stops a conversation on any other", async () => {
    const t = await plannerEnv();
    await t.startApp();
    const later = Date.now() + 3_600_000;
    // Two conversations of one candidate (one partition): the second close is handled after the first.
    await t.publish('outreachRequested', [
      request({ candidateId: 'dora', requestId: 'r-a', step: 'a', sendAt: later }),
      request({ candidateId: 'dora', requestId: 'r-b', step: 'b', sendAt: later, conversationId: 'dora-2' }),
    ]);
    await waitFor(
      async () => (await t.query(`SELECT 1 FROM scheduled_steps WHERE status = 'scheduled'`)).length === 2,
      {
        timeoutMs: 30_000,
        description: 'both steps scheduled',
      },
    );
    const close = (conversationId: string, reason: string): ConversationClosed => ({
      type: 'ConversationClosed',
      ...envelope(conversationId, 'dora'),
      producer: 'liveness',
      reason,
    });
    await t.publish('conversationEvents', [close('camp:dora', 'sequence_completed'), close('dora-2', 'hired')]);
    await waitFor(
      async () => (await t.query(`SELECT 1 FROM scheduled_steps WHERE status = 'cancelled'`)).length === 1,
      {
        timeoutMs: 30_000,
        description: 'the second close handled',
      },
    );
    expect(await t.query(`SELECT step, status FROM scheduled_steps ORDER BY step`)).toEqual([
      { step: 'a', status: 'scheduled' },
      { step: 'b', status: 'cancelled' },
    ]);
  });
});

describe('re-requests', () => {
  it('answers a request for a step already emitted or cancelled with 409 over HTTP, counts and logs it over Kafka, and keeps repeats quiet', async () => {
    const t = await plannerEnv();
    const port = await freePort();
    const url = `http://127.0.0.1:${port}`;
    // A process: its log lines are the evidence that re-requests are logged and repeats are not.
    const proc = t.startProcess({ HTTP_PORT: String(port) });
    await waitFor(async () => (await fetch(`${url}/health/ready`).catch(() => undefined))?.ok, {
      timeoutMs: 60_000,
      description: 'the planner process',
    });
    const post = (body: Record<string, unknown>) =>
      fetch(`${url}/v1/outreach-requests`, { method: 'POST', headers: auth, body: JSON.stringify(body) });
    const http = (requestId: string, step: string, sendAt?: string) => ({
      requestId,
      campaignId: 'camp',
      candidateId: 'cleo',
      email: 'cleo@example.com',
      step,
      contents: [{ subject: 'Hi', body: 'Body' }],
      ...(sendAt ? { sendAt } : {}),
    });
    const stepStatus = async (step: string) =>
      (await t.query<{ status: string }>(`SELECT status FROM scheduled_steps WHERE step = $1`, [step]))[0]?.status;

    // One step emitted, one cancelled by a reply.
    expect((await post(http('r-reminder', 'reminder', new Date(Date.now() + 300).toISOString()))).status).toBe(202);
    expect((await post(http('r-later', 'later', new Date(Date.now() + 3_600_000).toISOString()))).status).toBe(202);
    await waitFor(
      async () => (await stepStatus('reminder')) === 'emitted' && (await stepStatus('later')) === 'scheduled',
      {
        timeoutMs: 30_000,
        description: 'reminder emitted, later scheduled',
      },
    );
    const reply: MessageReceived = { type: 'MessageReceived', ...envelope('camp:cleo', 'cleo'), messageId: null };
    await t.publish('conversationEvents', [reply]);
    await waitFor(async () => (await stepStatus('later')) === 'cancelled', {
      timeoutMs: 30_000,
      description: 'later cancelled by the reply',
    });

    // Over Kafka, in one partition and in this order: the exact event twice and the same request
    // with a new event id (repeats: quiet), then two other requests for the finished steps.
    const again = request({ candidateId: 'cleo', requestId: 'r-reminder', step: 'reminder', sendAt: Date.now() + 300 });
    await t.publish('outreachRequested', [
      again,
      again,
      { ...again, eventId: randomUUID() },
      request({ candidateId: 'cleo', requestId: 'r-later', step: 'later', sendAt: Date.now() + 60_000 }),
      request({ candidateId: 'cleo', requestId: 'r-reminder-2', step: 'reminder' }),
      request({ candidateId: 'cleo', requestId: 'r-later-2', step: 'later', sendAt: Date.now() + 60_000 }),
    ]);

    // Over HTTP: a new request is answered with the state; the original one again is accepted.
    const emitted = await post(http('r-http', 'reminder'));
    expect(emitted.status).toBe(409);
    expect(await emitted.json()).toEqual({
      error: 'CONFLICT',
      message: 'the step was already emitted: nothing was planned',
      details: { reason: 'step_already_emitted', state: 'emitted', sendId: sendIdFor('camp', 'cleo', 'reminder') },
    });
    const cancelled = await post(http('r-http-2', 'Later '));
    expect(cancelled.status).toBe(409);
    expect(await cancelled.json()).toMatchObject({ details: { reason: 'step_already_cancelled', state: 'cancelled' } });
    expect((await post(http('r-reminder', 'reminder'))).status).toBe(202);
    // A sentinel behind everything above, in the same partition: once it is planned, all of it was handled.
    expect((await post(http('r-sentinel', 'sentinel'))).status).toBe(202);
    await decoded(t, t.topic('sendRequested'), (e) =>
      e.some((x) => x.type === 'SendRequested' && x.step === 'sentinel'),
    );

    const metrics = (await (await fetch(`${url}/metrics`)).text()).split('\n');
    const count = (state: string, ingress: string) =>
      Number(
        metrics
          .find(
            (line) =>
              line.startsWith('outreach_planner_rerequests_total{') &&
              line.includes(`state="${state}"`) &&
              line.includes(`ingress="${ingress}"`),
          )
          ?.split(' ')
          .at(-1) ?? 0,
      );
    expect([
      count('emitted', 'kafka'),
      count('cancelled', 'kafka'),
      count('emitted', 'http'),
      count('cancelled', 'http'),
    ]).toEqual([1, 1, 1, 1]);
    const warnings = proc.stdoutLines
      .filter((line) => line.includes('"rerequest"'))
      .map(
        (line) => JSON.parse(line) as { level: number | string; requestId: string; rerequest: string; ingress: string },
      );
    expect(warnings.map((w) => [w.requestId, w.rerequest, w.ingress]).sort()).toEqual([
      ['r-http', 'emitted', 'http'],
      ['r-http-2', 'cancelled', 'http'],
      ['r-later-2', 'cancelled', 'kafka'],
      ['r-reminder-2', 'emitted', 'kafka'],
    ]);
    expect(warnings.every((w) => w.level === 40 || w.level === 'warn')).toBe(true);
    expect(proc.stdoutLines.join('\n')).not.toMatch(/cleo@example\.com/);

    // Nothing was planned for any of them: one send for the reminder, one schedule for each step.
    // (The sentinel's events come last in the candidate's partitions: read up to them, all is read.)
    const sends = await decoded(t, t.topic('sendRequested'), (e) =>
      e.some((x) => x.type === 'SendRequested' && x.step === 'sentinel'),
    );
    expect(sends.filter((e) => e.type === 'SendRequested' && e.step === 'reminder')).toHaveLength(1);
    const conversation = await decoded(t, t.topic('conversationEvents'), (e) =>
      e.some((x) => x.type === 'SequencePlanned' && x.steps[0] === 'sentinel'),
    );
    expect(conversation.filter((e): e is SequencePlanned => e.type === 'SequencePlanned').map((e) => e.steps)).toEqual([
      ['reminder'],
      ['later'],
      ['sentinel'],
    ]);
    const schedules = conversation
      .filter((e) => e.type === 'NextStepScheduled')
      .map((e) => (e as { stepId: string }).stepId);
    expect(schedules.sort()).toEqual(['later', 'reminder']);
    expect(await t.query(`SELECT step, status FROM scheduled_steps ORDER BY step`)).toEqual([
      { step: 'later', status: 'cancelled' },
      { step: 'reminder', status: 'emitted' },
    ]);
  });
});
