/**
 * Rejection feedback (issue #21), against the real broker, database and the real experiment service
 * (as a process): every refused request, over Kafka or HTTP, for each reason code, yields exactly one
 * OutreachRejected on outreach.rejected.v1, keyed by its requestId, whose bytes (key, value,
 * headers) hold no address, no name and no text of the request, and its status reads `rejected`
 * with the reason. A request whose id cannot travel (it holds an address), an undecodable record, a
 * body without a requestId: dead-lettered or answered, and nothing published.
 */
import { randomUUID } from 'node:crypto';
import { dlqTopicOf } from '@outreach/shared';
import {
  eventCodec,
  sendIdFor,
  type ConversationClosed,
  type OutreachRejected,
  type OutreachRequested,
} from '@outreach/contracts';
import { freePort, readTopic, waitFor, type ReadMessage, type ServiceTestEnv } from '@outreach/testkit';
import type { FastifyInstance } from 'fastify';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { auth, defineExperiment, experimentTestEnv, outreachRequested, plannerTestEnv } from './harness.js';

const CAMPAIGN = 'camp-rej';
let planner: ServiceTestEnv;
let experiment: ServiceTestEnv;
let app: FastifyInstance;

beforeAll(async () => {
  experiment = await experimentTestEnv();
  const port = await freePort();
  const url = `http://127.0.0.1:${port}`;
  experiment.startProcess({ HTTP_PORT: String(port) });
  await waitFor(async () => (await fetch(`${url}/health/ready`).catch(() => undefined))?.ok === true, {
    timeoutMs: 60_000,
    description: 'the experiment service',
  });
  for (const [experimentId, status] of [
    ['exp', 'active'],
    ['paused-exp', 'paused'],
  ] as const) {
    expect((await defineExperiment(url, experimentId, status)).status).toBe(201);
  }
  planner = await plannerTestEnv({
    EXPERIMENT_URL: url,
    EXPERIMENT_TOKEN: 'test-token',
    SCHEDULER_INTERVAL_MS: '100',
  });
  app = await planner.startApp();

  // Two steps another request already had: one emitted by the scheduler, one cancelled (the
  // conversation closed while it waited). Both are scheduled a day ahead; the first is then made due
  // (its row's due time moved to now), so the test does not race the consumer against a clock.
  await planner.publish('outreachRequested', [
    request({ requestId: 'first-taken', candidateId: 'taken', sendAt: Date.now() + 86_400_000 }),
    request({ requestId: 'first-closed', candidateId: 'closed', sendAt: Date.now() + 86_400_000 }),
  ]);
  const stepStatus = async (candidateKey: string) =>
    (
      await planner.query<{ status: string }>(
        'SELECT status FROM scheduled_steps WHERE campaign_id = $1 AND candidate_key = $2',
        [CAMPAIGN, candidateKey],
      )
    )[0]?.status;
  await waitFor(
    async () => (await stepStatus('taken')) === 'scheduled' && (await stepStatus('closed')) === 'scheduled',
    {
      timeoutMs: 30_000,
      description: 'both steps scheduled',
    },
  );
  await planner.query(`UPDATE scheduled_steps SET due_at = now() WHERE campaign_id = $1 AND candidate_key = 'taken'`, [
    CAMPAIGN,
  ]);
  await waitFor(async () => (await stepStatus('taken')) === 'emitted', {
    timeoutMs: 30_000,
    description: 'the scheduler emitted the step',
  });
  const close: ConversationClosed = {
    type: 'ConversationClosed',
    eventId: randomUUID(),
    occurredAt: Date.now(),
    producer: 'agent',
    correlationId: 'c',
    causationId: null,
    conversationId: `${CAMPAIGN}:closed`,
    campaignId: CAMPAIGN,
    candidateKey: 'closed',
    reason: 'hired elsewhere',
  };
  await planner.publish('conversationEvents', [close]);
  await waitFor(async () => (await stepStatus('closed')) === 'cancelled', {
    timeoutMs: 30_000,
    description: 'the step cancelled by the close',
  });
}, 240_000);
afterAll(async () => {
  await planner?.cleanup();
  await experiment?.cleanup();
});

/** Every value a person could be recognized by; none may reach outreach.rejected.v1. */
const PII = ['pii-marker.example', 'Lovelace', 'Ada', 'secret-subject', 'secret-body', 'cand-secret'];

const request = (fields: Partial<OutreachRequested> & { requestId: string; candidateId: string }) =>
  outreachRequested({
    campaignId: CAMPAIGN,
    email: `ada.lovelace.${fields.candidateId}@pii-marker.example`,
    contents: [{ variant: null, subject: 'Dear Ada Lovelace secret-subject', body: 'secret-body' }],
    ...fields,
  });

/** Every byte a reader of the topic sees: key, value, header names and values. */
const bytesOf = (m: ReadMessage) =>
  [m.key ?? '', m.value?.toString('latin1') ?? '', ...Object.entries(m.headers).flat()].join('\n');

/** The whole topic, to its end as it is now (so a duplicate cannot hide after the ones awaited). */
async function wholeTopic(topic: string): Promise<ReadMessage[]> {
  const admin = planner.kafka.admin();
  await admin.connect();
  const ends = await admin.fetchTopicOffsets(topic).finally(() => admin.disconnect());
  return readTopic(planner.kafka, topic, (messages) =>
    ends.every(
      ({ partition, high, low }) =>
        high === low || messages.some((m) => m.partition === partition && BigInt(m.offset) === BigInt(high) - 1n),
    ),
  );
}

/** Waits until the planner read everything on the requests topic and published its outbox. */
async function settled() {
  const admin = planner.kafka.admin();
  await admin.connect();
  try {
    const topic = planner.topic('outreachRequested');
    await waitFor(
      async () => {
        const ends = await admin.fetchTopicOffsets(topic);
        const [committed] = await admin.fetchOffsets({
          groupId: planner.env.CONSUMER_GROUP as string,
          topics: [topic],
        });
        return ends.every(
          ({ partition, high }) =>
            committed?.partitions.find((p) => p.partition === partition)?.offset === high || high === '0',
        );
      },
      { timeoutMs: 60_000, description: 'the planner caught up with the requests topic' },
    );
  } finally {
    await admin.disconnect();
  }
  await waitFor(async () => (await planner.query('SELECT 1 FROM outbox WHERE published_at IS NULL')).length === 0, {
    timeoutMs: 30_000,
    description: "the planner's outbox published",
  });
}

async function rejections(prefix: string): Promise<{ messages: ReadMessage[]; events: OutreachRejected[] }> {
  const messages = (await wholeTopic(planner.topic('outreachRejected'))).filter((m) => m.key?.startsWith(prefix));
  return { messages, events: messages.map((m) => eventCodec.decode(m.value as Buffer) as OutreachRejected) };
}

const statusOf = async (requestId: string) =>
  (await app.inject({ url: `/v1/outreach-requests/${encodeURIComponent(requestId)}`, headers: auth })).json() as {
    status: string;
    rejection: { reason: string; detail: string; sendId: string | null } | null;
  };

describe('OutreachRejected', () => {
  it('over Kafka: one per refused request and reason code, keyed by its requestId, without PII; then status rejected', async () => {
    const refused = {
      'k-invalid': request({ requestId: 'k-invalid', candidateId: 'cand-secret-1', campaignId: ' ' }),
      'k-unknown': request({
        requestId: 'k-unknown',
        candidateId: 'cand-secret-2',
        experimentId: 'nope',
        contents: [{ variant: 'A', subject: 'secret-subject', body: 'secret-body' }],
      }),
      'k-no-variant': request({
        requestId: 'k-no-variant',
        candidateId: 'cand-secret-3',
        experimentId: 'exp',
        contents: [{ variant: 'Z', subject: 'secret-subject', body: 'secret-body' }],
      }),
      'k-no-default': request({
        requestId: 'k-no-default',
        candidateId: 'cand-secret-4',
        experimentId: 'paused-exp',
        contents: [{ variant: 'A', subject: 'secret-subject', body: 'secret-body' }],
      }),
      'k-emitted': request({ requestId: 'k-emitted', candidateId: 'taken' }),
      'k-cancelled': request({ requestId: 'k-cancelled', candidateId: 'closed' }),
    };
    const expected: Record<string, [string, string, string | null]> = {
      'k-invalid': ['invalid_request', 'fields: campaignId', null],
      'k-unknown': ['unknown_experiment', 'experimentId names no experiment', null],
      'k-no-variant': [
        'no_content_for_variant',
        'contents: no content for a variant of the experiment, and none without a variant',
        null,
      ],
      'k-no-default': [
        'no_default_content',
        'contents: the candidate is not enrolled in the experiment, and no content is without a variant',
        null,
      ],
      'k-emitted': [
        'step_already_emitted',
        'the step was already emitted for another request: nothing was planned',
        sendIdFor(CAMPAIGN, 'taken', 'intro'),
      ],
      'k-cancelled': [
        'step_already_cancelled',
        'the step was already cancelled (a reply or a close): nothing was planned',
        sendIdFor(CAMPAIGN, 'closed', 'intro'),
      ],
    };
    const all = Object.values(refused);
    // Each delivered twice (a redelivery) and sent again under a new event id (a publisher's retry).
    await planner.publish('outreachRequested', [...all, ...all, ...all.map((r) => ({ ...r, eventId: randomUUID() }))]);
    // An id that is an address has nothing safe to key a rejection by; bytes that do not decode have no id.
    const unsafe = request({ requestId: 'ada.lovelace@pii-marker.example', candidateId: 'cand-secret-5', email: 'x' });
    await planner.publish('outreachRequested', [unsafe]);
    const producer = planner.kafka.producer();
    await producer.connect();
    await producer.send({
      topic: planner.topic('outreachRequested'),
      messages: [{ key: 'k-garbage', value: Buffer.from('not avro at all: ada.lovelace@pii-marker.example') }],
    });
    await producer.disconnect();
    await settled();

    const { messages, events } = await rejections('k-');
    expect(events.map((e) => e.requestId).sort()).toEqual(Object.keys(refused).sort());
    for (const event of events) {
      expect([event.reason, event.detail, event.sendId], event.requestId).toEqual(expected[event.requestId]);
      expect(event).toMatchObject({
        producer: 'planner',
        causationId: refused[event.requestId as keyof typeof refused].eventId,
      });
    }
    for (const message of messages) {
      expect(message.key).toBe((eventCodec.decode(message.value as Buffer) as OutreachRejected).requestId);
      expect(message.headers['event-type']).toBe('OutreachRejected');
    }
    const everything = (await wholeTopic(planner.topic('outreachRejected'))).map(bytesOf).join('\n');
    expect(PII.filter((marker) => everything.includes(marker))).toEqual([]);
    expect(everything).not.toContain('k-garbage');

    // Both without a key to answer on are in the DLQ with the rest.
    const dead = await wholeTopic(dlqTopicOf(planner.topic('outreachRequested')));
    expect(dead.map((m) => m.key)).toEqual(expect.arrayContaining(['k-garbage', unsafe.candidateId]));

    for (const [requestId, [reason, detail, sendId]] of Object.entries(expected))
      expect(await statusOf(requestId), requestId).toEqual(
        expect.objectContaining({ status: 'rejected', rejection: { reason, detail, sendId } }),
      );
    // The first requests of the two steps keep theirs.
    expect((await statusOf('first-taken')).status).toBe('planned');
    expect((await statusOf('first-closed')).status).toBe('cancelled');
  });

  it('over HTTP: each 4xx with a requestId is told once, whatever the retries; a body without one is answered only', async () => {
    const base = {
      campaignId: CAMPAIGN,
      email: 'ada.lovelace@pii-marker.example',
      step: 'intro',
      contents: [{ subject: 'Dear Ada Lovelace secret-subject', body: 'secret-body' }],
    };
    const post = (payload: unknown) =>
      app.inject({ method: 'POST', url: '/v1/outreach-requests', headers: auth, payload: payload as object });
    const cases: Array<[string, Record<string, unknown>, number, string, string]> = [
      ['h-address', { candidateId: 'cand-secret-6', email: 'Ada Lovelace' }, 400, 'invalid_request', 'fields: email'],
      ['h-schema', { candidateId: 'cand-secret-7', contents: undefined }, 400, 'invalid_request', 'fields: contents'],
      [
        'h-nul',
        { candidateId: 'cand-secret-8', contents: [{ subject: 'Ada\u0000Lovelace', body: 'b' }] },
        400,
        'invalid_request',
        'fields: contents[0].subject',
      ],
      [
        'h-unknown',
        { candidateId: 'cand-secret-9', experimentId: 'nope', contents: [{ variant: 'A', subject: 's', body: 'b' }] },
        422,
        'unknown_experiment',
        'experimentId names no experiment',
      ],
      [
        'h-no-variant',
        { candidateId: 'cand-secret-10', experimentId: 'exp', contents: [{ variant: 'A', subject: 's', body: 'b' }] },
        422,
        'no_content_for_variant',
        'contents: no content for a variant of the experiment, and none without a variant',
      ],
      [
        'h-emitted',
        { candidateId: 'taken' },
        409,
        'step_already_emitted',
        'the step was already emitted for another request: nothing was planned',
      ],
      [
        'h-cancelled',
        { candidateId: 'closed' },
        409,
        'step_already_cancelled',
        'the step was already cancelled (a reply or a close): nothing was planned',
      ],
    ];
    for (const [requestId, fields, code] of cases) {
      for (let attempt = 0; attempt < 2; attempt++) {
        const response = await post({ ...base, requestId, ...fields });
        expect(response.statusCode, `${requestId}: ${response.body}`).toBe(code);
        expect(response.json().message).toEqual(expect.any(String));
      }
    }
    // Nothing to answer on: no requestId, one that is not a string, one that is an address.
    expect((await post({ ...base, candidateId: 'cand-secret-11' })).statusCode).toBe(400);
    expect((await post({ ...base, candidateId: 'cand-secret-12', requestId: { id: 'x' } })).statusCode).toBe(400);
    expect(
      (await post({ ...base, candidateId: 'cand-secret-13', requestId: 'ada@pii-marker.example' })).statusCode,
    ).toBe(400);
    await settled();

    const { messages, events } = await rejections('h-');
    expect(events.map((e) => e.requestId).sort()).toEqual(cases.map(([id]) => id).sort());
    for (const [requestId, , , reason, detail] of cases) {
      expect(
        events.find((e) => e.requestId === requestId),
        requestId,
      ).toMatchObject({
        reason,
        detail,
        producer: 'planner',
        // Over HTTP the refused request was never an event: nothing caused this one.
        causationId: null,
      });
      expect(await statusOf(requestId), requestId).toMatchObject({ status: 'rejected', rejection: { reason, detail } });
    }
    const bytes = messages.map(bytesOf).join('\n');
    expect(PII.filter((marker) => bytes.includes(marker))).toEqual([]);
    expect((await planner.query('SELECT 1 FROM requests WHERE request_id LIKE $1', ['%pii-marker%'])).length).toBe(0);
  });
});

// ATTACK (issue #21): requests the planner refused without telling their publisher, now each
// refused up front and told: ids too large for a btree key (counted in UTF-8 bytes, at both
// ingresses), an experimentId the experiment service would refuse, a failure of the handler itself
// (the safety net); and a requestId that breaks the id rules once its ends are counted (whitespace,
// control characters) never travels, is never stored, and reads 400 on the status route.

/** `n` BMP ideographs (3 UTF-8 bytes each, poorly compressible): within every character bound. */
const ideographs = (n: number) =>
  Array.from({ length: n }, (_, i) => String.fromCharCode(0x4e00 + ((i * 7919) % 20000))).join('');
/** Whitespace String.prototype.trim removes, in a pseudo-random order. */
const SPACES = [
  '\u2000',
  '\u2003',
  '\u2005',
  '\u2007',
  '\u2009',
  '\u200a',
  '\u3000',
  '\u205f',
  '\u202f',
  '\u00a0',
  ' ',
];
const spaces = (n: number) =>
  Array.from({ length: n }, (_, i) => SPACES[(i * i * 31 + i * 7) % SPACES.length]).join('');

describe('attack: refusals nobody is told of', () => {
  it('an HTTP conversationId of 1024 CJK characters (within the schema, 3072 bytes) is refused up front, told, and never stored', async () => {
    const conversationId = ideographs(1024);
    const response = await app.inject({
      method: 'POST',
      url: '/v1/outreach-requests',
      headers: auth,
      payload: {
        requestId: 'atk-conv',
        campaignId: CAMPAIGN,
        candidateId: 'atk-conv',
        email: 'ada.lovelace@pii-marker.example',
        step: 'intro',
        conversationId,
        sendAt: new Date(Date.now() + 86_400_000).toISOString(),
        contents: [{ subject: 's', body: 'b' }],
      },
    });
    expect(response.statusCode, response.body).toBe(400);
    expect(response.body).toContain('conversationId');
    expect(response.body).not.toContain(conversationId.slice(0, 8));
    await settled();
    const status = await statusOf('atk-conv');
    expect(status).toMatchObject({
      status: 'rejected',
      rejection: { reason: 'invalid_request', detail: 'fields: conversationId' },
    });
    expect((await rejections('atk-conv')).events.map((e) => e.reason)).toEqual(['invalid_request']);
  });

  it('over Kafka, ids past their byte bounds (a conversationId, a campaignId, a step of CJK characters) are refused, dead-lettered and told', async () => {
    const cases = [
      { requestId: 'atk-kconv', conversationId: ideographs(1024), field: 'conversationId' },
      // 200 characters (within the 256-character bound), 600 bytes.
      { requestId: 'atk-kcamp', campaignId: ideographs(200), field: 'campaignId' },
      { requestId: 'atk-kstep', step: ideographs(200), field: 'step' },
    ];
    await planner.publish(
      'outreachRequested',
      cases.map(({ field: _, ...fields }) =>
        request({ ...fields, candidateId: fields.requestId, sendAt: Date.now() + 86_400_000 }),
      ),
    );
    await settled();
    const dead = await wholeTopic(dlqTopicOf(planner.topic('outreachRequested')));
    for (const { requestId, field } of cases) {
      expect(dead.some((m) => m.key === requestId)).toBe(true);
      const told = (await rejections(requestId)).events;
      expect(told.map((e) => [e.reason, e.detail])).toEqual([['invalid_request', `fields: ${field}`]]);
      expect((await statusOf(requestId)).status).toBe('rejected');
    }
    const stored = await planner.query(`SELECT 1 FROM scheduled_steps WHERE candidate_key LIKE 'atk-k%'`);
    expect(stored).toEqual([]);
  });

  it('a Kafka request whose experimentId the experiment service refuses (over its 64 characters) is dead-lettered and told', async () => {
    await planner.publish('outreachRequested', [
      request({
        requestId: 'atk-exp',
        candidateId: 'atk-exp',
        experimentId: 'e'.repeat(100),
        contents: [{ variant: null, subject: 's', body: 'b' }],
      }),
    ]);
    await settled();
    const dead = await wholeTopic(dlqTopicOf(planner.topic('outreachRequested')));
    expect(dead.some((m) => m.key === 'atk-exp')).toBe(true);
    // Refused: its publisher must hear of it, and its status must say so.
    const told = (await rejections('atk-exp')).events;
    expect(told.map((e) => [e.requestId, e.reason, e.detail])).toEqual([
      ['atk-exp', 'invalid_request', 'fields: experimentId'],
    ]);
    expect((await statusOf('atk-exp')).status).toBe('rejected');
  });

  it('a request the handler fails on for good (a fault in the database) is dead-lettered and still told (the safety net)', async () => {
    // A permanent failure nothing in the request rules foresees: an insert the database refuses.
    await planner.query(`CREATE OR REPLACE FUNCTION atk_refuse_step() RETURNS trigger LANGUAGE plpgsql AS $$
      BEGIN
        IF NEW.candidate_key = 'atk-fail' THEN RAISE EXCEPTION 'refused by the attack test'; END IF;
        RETURN NEW;
      END $$`);
    await planner.query(
      `CREATE TRIGGER atk_refuse_step BEFORE INSERT ON scheduled_steps FOR EACH ROW EXECUTE FUNCTION atk_refuse_step()`,
    );
    try {
      await planner.publish('outreachRequested', [
        request({ requestId: 'atk-fine', candidateId: 'atk-fine', sendAt: Date.now() + 86_400_000 }),
        request({ requestId: 'atk-fail', candidateId: 'atk-fail', sendAt: Date.now() + 86_400_000 }),
      ]);
      await settled();
    } finally {
      await planner.query('DROP TRIGGER atk_refuse_step ON scheduled_steps');
    }
    const dead = await wholeTopic(dlqTopicOf(planner.topic('outreachRequested')));
    const failed = dead.filter((m) => m.key === 'atk-fail');
    expect(failed).toHaveLength(1);
    expect(failed[0]?.headers['dlq-error-code']).toBe('REJECTED');
    expect(failed[0]?.headers['dlq-reason']).toMatch(/^handler failed: /);
    const told = (await rejections('atk-fail')).events;
    expect(told.map((e) => e.reason)).toEqual(['invalid_request']);
    expect(told[0]?.detail).not.toContain('refused by the attack test');
    expect((await statusOf('atk-fail')).status).toBe('rejected');
    // The request beside it in the chunk is planned, untouched by its neighbour's failure.
    expect((await statusOf('atk-fine')).status).toBe('planned');
    expect((await rejections('atk-fine')).events).toEqual([]);
  });

  it('a Kafka requestId over 256 characters, or with a control character, never travels nor is stored, even when its ends are whitespace', async () => {
    const long = `atk-long${spaces(3000)}`;
    await planner.publish('outreachRequested', [
      request({ requestId: long, candidateId: 'atk-long' }),
      request({ requestId: 'atk-ctl\n', candidateId: 'atk-ctl', campaignId: ' ' }),
      request({ requestId: 'atk-ws\u3000', candidateId: 'atk-ws' }),
      request({ requestId: 'atk-c1\u0085x', candidateId: 'atk-c1' }),
    ]);
    await settled();
    // docs/publishers.md: such ids "cannot travel; [they] only go to outreach.requested.v1.dlq".
    const kept = await planner.query<{ n: number }>(
      `SELECT length(request_id) AS n FROM requests WHERE request_id ~ '^atk-(long|ctl|ws|c1)'`,
    );
    expect(kept).toEqual([]);
    const keys = (await rejections('atk-')).messages.map((m) => m.key);
    expect(keys.filter((key) => /^atk-(long|ctl|ws|c1)/.test(key ?? ''))).toEqual([]);
    const dead = await wholeTopic(dlqTopicOf(planner.topic('outreachRequested')));
    expect(dead.filter((m) => /^atk-(long|ctl|ws|c1)/.test(m.key ?? '')).length).toBe(4);
  });

  it('over HTTP, a requestId with whitespace at its ends is refused (400, nothing told), and the status route refuses it too', async () => {
    // A lone surrogate cannot cross Kafka (Avro strings are UTF-8 on the wire), but JSON can carry one.
    for (const requestId of ['atk-hws ', '\u2003atk-hws', 'atk-h\u0085ws', 'atk-h\ud800ws']) {
      const response = await app.inject({
        method: 'POST',
        url: '/v1/outreach-requests',
        headers: auth,
        payload: {
          requestId,
          campaignId: CAMPAIGN,
          candidateId: 'atk-hws',
          email: 'ada.lovelace@pii-marker.example',
          step: 'intro',
          contents: [{ subject: 's', body: 'b' }],
        },
      });
      expect(response.statusCode, response.body).toBe(400);
      expect(response.json()).toMatchObject({ message: expect.stringContaining('requestId') });
      if (!/\p{Cs}/u.test(requestId)) {
        const status = await app.inject({
          url: `/v1/outreach-requests/${encodeURIComponent(requestId)}`,
          headers: auth,
        });
        expect(status.statusCode, status.body).toBe(400);
      }
    }
    await settled();
    expect((await rejections('atk-h')).messages).toEqual([]);
    expect((await rejections('\u2003atk-h')).messages).toEqual([]);
    expect(await planner.query(`SELECT 1 FROM requests WHERE request_id LIKE '%atk-h%'`)).toEqual([]);
  });
});
