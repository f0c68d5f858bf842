/**
 * Trace context across the platform's hops, on the OpenTelemetry API (the SDK is started, or not, by
 * ./start.ts). HTTP is instrumented by OpenTelemetry's packages; the Kafka hops are ours, because
 * their batches mix requests: one kafkajs `sendBatch` carries records of many traces (the outbox
 * relay) and one `eachBatch` hands over events of many traces, which the kafkajs instrumentation
 * parents on one context and links, so no request would keep one trace id.
 *
 * - Publishing (EventProducer, the outbox relay): one `send <topic>` PRODUCER span per record, whose
 *   context becomes the record's `traceparent`/`tracestate` headers.
 * - Consuming (ConsumerRunner): one `process <topic>` CONSUMER span per event, a child of its
 *   headers' context. While the handler runs, each event's context is held under its eventId, so
 *   whatever the handler produces *because of* that event (its `causationId`) continues that event's
 *   trace, even from batch SQL that serves many events; side calls made once for a whole chunk (an
 *   HTTP call, a query) run in the context of the chunk's first event.
 * - The outbox stores the context of the cause with the row (columns `traceparent`, `tracestate`),
 *   so the relay's publish, later and in another session, continues the request's trace.
 *
 * When the SDK is not started, `tracingActive()` is false and every helper here returns at its
 * first line: no spans, no context lookups. Records then carry a fresh `traceparent` as before.
 * Incoming contexts are read with the W3C propagator only (our own headers); anything invalid,
 * oversized or unsampled is treated as the specification says: ignored (a new trace) or respected.
 */
import {
  context,
  defaultTextMapGetter,
  isSpanContextValid,
  defaultTextMapSetter,
  ROOT_CONTEXT,
  SpanKind,
  SpanStatusCode,
  trace,
  type Attributes,
  type Context,
  type Span,
  type SpanContext,
  type Tracer,
} from '@opentelemetry/api';
import { W3CTraceContextPropagator } from '@opentelemetry/core';
import { maskAddresses, setLogLineContext } from '../logger.js';

/** Longer headers are not parsed at all (version 00 needs 55 characters; later versions may add fields). */
export const MAX_TRACEPARENT_CHARS = 256;
/** A longer tracestate is dropped whole; a shorter one is bounded by the W3C rules (32 members, 512 characters). */
export const MAX_TRACESTATE_CHARS = 8_192;

const SCOPE = '@outreach/shared';
const w3c = new W3CTraceContextPropagator();

let active = false;
let shutdown: (() => Promise<void>) | undefined;
let tracer: Tracer | undefined;

/** True once the SDK runs in this process (./start.ts); false means: no spans, no cost. */
export function tracingActive(): boolean {
  return active;
}

/** Called by ./start.ts once the SDK runs, with its shutdown (which flushes the spans not yet exported). */
export function markTracingActive(stop: () => Promise<void>): void {
  active = true;
  shutdown = stop;
  tracer = trace.getTracer(SCOPE);
  setLogLineContext(logLineContext);
}

/** The OpenTelemetry log data model's names (as @opentelemetry/instrumentation-pino writes them). */
function logLineContext(): Record<string, string> {
  const spanContext = trace.getSpan(context.active())?.spanContext();
  if (spanContext === undefined || !isSpanContextValid(spanContext)) return {};
  return {
    trace_id: spanContext.traceId,
    span_id: spanContext.spanId,
    trace_flags: `0${spanContext.traceFlags.toString(16)}`.slice(-2),
  };
}

/** Exports what is buffered and stops the SDK; a no-op when tracing is off. Errors are swallowed: never fail a shutdown. */
export async function shutdownTracing(): Promise<void> {
  const stop = shutdown;
  active = false;
  shutdown = undefined;
  tracer = undefined;
  setLogLineContext(undefined);
  await stop?.().catch(() => undefined);
}

/** For tests that start an SDK of their own in-process. */
export function resetTracingForTests(): void {
  active = false;
  shutdown = undefined;
  tracer = undefined;
  setLogLineContext(undefined);
}

function getTracer(): Tracer {
  tracer ??= trace.getTracer(SCOPE);
  return tracer;
}

/**
 * The context carried by W3C headers, or undefined when there is none that is valid: a malformed,
 * oversized or all-zero traceparent is ignored (the caller starts a new trace). The sampled flag is
 * kept, so a parent that was not sampled stays unsampled downstream.
 */
export function remoteContext(traceparent?: string | null, tracestate?: string | null): Context | undefined {
  if (typeof traceparent !== 'string' || traceparent.length === 0 || traceparent.length > MAX_TRACEPARENT_CHARS)
    return undefined;
  const carrier: Record<string, string> = { traceparent };
  if (typeof tracestate === 'string' && tracestate.length > 0 && tracestate.length <= MAX_TRACESTATE_CHARS)
    carrier.tracestate = tracestate;
  const extracted = w3c.extract(ROOT_CONTEXT, carrier, defaultTextMapGetter);
  return trace.getSpanContext(extracted) ? extracted : undefined;
}

/** `00-<trace>-<span>-<flags>` of a span context (only the flags version 00 defines). */
export function formatTraceparent(spanContext: SpanContext): string {
  const flags = (spanContext.traceFlags & 0xff).toString(16).padStart(2, '0');
  return `00-${spanContext.traceId}-${spanContext.spanId}-${flags}`;
}

/** The W3C fields of a context (empty when it holds no valid span context). */
export function traceFields(ctx: Context): { traceparent?: string; tracestate?: string } {
  const spanContext = trace.getSpanContext(ctx);
  if (!spanContext || !trace.isSpanContextValid(spanContext)) return {};
  const tracestate = spanContext.traceState?.serialize();
  return { traceparent: formatTraceparent(spanContext), ...(tracestate ? { tracestate } : {}) };
}

/** The contexts of the events being handled now, by eventId (see the module header). */
const handling = new Map<string, Context>();

/**
 * The context an event's publication continues: an explicit traceparent (when valid), else the
 * context of the event that caused it while that one is being handled here, else the active one.
 */
export function causeContext(traceparent?: string | null, causationId?: string | null): Context {
  return remoteContext(traceparent) ?? (causationId ? handling.get(causationId) : undefined) ?? context.active();
}

/** Runs `fn` in the context of the event `causationId`, if it is being handled here (for calls made per event). */
export function withCause<T>(causationId: string | null | undefined, fn: () => T): T {
  if (!active || !causationId) return fn();
  const ctx = handling.get(causationId);
  return ctx ? context.with(ctx, fn) : fn();
}

const messagingAttributes = (topic: string, eventId: string, eventType: string): Attributes => ({
  'messaging.system': 'kafka',
  'messaging.destination.name': topic,
  'messaging.message.id': eventId,
  'outreach.event.type': eventType,
});

/**
 * The `<operation> <topic>` span of one message under `parent`: PRODUCER for a send, CONSUMER for a
 * process, with the messaging attributes and then `attributes`.
 */
function startMessagingSpan(
  operation: 'send' | 'process',
  message: { readonly topic: string; readonly eventId: string; readonly eventType: string },
  parent: Context,
  attributes: Attributes,
): Span {
  return getTracer().startSpan(
    `${operation} ${message.topic}`,
    {
      kind: operation === 'send' ? SpanKind.PRODUCER : SpanKind.CONSUMER,
      attributes: {
        ...messagingAttributes(message.topic, message.eventId, message.eventType),
        'messaging.operation.name': operation,
        'messaging.operation.type': operation,
        ...attributes,
      },
    },
    parent,
  );
}

/**
 * Starts the `send <topic>` span of one record under `parent` and writes its context into `headers`
 * (replacing any traceparent/tracestate there). End it with `endSpans` once the broker has the record.
 */
export function startSendSpan(
  record: { topic: string; eventId: string; eventType: string; headers: Record<string, string> },
  parent: Context,
  attributes: Attributes = {},
): Span {
  const span = startMessagingSpan('send', record, parent, attributes);
  delete record.headers.traceparent;
  delete record.headers.tracestate;
  w3c.inject(trace.setSpan(parent, span), record.headers, defaultTextMapSetter);
  return span;
}

/** Ends spans, marking them failed with `error`'s message when given. */
export function endSpans(spans: Iterable<Span>, error?: unknown): void {
  for (const span of spans) {
    if (error !== undefined) {
      span.setStatus({ code: SpanStatusCode.ERROR, message: errorMessage(error) });
    }
    span.end();
  }
}

/** A status message: short, and like a log line, without addresses (a library's error may quote one). */
const statusText = (text: string): string => maskAddresses(text.slice(0, 400)).slice(0, 200);
const errorMessage = (error: unknown): string =>
  statusText(error instanceof Error ? `${error.name}: ${error.message}` : String(error));

export interface ConsumedForTrace {
  readonly eventId: string;
  readonly eventType: string;
  readonly topic: string;
  readonly partition: number;
  readonly offset: string;
  readonly headers: Readonly<Record<string, string>>;
}

/** The `process <topic>` spans of one chunk, from the handler's call to its verdicts. */
export interface ChunkTrace {
  /** Runs the handler in the context of the chunk's first event. */
  run<T>(fn: () => Promise<T>): Promise<T>;
  /** Ends every span: `failed` maps offsets to the reason their event was dead-lettered; `error` fails them all. */
  end(failed: ReadonlyMap<string, string>, error?: unknown): void;
}

/** Starts one CONSUMER span per event, each a child of its headers' context, and holds them by eventId. */
export function startChunkTrace(events: readonly ConsumedForTrace[], groupId: string): ChunkTrace {
  const started = events.map((event) => {
    const parent = remoteContext(event.headers.traceparent, event.headers.tracestate) ?? ROOT_CONTEXT;
    const span = startMessagingSpan('process', event, parent, {
      'messaging.consumer.group.name': groupId,
      'messaging.destination.partition.id': String(event.partition),
      'messaging.kafka.offset': Number(event.offset),
    });
    const ctx = trace.setSpan(parent, span);
    handling.set(event.eventId, ctx);
    return { event, span, ctx };
  });
  const first = started[0]?.ctx;
  return {
    run: (fn) => (first ? context.with(first, fn) : fn()),
    end(failed, error) {
      for (const { event, span, ctx } of started) {
        const reason = failed.get(event.offset);
        if (error !== undefined) span.setStatus({ code: SpanStatusCode.ERROR, message: errorMessage(error) });
        else if (reason !== undefined)
          span.setStatus({ code: SpanStatusCode.ERROR, message: statusText(`dead-lettered: ${reason}`) });
        span.end();
        // A redelivery of the same event may be held by another chunk meanwhile: release only our own.
        if (handling.get(event.eventId) === ctx) handling.delete(event.eventId);
      }
    },
  };
}

/** What a traced piece of work may say about itself. */
export interface TracedSpan {
  setAttribute(key: string, value: string | number | boolean): void;
  /** Marks the span failed with a reason (a code, never personal data). */
  fail(reason: string): void;
}

const NO_SPAN: TracedSpan = { setAttribute: () => undefined, fail: () => undefined };

/**
 * Runs `fn` inside a span of the active context (for a call out of the process: an SMTP
 * conversation, a provider API). With tracing off, `fn` runs as it is.
 */
export async function traced<T>(
  name: string,
  options: { readonly kind?: 'client' | 'internal'; readonly attributes?: Attributes },
  fn: (span: TracedSpan) => Promise<T>,
): Promise<T> {
  if (!active) return fn(NO_SPAN);
  const parent = context.active();
  const span = getTracer().startSpan(
    name,
    { kind: options.kind === 'client' ? SpanKind.CLIENT : SpanKind.INTERNAL, attributes: options.attributes ?? {} },
    parent,
  );
  const handle: TracedSpan = {
    setAttribute: (key, value) => span.setAttribute(key, value),
    fail: (reason) => span.setStatus({ code: SpanStatusCode.ERROR, message: statusText(reason) }),
  };
  try {
    return await context.with(trace.setSpan(parent, span), () => fn(handle));
  } catch (error) {
    span.setStatus({ code: SpanStatusCode.ERROR, message: errorMessage(error) });
    throw error;
  } finally {
    span.end();
  }
}
