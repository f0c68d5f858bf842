import { context, ROOT_CONTEXT, SpanKind, SpanStatusCode, trace } from '@opentelemetry/api';
import { AsyncLocalStorageContextManager } from '@opentelemetry/context-async-hooks';
import { InMemorySpanExporter, SimpleSpanProcessor, TracerProvider } from '@opentelemetry/sdk-trace';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { createLogger } from '../logger.js';
import {
  causeContext,
  formatTraceparent,
  markTracingActive,
  MAX_TRACEPARENT_CHARS,
  remoteContext,
  resetTracingForTests,
  startChunkTrace,
  startSendSpan,
  traced,
  traceFields,
  tracingActive,
  withCause,
} from './trace.js';

const TRACE = '4bf92f3577b34da6a3ce929d0e0e4736';
const SPAN = '00f067aa0ba902b7';
const exporter = new InMemorySpanExporter();
const provider = new TracerProvider({ spanProcessors: [new SimpleSpanProcessor({ exporter })] });

beforeAll(() => {
  context.setGlobalContextManager(new AsyncLocalStorageContextManager().enable());
  trace.setGlobalTracerProvider(provider);
  markTracingActive(async () => undefined);
});
afterEach(() => exporter.reset());
afterAll(async () => {
  resetTracingForTests();
  trace.disable();
  context.disable();
  await provider.shutdown();
});

const consumed = (eventId: string, headers: Record<string, string>, offset = '7') => ({
  eventId,
  eventType: 'SendRequested',
  topic: 't.outreach.send-requested.v1',
  partition: 1,
  offset,
  headers,
});

describe('remoteContext', () => {
  it('reads a valid W3C traceparent, with its sampled flag', () => {
    const sampled = trace.getSpanContext(remoteContext(`00-${TRACE}-${SPAN}-01`) ?? ROOT_CONTEXT);
    expect(sampled).toMatchObject({ traceId: TRACE, spanId: SPAN, traceFlags: 1, isRemote: true });
    expect(trace.getSpanContext(remoteContext(`00-${TRACE}-${SPAN}-00`) ?? ROOT_CONTEXT)?.traceFlags).toBe(0);
  });

  it.each([
    ['empty', ''],
    ['garbage', 'not-a-traceparent'],
    ['missing flags', `00-${TRACE}-${SPAN}`],
    ['version ff', `ff-${TRACE}-${SPAN}-01`],
    ['all-zero trace id', `00-${'0'.repeat(32)}-${SPAN}-01`],
    ['all-zero span id', `00-${TRACE}-${'0'.repeat(16)}-01`],
    ['upper case', `00-${TRACE.toUpperCase()}-${SPAN}-01`],
    ['version 00 with a fifth field', `00-${TRACE}-${SPAN}-01-ab`],
    ['longer than the bound', `00-${TRACE}-${SPAN}-01`.padEnd(MAX_TRACEPARENT_CHARS + 1, ' ')],
    ['a megabyte', 'a'.repeat(1_000_000)],
  ])('ignores a traceparent that is %s', (_, value) => {
    expect(remoteContext(value)).toBeUndefined();
  });

  it('keeps a tracestate within the W3C bounds and drops a huge one', () => {
    const members = Array.from({ length: 100 }, (_, i) => `v${i}=${'x'.repeat(20)}`).join(',');
    const kept = traceFields(remoteContext(`00-${TRACE}-${SPAN}-01`, members) ?? ROOT_CONTEXT).tracestate ?? '';
    expect(kept.length).toBeGreaterThan(0);
    expect(kept.length).toBeLessThanOrEqual(512);
    const huge = remoteContext(`00-${TRACE}-${SPAN}-01`, `a=${'b'.repeat(100_000)}`);
    expect(trace.getSpanContext(huge ?? ROOT_CONTEXT)?.traceId).toBe(TRACE);
    expect(traceFields(huge ?? ROOT_CONTEXT).tracestate).toBeUndefined();
  });
});

describe('a consumed event and what it causes', () => {
  it('is processed in a span continuing its headers, and what it causes continues that span while it is handled', async () => {
    const chunk = startChunkTrace([consumed('e-1', { traceparent: `00-${TRACE}-${SPAN}-01` })], 'group-a');
    const inHandler = await chunk.run(async () => trace.getActiveSpan()?.spanContext());
    // An outbox row written because of e-1 (its causationId), from any async context.
    const caused = trace.getSpanContext(causeContext(undefined, 'e-1'));
    chunk.end(new Map());
    const [process] = exporter.getFinishedSpans();
    expect(process).toMatchObject({ name: 'process t.outreach.send-requested.v1', kind: SpanKind.CONSUMER });
    expect(process?.spanContext().traceId).toBe(TRACE);
    expect(process?.parentSpanContext?.spanId).toBe(SPAN);
    expect(process?.attributes).toMatchObject({
      'messaging.message.id': 'e-1',
      'messaging.consumer.group.name': 'group-a',
    });
    expect(inHandler?.spanId).toBe(process?.spanContext().spanId);
    expect(caused?.spanId).toBe(process?.spanContext().spanId);
    // Released once handled: later work caused by it starts from the active context.
    expect(trace.getSpanContext(causeContext(undefined, 'e-1'))).toBeUndefined();
  });

  it('starts a new trace for an event whose header is garbage, and marks dead-lettered events failed without their addresses', () => {
    const chunk = startChunkTrace(
      [consumed('e-2', { traceparent: 'garbage' }, '1'), consumed('e-3', {}, '2')],
      'group-a',
    );
    chunk.end(new Map([['2', 'REJECTED: ada@example.com is not deliverable']]));
    const [garbage, rejected] = exporter.getFinishedSpans();
    expect(garbage?.parentSpanContext).toBeUndefined();
    expect(garbage?.status.code).toBe(SpanStatusCode.UNSET);
    expect(rejected?.status).toEqual({
      code: SpanStatusCode.ERROR,
      message: 'dead-lettered: REJECTED: [address] is not deliverable',
    });
  });

  it('prefers an explicit traceparent, then the cause, then the active context', () => {
    const chunk = startChunkTrace([consumed('e-4', { traceparent: `00-${TRACE}-${SPAN}-01` })], 'g');
    const other = 'aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa';
    expect(trace.getSpanContext(causeContext(`00-${other}-${SPAN}-01`, 'e-4'))?.traceId).toBe(other);
    expect(trace.getSpanContext(causeContext('garbage', 'e-4'))?.traceId).toBe(TRACE);
    const active = trace.getTracer('t').startSpan('request');
    const fromActive = context.with(trace.setSpan(ROOT_CONTEXT, active), () => causeContext(null, 'unknown'));
    expect(trace.getSpanContext(fromActive)?.spanId).toBe(active.spanContext().spanId);
    active.end();
    chunk.end(new Map());
  });
});

describe('publishing', () => {
  it("writes the send span's own context into the record's headers, as a child of the cause", () => {
    const headers: Record<string, string> = { traceparent: 'stale', 'event-id': 'e-5' };
    const parent = remoteContext(`00-${TRACE}-${SPAN}-01`) ?? ROOT_CONTEXT;
    const span = startSendSpan({ topic: 'x.v1', eventId: 'e-5', eventType: 'SendRecorded', headers }, parent);
    span.end();
    const [sent] = exporter.getFinishedSpans();
    expect(sent).toMatchObject({ name: 'send x.v1', kind: SpanKind.PRODUCER });
    expect(sent?.parentSpanContext?.spanId).toBe(SPAN);
    expect(headers.traceparent).toBe(formatTraceparent(span.spanContext()));
    expect(headers.traceparent).toMatch(new RegExp(`^00-${TRACE}-[0-9a-f]{16}-01$`));
    expect(headers['event-id']).toBe('e-5');
  });

  it('respects a parent that was not sampled: nothing recorded, the flag carried on', () => {
    const headers: Record<string, string> = {};
    const parent = remoteContext(`00-${TRACE}-${SPAN}-00`) ?? ROOT_CONTEXT;
    const span = startSendSpan({ topic: 'x.v1', eventId: 'e-6', eventType: 'SendRecorded', headers }, parent);
    span.end();
    expect(span.isRecording()).toBe(false);
    expect(exporter.getFinishedSpans()).toEqual([]);
    expect(headers.traceparent).toMatch(new RegExp(`^00-${TRACE}-(?!${SPAN})[0-9a-f]{16}-00$`));
  });
});

describe('traced calls', () => {
  it('are children of the event that caused them, with what they report about themselves', async () => {
    const chunk = startChunkTrace([consumed('e-7', { traceparent: `00-${TRACE}-${SPAN}-01` })], 'g');
    await withCause('e-7', () =>
      traced('smtp send', { kind: 'client', attributes: { 'server.port': 25 } }, async (span) => {
        span.setAttribute('outreach.send.result', 'rejected');
        span.fail('smtp 550 5.1.1 <bob@example.org> unknown');
      }),
    );
    chunk.end(new Map());
    const [call, process] = exporter.getFinishedSpans();
    expect(call?.parentSpanContext?.spanId).toBe(process?.spanContext().spanId);
    expect(call).toMatchObject({ name: 'smtp send', kind: SpanKind.CLIENT });
    expect(call?.attributes).toEqual({ 'server.port': 25, 'outreach.send.result': 'rejected' });
    expect(call?.status).toEqual({ code: SpanStatusCode.ERROR, message: 'smtp 550 5.1.1 <[address]> unknown' });
  });

  it('record a thrown error and rethrow it', async () => {
    await expect(traced('call', {}, async () => Promise.reject(new Error('boom')))).rejects.toThrow('boom');
    expect(exporter.getFinishedSpans()[0]?.status).toEqual({ code: SpanStatusCode.ERROR, message: 'Error: boom' });
  });
});

describe('with tracing off', () => {
  it('runs the work as it is: no span, no context', async () => {
    resetTracingForTests();
    try {
      expect(tracingActive()).toBe(false);
      const seen = await withCause('e-8', () => traced('smtp send', {}, async () => trace.getActiveSpan()));
      expect(seen).toBeUndefined();
      expect(exporter.getFinishedSpans()).toEqual([]);
    } finally {
      markTracingActive(async () => undefined);
    }
  });
});

describe('log lines', () => {
  /** A logger writing into an array, as createLogger builds every service's. */
  function capture() {
    const lines: Array<Record<string, unknown>> = [];
    const logger = createLogger({ name: 'probe' }, { write: (line: string) => lines.push(JSON.parse(line)) });
    return { logger, lines };
  }

  it("carry the active span's trace_id, span_id and trace_flags, and nothing outside a span", async () => {
    const { logger, lines } = capture();
    logger.info('before');
    const ids = await traced('smtp send', {}, async () => {
      logger.info('inside');
      return trace.getActiveSpan()?.spanContext();
    });
    logger.info('after');
    expect(ids).toBeDefined();
    expect(lines.map((l) => [l.msg, l.trace_id, l.span_id, l.trace_flags])).toEqual([
      ['before', undefined, undefined, undefined],
      ['inside', ids!.traceId, ids!.spanId, '01'],
      ['after', undefined, undefined, undefined],
    ]);
  });

  it("carry a remote parent's trace id in a span it starts", () => {
    const { logger, lines } = capture();
    const parent = remoteContext(`00-${TRACE}-${SPAN}-01`);
    context.with(parent!, () => traced('consume', {}, async () => logger.info('child')));
    expect(lines[0]?.trace_id).toBe(TRACE);
  });

  it('carry no trace fields while tracing is off, even inside a context', () => {
    resetTracingForTests();
    try {
      const { logger, lines } = capture();
      context.with(remoteContext(`00-${TRACE}-${SPAN}-01`)!, () => logger.info('off'));
      expect(lines[0]).not.toHaveProperty('trace_id');
    } finally {
      markTracingActive(async () => undefined);
    }
  });
});
