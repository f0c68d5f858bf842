/**
 * One request, one trace (issue #17): the four services as processes export OTLP/JSON to a receiver
 * this test starts (packages/testkit/src/otlp-receiver.ts), and a request that enters the
 * planner over HTTP with the caller's traceparent comes out as one trace id with spans from every
 * service, parent by parent, in causal order: HTTP ingress → Kafka → planner (→ experiment over
 * HTTP) → outbox → relay → Kafka → sender → SMTP → outbox → relay → Kafka → liveness and experiment.
 * Then what a caller can do wrong on purpose: malformed, oversized and unsampled contexts over HTTP
 * and Kafka, and an unbounded tracestate.
 */
import { randomBytes } from 'node:crypto';
import { request as httpRequest } from 'node:http';
import { createKafka, eventHeaders, EventProducer, topicName } from '@outreach/shared';
import { eventCodec, sendIdFor, type OutreachRequested } from '@outreach/contracts';
import { OtlpReceiver, readTopic, SmtpSink, waitFor, type ReceivedSpan } from '@outreach/testkit';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { ingressBody, outreachRequest, services, Stack } from '../../scripts/lib/stack.js';

const TOKEN = 'tracing-token';
const CAMPAIGN = 'tracing';
const hex = (bytes: number) => randomBytes(bytes).toString('hex');

let receiver: OtlpReceiver;
let sink: SmtpSink;
let stack: Stack;
let kafka: ReturnType<typeof createKafka>;
let producer: EventProducer;

beforeAll(async () => {
  receiver = await new OtlpReceiver().start();
  sink = await new SmtpSink().start();
  stack = new Stack({
    run: `trace${Date.now().toString(36)}`,
    kafkaBrokers: inject('kafkaBrokers'),
    databaseUrl: inject('databaseUrl'),
    portBase: 18_580,
    token: TOKEN,
    smtpPort: sink.port,
    env: () => ({
      OTEL_EXPORTER_OTLP_ENDPOINT: receiver.endpoint,
      OTEL_EXPORTER_OTLP_PROTOCOL: 'http/json',
      // Export within 100 ms of a span's end, so the test waits for spans, not for timers.
      OTEL_BSP_SCHEDULE_DELAY: '100',
    }),
  });
  kafka = createKafka({ brokers: inject('kafkaBrokers').split(','), clientId: `${stack.run}-test` });
  producer = new EventProducer(kafka);
  await stack.createTopics(3);
  for (const service of ['experiment', 'sender', 'liveness', 'planner'] as const) await stack.start(service);
  await stack.json('experiment', '/v1/experiments', {
    method: 'POST',
    body: {
      experimentId: 'subject-line',
      variants: [
        { name: 'short', weight: 1 },
        { name: 'personal', weight: 1 },
      ],
    },
  });
}, 180_000);

afterAll(async () => {
  await producer?.disconnect();
  await stack?.stopAll('SIGTERM');
  await stack?.dropData(services);
  await sink?.stop();
  await receiver?.stop();
});

function request(requestId: string, candidateId: string): OutreachRequested {
  return outreachRequest({
    requestId,
    campaignId: CAMPAIGN,
    candidateId,
    email: `${candidateId}@example.com`,
    experimentId: 'subject-line',
    contents: [
      { variant: 'short', subject: 'Quick question', body: 'Are you open to a role?' },
      { variant: 'personal', subject: 'Hello', body: 'We loved your work.' },
    ],
  });
}

/** POSTs a request to the planner's ingress with extra headers; the status and the body. */
async function ingress(event: OutreachRequested, headers: Record<string, string>) {
  const response = await fetch(stack.url('planner', '/v1/outreach-requests'), {
    method: 'POST',
    headers: { authorization: `Bearer ${TOKEN}`, 'content-type': 'application/json', ...headers },
    body: JSON.stringify(ingressBody(event)),
  });
  const body = (await response.json()) as { sendId?: string };
  return { status: response.status, body };
}

async function sendStatus(sendId: string): Promise<string | undefined> {
  const response = await fetch(stack.url('sender', `/v1/sends/${sendId}`), {
    headers: { authorization: `Bearer ${TOKEN}` },
  });
  return response.ok ? ((await response.json()) as { status: string }).status : undefined;
}

/** The records of `topic` whose event has one of `requestIds`, once all are there. */
async function recordsOf(topic: string, requestIds: readonly string[]) {
  const byRequest = (messages: Parameters<Parameters<typeof readTopic>[2]>[0]) =>
    new Map(
      messages.flatMap((m) => {
        const event = m.value ? eventCodec.decode(m.value) : undefined;
        const requestId = event && 'requestId' in event ? event.requestId : null;
        return requestId && requestIds.includes(requestId) ? [[requestId, m] as const] : [];
      }),
    );
  const messages = await readTopic(kafka, topic, (m) => byRequest(m).size === requestIds.length, 60_000);
  return byRequest(messages);
}

const TRACEPARENT = /^00-([0-9a-f]{32})-([0-9a-f]{16})-0[01]$/;

/** Every span is the child of the caller's span or of another span of the trace. */
function connected(spans: readonly ReceivedSpan[], rootParent: string): boolean {
  const ids = new Set(spans.map((s) => s.spanId));
  return spans.every((s) => s.parentSpanId === rootParent || ids.has(s.parentSpanId));
}

describe('tracing across the four services', () => {
  it('one request through HTTP, Kafka, the outboxes, SMTP and HTTP between services is one trace, in causal order', async () => {
    const traceId = hex(16);
    const callerSpan = hex(8);
    const event = request('r-traced', 'cand-traced');
    const accepted = await ingress(event, { traceparent: `00-${traceId}-${callerSpan}-01` });
    expect(accepted.status).toBe(202);

    const topic = (id: Parameters<typeof topicName>[0]) => topicName(id, stack.prefix);
    const is = (service: string, kind: ReceivedSpan['kind'], name: string) => (s: ReceivedSpan) =>
      s.service === service && s.kind === kind && s.name === name;
    const spans = await waitFor(
      () => {
        const trace = receiver.trace(traceId);
        const complete =
          trace.some(is('liveness', 'consumer', `process ${topic('sendRecorded')}`)) &&
          trace.some(is('experiment', 'consumer', `process ${topic('sendRecorded')}`)) &&
          trace.some((s) => s.name === 'smtp send');
        // Children end (and are exported) before their parents: wait for the parents too.
        return complete && connected(trace, callerSpan) ? trace : undefined;
      },
      {
        timeoutMs: 60_000,
        intervalMs: 200,
        description: `the trace through all four services (${receiver.spans.length} spans so far; ${stack.tails(3)})`,
      },
    );

    expect(new Set(spans.map((s) => s.service))).toEqual(new Set(['planner', 'sender', 'experiment', 'liveness']));
    const byId = new Map(spans.map((s) => [s.spanId, s]));
    const one = (predicate: (s: ReceivedSpan) => boolean, what: string): ReceivedSpan => {
      const found = spans.filter(predicate);
      expect(
        found.map((s) => `${s.service} ${s.kind} ${s.name}`),
        what,
      ).toHaveLength(1);
      return found[0] as ReceivedSpan;
    };
    const ancestors = (span: ReceivedSpan): ReceivedSpan[] => {
      const chain: ReceivedSpan[] = [];
      for (let s = byId.get(span.parentSpanId); s; s = byId.get(s.parentSpanId)) chain.push(s);
      return chain;
    };
    /** `child` descends from `parent` and started after it. */
    const follows = (child: ReceivedSpan, parent: ReceivedSpan, direct = false) => {
      if (direct) expect(child.parentSpanId, `${child.name} is a child of ${parent.name}`).toBe(parent.spanId);
      else expect(ancestors(child), `${child.name} descends from ${parent.name}`).toContain(parent);
      expect(child.startNs >= parent.startNs, `${child.name} starts after ${parent.name}`).toBe(true);
    };

    // The planner's HTTP ingress continues the caller's trace: its server span is the caller's child.
    const ingressSpan = one((s) => s.parentSpanId === callerSpan, 'the one child of the caller');
    expect(ingressSpan).toMatchObject({ service: 'planner', kind: 'server' });
    expect(ingressSpan.attributes['http.route']).toBe('/v1/outreach-requests');
    const published = one(is('planner', 'producer', `send ${topic('outreachRequested')}`), 'the ingress publish');
    follows(published, ingressSpan);
    const planned = one(is('planner', 'consumer', `process ${topic('outreachRequested')}`), 'the planner consumer');
    follows(planned, published, true);
    // The planner asks the experiment service for the sticky variant over HTTP, in the same trace.
    const assignments = spans.filter((s) => s.service === 'experiment' && s.kind === 'server');
    expect(assignments.some((s) => ancestors(s).includes(planned))).toBe(true);
    // The planner's outbox row carried the context to its relay, which publishes in the same trace.
    const relayed = one(is('planner', 'producer', `send ${topic('sendRequested')}`), 'the planner relay');
    follows(relayed, planned, true);
    expect(relayed.attributes['outreach.outbox.schema']).toBe(stack.schema('planner'));
    const sending = one(is('sender', 'consumer', `process ${topic('sendRequested')}`), 'the sender consumer');
    follows(sending, relayed, true);
    const smtp = one((s) => s.name === 'smtp send', 'the SMTP conversation');
    expect(smtp).toMatchObject({ service: 'sender', kind: 'client', status: 'unset' });
    expect(smtp.attributes).toMatchObject({ 'outreach.send.result': 'sent', 'server.port': sink.port });
    follows(smtp, sending, true);
    const recorded = one(is('sender', 'producer', `send ${topic('sendRecorded')}`), 'the sender relay');
    follows(recorded, sending, true);
    expect(recorded.startNs >= smtp.endNs, 'SendRecorded is published after the SMTP conversation').toBe(true);
    for (const consumer of ['liveness', 'experiment']) {
      follows(
        one(is(consumer, 'consumer', `process ${topic('sendRecorded')}`), `${consumer} consumer`),
        recorded,
        true,
      );
    }
    // Every service's database work is in the trace too.
    for (const service of services) {
      expect(
        spans.some((s) => s.service === service && s.scope === '@opentelemetry/instrumentation-pg'),
        `${service} has PostgreSQL spans`,
      ).toBe(true);
    }
    // Spans are read by more people than the topics labelled PII: no address in any of them.
    expect(JSON.stringify(receiver.spans, (_, v: unknown) => (typeof v === 'bigint' ? String(v) : v))).not.toMatch(
      /cand-traced@|cand-traced%40/i,
    );
    expect(receiver.refused).toEqual([]);
  });

  it('ignores a malformed or oversized traceparent over HTTP: the request is accepted in a new trace, or refused 431 when past the header limit', async () => {
    const foreign = hex(16);
    const span = hex(8);
    const attempts: Record<string, string> = {
      garbage: 'not-a-traceparent',
      'missing flags': `00-${foreign}-${span}`,
      'version ff': `ff-${foreign}-${span}-01`,
      'zero trace id': `00-${'0'.repeat(32)}-${span}-01`,
      'zero span id': `00-${foreign}-${'0'.repeat(16)}-01`,
      'upper case': `00-${foreign.toUpperCase()}-${span.toUpperCase()}-01`,
      'version 00 with more fields': `00-${foreign}-${span}-01-${hex(4)}`,
      '12 KB': `00-${foreign}-${span}-01${'x'.repeat(12_000)}`,
    };
    const ids = Object.keys(attempts).map((_, i) => `r-bad-http-${i}`);
    for (const [i, [name, traceparent]] of Object.entries(attempts).entries()) {
      const { status } = await ingress(request(ids[i] as string, `cand-bad-http-${i}`), { traceparent });
      expect(status, name).toBe(202);
    }
    const records = await recordsOf(topicName('outreachRequested', stack.prefix), ids);
    const traces = ids.map((id) => TRACEPARENT.exec((records.get(id)?.headers.traceparent ?? '') as string)?.[1]);
    for (const traceId of traces) {
      expect(traceId).toMatch(/^[0-9a-f]{32}$/);
      expect(traceId).not.toBe(foreign);
    }
    expect(new Set(traces).size).toBe(ids.length);
    // Each became a trace of its own, rooted at the planner's ingress.
    await waitFor(
      () =>
        traces.every((traceId) =>
          receiver
            .trace(traceId as string)
            .some((s) => s.service === 'planner' && s.kind === 'server' && s.parentSpanId === ''),
        ),
      { timeoutMs: 30_000, description: 'a new trace for each malformed traceparent' },
    );

    // Past Node's 16 KiB header limit the server refuses the request itself, and goes on serving.
    const status = await new Promise<number>((resolve, reject) => {
      const call = httpRequest(stack.url('planner', '/v1/outreach-requests'), {
        method: 'POST',
        headers: {
          authorization: `Bearer ${TOKEN}`,
          'content-type': 'application/json',
          traceparent: 'x'.repeat(20_000),
        },
      });
      call.on('response', (response) => {
        response.resume();
        resolve(response.statusCode ?? 0);
      });
      call.on('error', reject);
      call.end('{}');
    });
    expect(status).toBe(431);
    expect((await fetch(stack.url('planner', '/health/live'))).status).toBe(200);
  });

  it('bounds the tracestate it carries on: 512 characters at most, and the trace is still continued', async () => {
    const traceId = hex(16);
    const tracestate = Array.from({ length: 300 }, (_, i) => `vendor${i}=${hex(8)}`).join(',');
    expect(tracestate.length).toBeGreaterThan(6_000);
    const id = 'r-tracestate';
    const { status } = await ingress(request(id, 'cand-tracestate'), {
      traceparent: `00-${traceId}-${hex(8)}-01`,
      tracestate,
    });
    expect(status).toBe(202);
    const record = (await recordsOf(topicName('outreachRequested', stack.prefix), [id])).get(id);
    expect(TRACEPARENT.exec(record?.headers.traceparent ?? '')?.[1]).toBe(traceId);
    expect((record?.headers.tracestate ?? '').length).toBeLessThanOrEqual(512);
  });

  it('ignores a malformed or oversized traceparent on Kafka: the event is handled, in a new trace, and not dead-lettered', async () => {
    const cases = { garbage: 'garbage', huge: `00-${hex(16)}-${hex(8)}-01`.padEnd(100_000, '0') };
    const events = Object.keys(cases).map((name) => request(`r-bad-kafka-${name}`, `cand-bad-kafka-${name}`));
    await producer.publishRaw([
      {
        topic: topicName('outreachRequested', stack.prefix),
        records: events.map((event, i) => ({
          key: event.candidateId,
          value: eventCodec.encode(event),
          headers: { ...eventHeaders(event), traceparent: Object.values(cases)[i] as string },
        })),
      },
    ]);
    for (const event of events) {
      const sendId = sendIdFor(CAMPAIGN, event.candidateId, 'intro');
      await waitFor(async () => (await sendStatus(sendId)) === 'sent', {
        timeoutMs: 60_000,
        description: `the send of ${event.requestId}`,
      });
      const processed = await waitFor(
        () =>
          receiver.spans.find(
            (s) =>
              s.service === 'planner' &&
              s.kind === 'consumer' &&
              s.attributes['messaging.message.id'] === event.eventId,
          ),
        { timeoutMs: 30_000, description: `the planner's span of ${event.requestId}` },
      );
      // A root: the header's garbage was not taken for a parent.
      expect(processed.parentSpanId).toBe('');
      expect(processed.status).toBe('unset');
    }
  });

  it('respects a parent that was not sampled: no service records a span of its trace, and the flag travels on', async () => {
    const unsampled = hex(16);
    const event = request('r-unsampled', 'cand-unsampled');
    const accepted = await ingress(event, { traceparent: `00-${unsampled}-${hex(8)}-00` });
    expect(accepted.status).toBe(202);
    await waitFor(async () => (await sendStatus(accepted.body.sendId as string)) === 'sent', {
      timeoutMs: 60_000,
      description: 'the unsampled request to be sent',
    });
    // The context went on with the flag unset, through the outbox too.
    for (const id of ['outreachRequested', 'sendRequested'] as const) {
      const record = (await recordsOf(topicName(id, stack.prefix), [event.requestId])).get(event.requestId);
      expect(record?.headers.traceparent, id).toMatch(new RegExp(`^00-${unsampled}-[0-9a-f]{16}-00$`));
    }
    // A sampled request afterwards is the barrier: once its whole trace has arrived, the spans of
    // the earlier one would have too, had any been recorded.
    const barrier = hex(16);
    expect(
      (await ingress(request('r-barrier', 'cand-barrier'), { traceparent: `00-${barrier}-${hex(8)}-01` })).status,
    ).toBe(202);
    await waitFor(
      () =>
        receiver.trace(barrier).some((s) => s.service === 'liveness' && s.kind === 'consumer') &&
        receiver.trace(barrier).some((s) => s.service === 'experiment' && s.kind === 'consumer'),
      { timeoutMs: 60_000, description: 'the barrier trace' },
    );
    expect(receiver.trace(unsampled)).toEqual([]);
  });
});
