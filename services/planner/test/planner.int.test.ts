/**
 * The planner against the real broker, database and the real experiment service (as a process):
 * idempotent planning, waiting out the experiment service, exactly-once scheduling with two
 * instances, the seed-003 reschedule from inside a step, reply/close cancellation, bad input.
 */
import { randomUUID } from 'node:crypto';
import {
  eventCodec,
  sendIdFor,
  type ConversationClosed,
  type MessageReceived,
  type OutreachEvent,
  type OutreachRequested,
  type SendRequested,
  type SequencePlanned,
} from '@outreach/contracts';
import {
  freePort,
  readTopic,
  sendRecorded,
  waitFor,
  type RunningProcess,
  type ServiceTestEnv,
} from '@outreach/testkit';
import { afterEach, describe, expect, it } from 'vitest';
import { auth, defineExperiment, experimentTestEnv, outreachRequested, plannerTestEnv } from './harness.js';

let planner: ServiceTestEnv;
let experiment: ServiceTestEnv;
afterEach(async () => {
  await planner?.cleanup();
  await experiment?.cleanup();
  (planner as ServiceTestEnv | undefined) = undefined;
  (experiment as ServiceTestEnv | undefined) = undefined;
});

/** The real experiment service as a process on a fixed port (so it can be stopped and restarted). */
async function experimentService(): Promise<{ url: string; start: () => Promise<RunningProcess> }> {
  experiment = await experimentTestEnv();
  const port = await freePort();
  const url = `http://127.0.0.1:${port}`;
  const start = async () => {
    const proc = experiment.startProcess({ HTTP_PORT: String(port) });
    await waitFor(async () => (await fetch(`${url}/health/live`)).ok, {
      timeoutMs: 30_000,
      description: 'the experiment service',
    });
    return proc;
  };
  return { url, start };
}

async function plannerEnv(experimentUrl: string) {
  planner = await plannerTestEnv({
    EXPERIMENT_URL: experimentUrl,
    EXPERIMENT_TOKEN: 'test-token',
    SCHEDULER_INTERVAL_MS: '100',
    EXPERIMENT_TIMEOUT_MS: '1000',
  });
  return planner;
}

const request = (fields: Partial<OutreachRequested> & { candidateId: string }) =>
  outreachRequested({ requestId: `req-${fields.candidateId}-${fields.step ?? 'intro'}`, ...fields });

/** The sender's SendRecorded(sent) for one step of a candidate in campaign `camp`. */
// Without a conversationId, as a sender that does not carry it yet writes it: the liveness service files it by its step.
const sentRecord = (candidateKey: string, step: string, recordedAt = Date.now()) =>
  sendRecorded(candidateKey, step, { recordedAt });

async function topicEvents<T extends OutreachEvent>(
  topic: string,
  until: (events: T[]) => boolean,
  timeoutMs = 30_000,
): Promise<T[]> {
  const decode = (m: { value: Buffer | null }) => eventCodec.decode(m.value as Buffer) as T;
  return (await readTopic(planner.kafka, topic, (messages) => until(messages.map(decode)), timeoutMs)).map(decode);
}

const ofType =
  <T extends OutreachEvent>(type: T['type']) =>
  (events: OutreachEvent[]) =>
    events.filter((e): e is T => e.type === type);

describe('planner', () => {
  it('plans the same request published 3 times as one SendRequested with the deterministic sendId', async () => {
    await plannerEnv('http://127.0.0.1:9');
    await planner.startApp();
    const same = request({ candidateId: ' Ada ', email: ' Ada@Example.com ' });
    await planner.publish('outreachRequested', [same, same, same]);
    await waitFor(async () => (await planner.query(`SELECT 1 FROM outbox_event_ids`)).length >= 1, {
      timeoutMs: 20_000,
      description: 'the SendRequested published',
    });
    const sends = await topicEvents<SendRequested>(planner.topic('sendRequested'), (e) => e.length >= 1);
    expect(sends).toHaveLength(1);
    expect(sends[0]).toMatchObject({
      sendId: sendIdFor('camp', 'Ada', 'intro'),
      candidateKey: 'Ada',
      emailNorm: 'ada@example.com',
      variant: null,
    });
    // One SendRequested and the one SequencePlanned of its conversation, however often it was planned:
    // two events enqueued in all (a published row leaves the outbox; its id stays in outbox_event_ids).
    await waitFor(async () => (await planner.query('SELECT 1 FROM outbox')).length === 0, {
      timeoutMs: 20_000,
      description: 'the outbox drained',
    });
    expect(await planner.query(`SELECT 1 FROM outbox_event_ids`)).toHaveLength(2);
    const planned = await topicEvents<SequencePlanned>(planner.topic('conversationEvents'), (e) => e.length >= 1);
    expect(planned.map((e) => e.type)).toEqual(['SequencePlanned']);
  });

  it('waits while the experiment service is down, then plans every request with its sticky variant', async () => {
    const service = await experimentService();
    let proc = await service.start();
    expect((await defineExperiment(service.url, 'subject')).status).toBe(201);
    await proc.stop('SIGTERM');

    await plannerEnv(service.url);
    const app = await planner.startApp();
    const requests = Array.from({ length: 20 }, (_, i) =>
      request({
        candidateId: `cand-${i}`,
        experimentId: 'subject',
        contents: [
          { variant: 'A', subject: 'Subject A', body: 'Body A' },
          { variant: 'B', subject: 'Subject B', body: 'Body B' },
        ],
      }),
    );
    await planner.publish('outreachRequested', requests);
    await waitFor(
      async () =>
        /outreach_consumer_handler_retries_total\{[^}]*\} [1-9]/.test((await app.inject({ url: '/metrics' })).body),
      {
        timeoutMs: 20_000,
        description: 'the planner retrying against the stopped experiment service',
      },
    );
    expect(await planner.query('SELECT 1 FROM outbox')).toHaveLength(0);

    proc = await service.start();
    const sends = await topicEvents<SendRequested>(planner.topic('sendRequested'), (e) => e.length >= 20, 60_000);
    expect(new Set(sends.map((s) => s.candidateKey)).size).toBe(20);
    for (const send of sends) {
      const stored = (await (
        await fetch(`${service.url}/v1/experiments/subject/assignments/${send.candidateKey}`, { headers: auth })
      ).json()) as { variant: string };
      expect(send.variant).toBe(stored.variant);
      expect(send.subject).toBe(`Subject ${stored.variant}`);
    }
    const dlq = await planner.query(`SELECT 1 FROM outbox WHERE topic LIKE '%.dlq'`);
    expect(dlq).toHaveLength(0);
    await proc.stop('SIGTERM');
  });

  it('two planner instances emit each of 500 due steps exactly once', async () => {
    await plannerEnv('http://127.0.0.1:9');
    await planner.startApp();
    await planner.startApp();
    const dueAt = Date.now() + 1_500;
    await planner.publish(
      'outreachRequested',
      Array.from({ length: 500 }, (_, i) => request({ candidateId: `due-${i}`, step: 'reminder', sendAt: dueAt })),
    );
    await waitFor(
      async () => (await planner.query(`SELECT 1 FROM scheduled_steps WHERE status = 'emitted'`)).length === 500,
      {
        timeoutMs: 60_000,
        description: '500 steps emitted',
      },
    );
    const sends = await topicEvents<SendRequested>(planner.topic('sendRequested'), (e) => e.length >= 500, 60_000);
    expect(sends).toHaveLength(500);
    expect(new Set(sends.map((s) => s.sendId)).size).toBe(500);
    expect(sends.every((s) => s.scheduledFor !== null && s.occurredAt >= dueAt - 1_000)).toBe(true);
    const scheduled = ofType<OutreachEvent & { type: 'NextStepScheduled' }>('NextStepScheduled')(
      await topicEvents(planner.topic('conversationEvents'), (e) => e.length >= 500),
    );
    expect(scheduled).toHaveLength(500);
  });

  it('seed 003: a step handled by the agent reschedules its conversation from inside; the next step exists, fires and is visible', async () => {
    await plannerEnv('http://127.0.0.1:9');
    await planner.startApp();
    const conversationId = 'camp:seed-003';
    await planner.publish('outreachRequested', [
      request({ candidateId: 'seed-003', step: 'turn-1', sendAt: Date.now() + 300, conversationId }),
    ]);
    // The agent, handling turn-1 as it fires: schedules its own continuation, and re-sends the
    // request for the turn it is in the middle of (the move a deduplicating queue swallows).
    await topicEvents<SendRequested>(planner.topic('sendRequested'), (e) => e.some((s) => s.step === 'turn-1'));
    await planner.publish('outreachRequested', [
      request({ candidateId: 'seed-003', step: 'turn-2', sendAt: Date.now() + 500, conversationId }),
      request({ candidateId: 'seed-003', step: 'turn-1', sendAt: Date.now() + 500, conversationId }),
    ]);
    const sends = await topicEvents<SendRequested>(planner.topic('sendRequested'), (e) =>
      e.some((s) => s.step === 'turn-2'),
    );
    expect(sends.map((s) => s.step).sort()).toEqual(['turn-1', 'turn-2']);
    const conversation = await topicEvents<OutreachEvent>(
      planner.topic('conversationEvents'),
      (e) => e.filter((x) => x.type === 'NextStepScheduled').length >= 2,
    );
    expect(
      conversation
        .filter((e) => e.type === 'NextStepScheduled')
        .map((e) => (e as { stepId: string }).stepId)
        .sort(),
    ).toEqual(['turn-1', 'turn-2']);
    expect(await planner.query(`SELECT step, status FROM scheduled_steps ORDER BY step`)).toEqual([
      { step: 'turn-1', status: 'emitted' },
      { step: 'turn-2', status: 'emitted' },
    ]);
  });

  it('advances a sequence twice, in order, when two of its steps are recorded together', async () => {
    await plannerEnv('http://127.0.0.1:9');
    await planner.startApp();
    const step = (name: string, delayMs: number) => ({
      step: name,
      delayMs,
      contents: [{ variant: null, subject: name, body: `${name} body` }],
    });
    await planner.publish('outreachRequested', [
      request({ candidateId: 'twice', followUps: [step('f1', 60_000), step('f2', 120_000)] }),
    ]);
    await topicEvents<SendRequested>(planner.topic('sendRequested'), (e) => e.some((s) => s.candidateKey === 'twice'));
    // One publish, so one consumed chunk: the second advance must see the first.
    await planner.publish('sendRecorded', [sentRecord('twice', 'intro'), sentRecord('twice', 'f1')]);
    await waitFor(
      async () =>
        (await planner.query(`SELECT 1 FROM sequences WHERE candidate_key = 'twice' AND status = 'finished'`))
          .length === 1,
      { timeoutMs: 20_000, description: 'the sequence advanced past both steps' },
    );
    const steps = await planner.query<{ step: string }>(
      `SELECT step FROM scheduled_steps WHERE candidate_key = 'twice' ORDER BY due_at`,
    );
    expect(steps.map((r) => r.step)).toEqual(['f1', 'f2']);
  });

  it('schedules a follow-up when the previous step is sent; a reply cancels it; closing cancels scheduled steps', async () => {
    await plannerEnv('http://127.0.0.1:9');
    const app = await planner.startApp();
    const followUps = [
      {
        step: 'follow-up',
        delayMs: 800,
        contents: [{ variant: null, subject: 'Following up', body: 'Any thoughts?' }],
      },
    ];
    await planner.publish('outreachRequested', [
      request({ candidateId: 'replier', followUps }),
      request({ candidateId: 'closer', step: 'later', sendAt: Date.now() + 60_000 }),
    ]);
    await topicEvents<SendRequested>(planner.topic('sendRequested'), (e) =>
      e.some((s) => s.candidateKey === 'replier'),
    );

    // The follow-up is due 5.8 s from now: time for the reply.
    const sent = sentRecord('replier', 'intro', Date.now() + 5_000);
    await planner.publish('sendRecorded', [sent, sent]);
    await waitFor(
      async () =>
        (await planner.query(`SELECT 1 FROM scheduled_steps WHERE step = 'follow-up' AND status = 'scheduled'`))
          .length === 1,
      {
        timeoutMs: 20_000,
        description: 'the follow-up scheduled once',
      },
    );
    const base = {
      occurredAt: Date.now(),
      producer: 'agent',
      correlationId: 'c',
      causationId: null,
      campaignId: 'camp',
    };
    const reply: MessageReceived = {
      type: 'MessageReceived',
      eventId: randomUUID(),
      ...base,
      conversationId: 'camp:replier',
      candidateKey: 'replier',
      messageId: null,
    };
    const close: ConversationClosed = {
      type: 'ConversationClosed',
      eventId: randomUUID(),
      ...base,
      conversationId: 'camp:closer',
      candidateKey: 'closer',
      reason: 'hired',
    };
    await planner.publish('conversationEvents', [reply, close]);

    const events = await topicEvents<OutreachEvent>(
      planner.topic('conversationEvents'),
      (e) => e.filter((x) => x.type === 'StepCancelled').length >= 2,
    );
    expect(
      events
        .filter((e) => e.type === 'StepCancelled')
        .map((e) => [e.conversationId, (e as { stepId: string }).stepId, (e as { reason: string }).reason]),
    ).toEqual(
      expect.arrayContaining([
        ['camp:replier', 'follow-up', 'candidate replied'],
        ['camp:closer', 'later', 'conversation closed'],
      ]),
    );
    expect(
      await planner.query(`SELECT step, status FROM scheduled_steps WHERE status <> 'emitted' ORDER BY step`),
    ).toEqual([
      { step: 'follow-up', status: 'cancelled' },
      { step: 'later', status: 'cancelled' },
    ]);
    expect((await app.inject({ url: '/v1/conversations/camp:replier/steps', headers: auth })).json().steps).toEqual([
      expect.objectContaining({ step: 'follow-up', status: 'cancelled' }),
    ]);
  });

  it('rejects invalid requests with reasons: DLQ over Kafka, 4xx over HTTP', async () => {
    const service = await experimentService();
    await service.start();
    await fetch(`${service.url}/v1/experiments`, {
      method: 'POST',
      headers: { ...auth, 'content-type': 'application/json' },
      body: JSON.stringify({
        experimentId: 'exp',
        variants: [
          { name: 'A', weight: 1 },
          { name: 'B', weight: 1 },
        ],
      }),
    });
    await plannerEnv(service.url);
    const app = await planner.startApp();
    const bad = [
      request({ candidateId: 'no-campaign', campaignId: '' }),
      request({ candidateId: 'bad-email', email: 'nope' }),
      request({
        candidateId: 'unknown-exp',
        experimentId: 'nope',
        contents: [{ variant: 'A', subject: 's', body: 'b' }],
      }),
      request({
        candidateId: 'missing-variant',
        experimentId: 'exp',
        contents: [{ variant: 'Z', subject: 's', body: 'b' }],
      }),
      request({ candidateId: 'huge', contents: [{ variant: null, subject: 's', body: 'x'.repeat(100_001) }] }),
    ];
    await planner.publish('outreachRequested', bad);
    const dlq = await readTopic(
      planner.kafka,
      `${planner.topic('outreachRequested')}.dlq`,
      (m) => m.length >= 5,
      30_000,
    );
    const reasons = dlq.map((m) => m.headers['dlq-reason']).join('\n');
    expect(reasons).toMatch(/campaignId is missing/);
    expect(reasons).toMatch(/email is not a deliverable address/);
    expect(reasons).toMatch(/unknown experiment: experimentId names no experiment/);
    expect(reasons).toMatch(/no content for the assigned variant|not enrolled/);
    expect(reasons).toMatch(/body is larger than 100000 bytes/);

    const post = (payload: Record<string, unknown>) =>
      app.inject({ method: 'POST', url: '/v1/outreach-requests', headers: auth, payload });
    const base = {
      requestId: 'r1',
      campaignId: 'camp',
      candidateId: 'c1',
      email: 'c1@example.com',
      step: 'intro',
      contents: [{ subject: 'Hi', body: 'Body' }],
    };
    expect((await app.inject({ method: 'POST', url: '/v1/outreach-requests', payload: base })).statusCode).toBe(401);
    expect((await post({ ...base, campaignId: '' })).json().message).toMatch(/campaignId is missing/);
    expect((await post({ ...base, email: 'nope' })).statusCode).toBe(400);
    const unknown = await post({
      ...base,
      experimentId: 'nope',
      contents: [{ variant: 'A', subject: 'Hi', body: 'Body' }],
    });
    expect(unknown.statusCode).toBe(422);
    expect(unknown.json().message).toBe('unknown experiment: experimentId names no experiment');
    const missing = await post({
      ...base,
      experimentId: 'exp',
      contents: [{ variant: 'A', subject: 'Hi', body: 'Body' }],
    });
    expect(missing.json().message).toBe(
      'no content for variant(s) B of the experiment (and no content without a variant)',
    );
    expect((await post({ ...base, contents: [{ subject: 'Hi', body: 'x'.repeat(100_001) }] })).json().message).toMatch(
      /larger than 100000 bytes/,
    );
    const accepted = await post({
      ...base,
      experimentId: 'exp',
      contents: [
        { variant: 'A', subject: 'A', body: 'a' },
        { variant: 'B', subject: 'B', body: 'b' },
      ],
    });
    expect(accepted.statusCode).toBe(202);
    expect(accepted.json()).toMatchObject({ sendId: sendIdFor('camp', 'c1', 'intro'), experimentChecked: true });
    const sends = await topicEvents<SendRequested>(planner.topic('sendRequested'), (e) => e.length >= 1);
    expect(sends.map((s) => s.candidateKey)).toEqual(['c1']);
  });
});
