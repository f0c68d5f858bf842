/**
 * Two seeds finished through the four services as processes (issue #31, section 3).
 *
 * Seed 000-3 across the platform's start: candidates saw arm A before the platform existed; their
 * history is imported (`experiment-import-history`), then they are requested. The email sent is arm
 * A's for every one of them (the hash alone draws B for some: a control experiment with the same
 * salt shows it), the sender blocks nothing, and the experiment flags no one.
 *
 * A conversation id the caller gives, over Kafka and over HTTP: it reaches the sender's
 * `SendRecorded` and liveness' conversation in its canonical form, in every spelling that folds to
 * it, up to the largest length accepted; one byte past it, control characters, an at-sign however
 * written, or an empty id are refused at the door (400 over HTTP; OutreachRejected and the DLQ over
 * Kafka), and nothing is sent for them.
 */
import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createKafka, dlqTopicOf, EventProducer, topicName } from '@outreach/shared';
import { eventCodec, type OutreachRejected, type OutreachRequested, type SendRecorded } from '@outreach/contracts';
import { readTopic, SmtpSink, waitFor } from '@outreach/testkit';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { ingressBody, outreachRequest, services, Stack } from '../../scripts/lib/stack.js';

const root = join(import.meta.dirname, '..', '..');
const TOKEN = 'seeds-e2e-token';
const run = `seeds${Date.now().toString(36)}`;
let stack: Stack;
let sink: SmtpSink;
let producer: EventProducer;
let kafka: ReturnType<typeof createKafka>;
let dir: string;

beforeAll(async () => {
  const kafkaBrokers = inject('kafkaBrokers');
  sink = await new SmtpSink().start();
  stack = new Stack({
    run,
    kafkaBrokers,
    databaseUrl: inject('databaseUrl'),
    portBase: 18_780,
    token: TOKEN,
    smtpPort: sink.port,
  });
  kafka = createKafka({ brokers: kafkaBrokers.split(','), clientId: `${run}-test` });
  producer = new EventProducer(kafka);
  dir = mkdtempSync(join(tmpdir(), 'seeds-e2e-'));
  await stack.createTopics(3);
  for (const service of ['experiment', 'sender', 'liveness', 'planner'] as const) await stack.start(service);
}, 180_000);

afterAll(async () => {
  await stack?.stopAll('SIGKILL');
  await producer?.disconnect();
  await sink?.stop();
  await stack?.dropData(services);
  if (dir) rmSync(dir, { recursive: true, force: true });
}, 60_000);

/** POST /v1/outreach-requests with the token: the status and the JSON answer. */
async function postRequest(body: Record<string, unknown>): Promise<{ status: number; json: Record<string, unknown> }> {
  const response = await fetch(stack.url('planner', '/v1/outreach-requests'), {
    method: 'POST',
    headers: { authorization: `Bearer ${TOKEN}`, 'content-type': 'application/json' },
    body: JSON.stringify(body),
  });
  return { status: response.status, json: (await response.json()) as Record<string, unknown> };
}

async function publish(requests: readonly OutreachRequested[]): Promise<void> {
  await producer.publish(requests.map((event) => ({ topic: topicName('outreachRequested', stack.prefix), event })));
}

/** The SendRecorded events on the run's topic, once `done` holds for them. */
async function recorded(done: (events: readonly SendRecorded[]) => boolean): Promise<SendRecorded[]> {
  const decode = (messages: readonly { value: Buffer | null }[]) =>
    messages.map((m) => eventCodec.decode(m.value as Buffer) as SendRecorded);
  return decode(
    await readTopic(kafka, topicName('sendRecorded', stack.prefix), (messages) => done(decode(messages)), 90_000),
  );
}

/** GET a liveness route with the token. */
const liveness = (path: string) =>
  fetch(stack.url('liveness', path), { headers: { authorization: `Bearer ${TOKEN}` } });

describe('seed 000-3 across the platform start: imported history decides the arm', () => {
  it('import, then request: every candidate who saw arm A is sent arm A, and nothing is flagged', async () => {
    const arms = [
      { name: 'A', weight: 1 },
      { name: 'B', weight: 1 },
    ];
    const salt = 'seeds-e2e-legacy-salt';
    await stack.json('experiment', '/v1/experiments', {
      method: 'POST',
      body: { experimentId: 'legacy', salt, variants: arms },
    });
    await stack.json('experiment', '/v1/experiments', {
      method: 'POST',
      body: { experimentId: 'control', salt, variants: arms },
    });
    const candidates = Array.from({ length: 12 }, (_, i) => `hist-${i}`);
    // What the hash draws for them without history: some B, so the test can fail.
    const drawn = await stack.json<{ assignments: Array<{ variant: string }> }>(
      'experiment',
      '/v1/experiments/control/assignments',
      { method: 'POST', body: { candidateIds: candidates } },
    );
    expect(drawn.assignments.filter((a) => a.variant === 'B').length).toBeGreaterThan(0);

    const history = join(dir, 'history.csv');
    writeFileSync(
      history,
      [
        'candidate,experiment,variant,time,source',
        ...candidates.map((c) => `${c},legacy,A,2025-03-01T09:30:00Z,old-mailer`),
      ].join('\n') + '\n',
    );
    const imported = spawnSync(
      process.execPath,
      [join(root, 'services', 'experiment', 'dist', 'cli', 'import-history.js'), '--file', history],
      {
        env: {
          PATH: process.env.PATH,
          DATABASE_URL: inject('databaseUrl'),
          DATABASE_SCHEMA: stack.schema('experiment'),
          TOPIC_PREFIX: stack.prefix,
        },
        encoding: 'utf8',
      },
    );
    expect(imported.status, `${imported.stdout}${imported.stderr}`).toBe(0);
    expect(imported.stdout).toMatch(/assignments: 12 seeded with the arm history saw first/);

    // The requests, half over Kafka and half over HTTP, with a content per arm.
    const requests = candidates.map((candidateId, i) =>
      outreachRequest({
        requestId: `hist-req-${i}`,
        campaignId: 'legacy-campaign',
        candidateId,
        email: `${candidateId}@example.com`,
        experimentId: 'legacy',
        contents: [
          { variant: 'A', subject: 'Arm A: the role', body: 'The message they saw before.' },
          { variant: 'B', subject: 'Arm B: the role', body: 'The other message.' },
        ],
      }),
    );
    await publish(requests.filter((_, i) => i % 2 === 0));
    for (const r of requests.filter((_, i) => i % 2 === 1)) {
      const answer = await postRequest(ingressBody(r));
      expect(answer.status, JSON.stringify(answer.json)).toBe(202);
    }

    const sent = await recorded((events) => events.filter((e) => e.campaignId === 'legacy-campaign').length >= 12);
    const ours = sent.filter((e) => e.campaignId === 'legacy-campaign');
    expect(ours.map((e) => `${e.outcome}:${e.variant}`)).toEqual(Array(12).fill('sent:A'));
    const mails = sink.messages.filter((m) => m.to.some((to) => to.startsWith('hist-')));
    expect(mails).toHaveLength(12);
    expect(new Set(mails.map((m) => m.subject))).toEqual(new Set(['Arm A: the role']));

    // The experiment counted the sends as exposures to the arm history gave: no one contaminated.
    const report = await waitFor(
      async () => {
        const r = await stack.json<{
          variants: Array<{ variant: string; exposedCandidates: number }>;
          contamination: { candidates: number };
        }>('experiment', '/v1/experiments/legacy/report');
        return r.variants.find((v) => v.variant === 'A')?.exposedCandidates === 12 ? r : undefined;
      },
      { timeoutMs: 60_000, intervalMs: 500, description: 'the experiment to record the 12 exposures' },
    );
    expect(report.contamination.candidates).toBe(0);
    expect(report.variants.find((v) => v.variant === 'B')?.exposedCandidates ?? 0).toBe(0);
  });
});

describe('a conversation id given by the caller, through the sender to SendRecorded and liveness', () => {
  /** A request for one candidate with this conversation id. */
  const request = (name: string, conversationId: string) =>
    outreachRequest({
      requestId: `conv-${name}`,
      campaignId: 'conversations',
      candidateId: `conv-${name}`,
      email: `conv-${name}@example.com`,
      conversationId,
    });

  it('arrives in its canonical form over Kafka and HTTP, in every spelling that folds to it, up to the largest accepted', async () => {
    const longest = `L${'x'.repeat(1023)}`;
    // 1,024 full-width letters: 3,072 bytes as sent, 1,024 once folded: the bound is on the stored form.
    const wide = '\uff37'.repeat(1024);
    const cases = [
      // [name, as sent, canonical, ingress]
      ['kafka-folded', ' \u200b\uff34\uff48\uff52\uff45\uff41\uff44-\uff14\uff12\u00a0', 'Thread-42', 'kafka'],
      ['http-folded', '\ufeffThre\u00adad-43 ', 'Thread-43', 'http'],
      ['kafka-case', 'thread-42', 'thread-42', 'kafka'],
      ['http-longest', longest, longest, 'http'],
      ['kafka-longest', `K${longest.slice(1)}`, `K${longest.slice(1)}`, 'kafka'],
      ['http-wide', wide, 'W'.repeat(1024), 'http'],
      // Decomposed umlauts and the ohm sign: NFKC composes them, and folds the ohm to omega.
      ['kafka-unicode', 'Gespra\u0308ch: Mu\u0308ller/\u2126', 'Gespr\u00e4ch: M\u00fcller/\u03a9', 'kafka'],
    ] as const;
    const sendIds = new Map<string, string>();
    await publish(cases.filter(([, , , via]) => via === 'kafka').map(([name, id]) => request(name, id)));
    for (const [name, id, canonical, via] of cases) {
      if (via !== 'http') continue;
      const answer = await postRequest(ingressBody(request(name, id)));
      expect(answer.status, `${name}: ${JSON.stringify(answer.json)}`).toBe(202);
      expect(answer.json.conversationId, name).toBe(canonical);
      sendIds.set(name, answer.json.sendId as string);
    }

    const events = await recorded(
      (all) => all.filter((e) => e.campaignId === 'conversations' && e.outcome === 'sent').length >= cases.length,
    );
    for (const [name, , canonical] of cases) {
      const event = events.find((e) => e.candidateKey === `conv-${name}`);
      expect(event?.outcome, name).toBe('sent');
      expect(event?.conversationId, name).toBe(canonical);
      if (sendIds.has(name)) expect(event?.sendId, name).toBe(sendIds.get(name));

      // Liveness files the send under the given id, and not under the id it would have derived.
      const conversation = await waitFor(
        async () => {
          const response = await liveness(`/v1/conversations/${encodeURIComponent(canonical)}`);
          if (response.status !== 200) return undefined;
          const body = (await response.json()) as {
            conversationId: string;
            timeline: Array<{ eventId: string; type: string }>;
          };
          return body.timeline.some((e) => e.type === 'SendRecorded') ? body : undefined;
        },
        { timeoutMs: 30_000, intervalMs: 250, description: `liveness to file ${name}'s send under its id` },
      );
      expect(conversation.conversationId, name).toBe(canonical);
      const sentThere = conversation.timeline.filter((e) => e.type === 'SendRecorded').map((e) => e.eventId);
      expect(sentThere, name).toContain(event?.eventId);
      const derived = await liveness(`/v1/conversations/${encodeURIComponent(`conversations:conv-${name}`)}`);
      expect(derived.status, `${name}: nothing under the derived id`).toBe(404);
    }
    // A spelling of a stored id finds it; ids keep their case, so `thread-42` is another conversation.
    const spelled = await liveness(
      `/v1/conversations/${encodeURIComponent('\uff54\uff48\uff52\uff45\uff41\uff44-\uff14\uff12')}`,
    );
    expect(spelled.status).toBe(200);
    expect(((await spelled.json()) as { candidateKey: string }).candidateKey).toBe('conv-kafka-case');
  });

  it('refuses one byte past the bound, control characters, an at-sign and an empty id at the door, and sends nothing', async () => {
    const bad = [
      ['past-ascii', 'x'.repeat(1025)],
      // 342 characters of 3 bytes: 1,026 bytes, within the schema's 1,024 characters.
      ['past-bytes', '\u20ac'.repeat(342)],
      ['newline', 'thread\n42'],
      ['nul', 'thread\u000042'],
      ['at-sign', 'ada@example.com'],
      ['full-width-at', 'ada\uff20example.com'],
      ['percent-at', 'ada%40example.com'],
      ['blank', ' \u200b '],
      ['empty', ''],
    ] as const;
    const httpStatus: Record<string, number> = {};
    for (const [name, id] of bad) {
      const answer = await postRequest(ingressBody(request(`http-${name}`, id)));
      httpStatus[name] = answer.status;
      expect(JSON.stringify(answer.json), name).not.toContain('ada');
    }
    expect(httpStatus).toEqual(Object.fromEntries(bad.map(([name]) => [name, 400])));

    // Over Kafka: the same ids get OutreachRejected for their publisher, and a DLQ record with the reason.
    const kafkaBad = bad.map(([name, id]) => request(`kafka-${name}`, id));
    await publish(kafkaBad);
    const rejectedFor = (messages: readonly { value: Buffer | null }[]) =>
      messages
        .map((m) => eventCodec.decode(m.value as Buffer) as OutreachRejected)
        .filter((e) => e.requestId.startsWith('conv-kafka-'));
    const rejected = rejectedFor(
      await readTopic(
        kafka,
        topicName('outreachRejected', stack.prefix),
        (messages) => rejectedFor(messages).length >= kafkaBad.length,
        60_000,
      ),
    );
    expect(rejected.map((e) => e.requestId).sort()).toEqual(kafkaBad.map((r) => r.requestId).sort());
    expect(new Set(rejected.map((e) => e.reason))).toEqual(new Set(['invalid_request']));
    const dlq = await readTopic(
      kafka,
      dlqTopicOf(topicName('outreachRequested', stack.prefix)),
      (messages) => messages.filter((m) => m.headers['dlq-reason']?.includes('conversationId')).length >= bad.length,
      60_000,
    );
    expect(dlq.map((m) => m.headers['dlq-reason']).join('\n')).not.toContain('ada');

    // Nothing of them reached the sender: no email.
    const refusedNames = bad.map(([name]) => name);
    const mailed = sink.messages.filter((m) =>
      m.to.some((to) =>
        refusedNames.some((name) => to === `conv-http-${name}@example.com` || to === `conv-kafka-${name}@example.com`),
      ),
    );
    expect(mailed).toEqual([]);
  });
});
