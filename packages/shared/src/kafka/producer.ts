import { randomBytes } from 'node:crypto';
import type { Span } from '@opentelemetry/api';
import { Partitioners, type Admin, type ConfigResourceTypes, type IHeaders, type Kafka, type Producer } from 'kafkajs';
import { eventCodec } from '@outreach/contracts';
import type { OutreachEvent } from '@outreach/contracts';
import { normalizeCandidateKey } from '@outreach/contracts';
import type { Logger } from '../logger.js';
import { causeContext, endSpans, startSendSpan, tracingActive } from '../telemetry/trace.js';

export const HEADER = {
  eventId: 'event-id',
  eventType: 'event-type',
  correlationId: 'correlation-id',
  traceparent: 'traceparent',
} as const;

export interface OutgoingEvent {
  readonly topic: string;
  readonly event: OutreachEvent;
  /** W3C trace context of the cause; a new span of the same trace is recorded on the message. */
  readonly traceparent?: string;
}

export interface RawRecord {
  readonly key: string | Buffer | null;
  readonly value: Buffer | null;
  readonly headers: IHeaders;
}

/**
 * Events are keyed by their candidate (suppressions by their address's hash, rejections by their
 * request), so they stay in order on one partition.
 */
export function messageKey(event: OutreachEvent): string {
  // A suppression is about an address, not a candidate: its keyed hash orders one address's events.
  if (event.type === 'AddressSuppressed') return event.emailHash;
  // A rejection is about a request (it names no candidate): its id orders one request's rejections.
  if (event.type === 'OutreachRejected') return event.requestId;
  if ('candidateKey' in event) return event.candidateKey;
  if ('candidateId' in event) return normalizeCandidateKey(event.candidateId);
  throw new Error(`${(event as { type: string }).type} has no candidate to key by`);
}

/**
 * Random bytes for ids, drawn from a pool refilled 4 KiB at a time: every event gets a span id (and a
 * request without a trace a trace id), and a `randomBytes` call per id was 4% of the planner's CPU in
 * the bench's profile. Same generator (the CSPRNG), fewer calls into it; what `randomUUID` does too.
 */
const RANDOM_POOL_BYTES = 4096;
let randomPool = Buffer.alloc(0);
let randomOffset = 0;
export function randomHex(bytes: number): string {
  if (randomOffset + bytes > randomPool.length) {
    randomPool = randomBytes(Math.max(RANDOM_POOL_BYTES, bytes));
    randomOffset = 0;
  }
  const hex = randomPool.toString('hex', randomOffset, randomOffset + bytes);
  randomOffset += bytes;
  return hex;
}

const ZERO_TRACE_ID = '0'.repeat(32);
const ZERO_SPAN_ID = '0'.repeat(16);

/** W3C traceparent: continue the caller's trace with a new span id, or start a trace. */
export function childTraceparent(parent?: string): string {
  const match = parent ? /^00-([0-9a-f]{32})-[0-9a-f]{16}-([0-9a-f]{2})$/.exec(parent) : null;
  // All zeros is the one invalid id (W3C trace context); a draw of it (2^-64 and less) is drawn again.
  let traceId = match?.[1] ?? randomHex(16);
  while (traceId === ZERO_TRACE_ID) traceId = randomHex(16);
  let spanId = randomHex(8);
  while (spanId === ZERO_SPAN_ID) spanId = randomHex(8);
  return `00-${traceId}-${spanId}-${match?.[2] ?? '01'}`;
}

export function eventHeaders(event: OutreachEvent, traceparent?: string): Record<string, string> {
  return {
    [HEADER.eventId]: event.eventId,
    [HEADER.eventType]: event.type,
    [HEADER.correlationId]: event.correlationId,
    [HEADER.traceparent]: childTraceparent(traceparent),
  };
}

/**
 * Bytes a v2 record batch adds around its records (base offset 8, length 4, leader epoch 4, magic 1,
 * CRC 4, attributes 2, last offset delta 4, first and max timestamps 16, producer id 8, producer
 * epoch 2, base sequence 4, record count 4). The broker compares the whole batch with the topic's
 * `max.message.bytes`.
 */
export const RECORD_BATCH_OVERHEAD = 61;
/** Used when a topic's `max.message.bytes` cannot be read (the broker default is 1 MiB + 12). */
export const FALLBACK_MAX_MESSAGE_BYTES = 1_048_576;
/** No request larger than this, whatever the topics allow (the broker caps requests at 100 MiB). */
const MAX_REQUEST_BYTES = 16 * 1_048_576;
/**
 * kafkajs's ConfigResourceTypes.TOPIC. Node's ESM loader does not see that named export of the
 * CommonJS kafkajs (its exports list stops being static before it), so the value is spelled here.
 */
const TOPIC_RESOURCE = 2 as ConfigResourceTypes;
/** A topic's limit is read again after this long, so a raised limit is picked up without a restart. */
const LIMIT_TTL_MS = 5 * 60_000;

const byteLength = (value: string | Buffer | null | undefined): number =>
  value == null ? 0 : typeof value === 'string' ? Buffer.byteLength(value) : value.length;

/**
 * An upper bound of the bytes one record takes in a batch: every varint at its widest (length,
 * timestamp delta, offset delta, key, value and header lengths), then key, value and headers.
 */
export function recordBytes(record: RawRecord): number {
  let headers = 5;
  for (const [name, value] of Object.entries(record.headers)) {
    for (const one of Array.isArray(value) ? value : [value]) headers += 10 + Buffer.byteLength(name) + byteLength(one);
  }
  return 5 + 1 + 10 + 5 + 5 + byteLength(record.key) + 5 + byteLength(record.value) + headers;
}

/** True when `record` fits in a batch of its own under `limitBytes`. */
export function fitsAlone(record: RawRecord, limitBytes: number): boolean {
  return RECORD_BATCH_OVERHEAD + recordBytes(record) <= limitBytes;
}

/** A record bigger than its topic accepts, found before anything was sent. */
export class RecordTooLargeError extends Error {
  override readonly name = 'RecordTooLargeError';
  constructor(
    readonly topic: string,
    readonly bytes: number,
    readonly limitBytes: number,
  ) {
    super(`a ${bytes}-byte record does not fit ${topic} (max.message.bytes ${limitBytes})`);
  }
}

/** The broker refused a batch as too large (its limit is lower than the one we read), or we did. */
export function isMessageTooLarge(error: unknown): boolean {
  for (let current = error, depth = 0; typeof current === 'object' && current !== null && depth < 5; depth++) {
    const { type, name, cause } = current as { type?: unknown; name?: unknown; cause?: unknown };
    if (type === 'MESSAGE_TOO_LARGE' || type === 'RECORD_LIST_TOO_LARGE' || name === 'RecordTooLargeError') return true;
    current = cause;
  }
  return false;
}

/**
 * Splits records into requests that each stay under every topic's limit (one record batch per
 * partition; counting a topic's records together bounds each partition's batch too), keeping
 * their order. Throws RecordTooLargeError, before anything is sent, for a record that cannot fit.
 */
export function planRequests(
  batches: ReadonlyArray<{ topic: string; records: readonly RawRecord[] }>,
  limitOf: (topic: string) => number,
): Array<Array<{ topic: string; records: RawRecord[] }>> {
  const requests: Array<Array<{ topic: string; records: RawRecord[] }>> = [];
  let current = new Map<string, { records: RawRecord[]; bytes: number }>();
  let total = 0;
  const flush = () => {
    if (current.size > 0) requests.push([...current].map(([topic, { records }]) => ({ topic, records })));
    current = new Map();
    total = 0;
  };
  for (const { topic, records } of batches) {
    const limit = limitOf(topic);
    for (const record of records) {
      const bytes = recordBytes(record);
      if (RECORD_BATCH_OVERHEAD + bytes > limit)
        throw new RecordTooLargeError(topic, RECORD_BATCH_OVERHEAD + bytes, limit);
      const used = current.get(topic)?.bytes ?? RECORD_BATCH_OVERHEAD;
      if (used + bytes > limit || total + bytes > MAX_REQUEST_BYTES) flush();
      const entry = current.get(topic) ?? { records: [], bytes: RECORD_BATCH_OVERHEAD };
      entry.records.push(record);
      entry.bytes += bytes;
      total += bytes;
      current.set(topic, entry);
    }
  }
  flush();
  return requests;
}

/**
 * Idempotent producer with acks=all and one request in flight, so retries neither duplicate nor
 * reorder within a partition. The partitioner is Java's (murmur2), so other clients agree on keys.
 * Requests are cut by bytes below each topic's `max.message.bytes`, read from the topic's config
 * (refreshed every 5 minutes; 1 MiB with a warning when it cannot be read).
 */
export class EventProducer {
  private readonly producer: Producer;
  private connected: Promise<void> | undefined;
  private admin: Admin | undefined;
  private readonly limits = new Map<string, { bytes: Promise<number>; at: number }>();
  private readonly logger: Logger | undefined;

  constructor(
    private readonly kafka: Kafka,
    options: { transactionalId?: string; logger?: Logger } = {},
  ) {
    this.logger = options.logger;
    this.producer = kafka.producer({
      idempotent: true,
      maxInFlightRequests: 1,
      createPartitioner: Partitioners.DefaultPartitioner,
      allowAutoTopicCreation: false,
      ...(options.transactionalId ? { transactionalId: options.transactionalId } : {}),
    });
  }

  connect(): Promise<void> {
    this.connected ??= this.producer.connect().catch((error: unknown) => {
      this.connected = undefined;
      throw error;
    });
    return this.connected;
  }

  /**
   * With tracing on, each record gets a `send <topic>` span whose context is its traceparent: a
   * child of `traceparent` when given, else of the event's cause being handled, else of the active
   * context (an HTTP request's).
   */
  async publish(events: readonly OutgoingEvent[]): Promise<void> {
    const byTopic = new Map<string, RawRecord[]>();
    const spans: Span[] = [];
    for (const { topic, event, traceparent } of events) {
      const records = byTopic.get(topic) ?? [];
      const headers = eventHeaders(event, traceparent);
      if (tracingActive()) {
        const parent = causeContext(traceparent, event.causationId);
        spans.push(startSendSpan({ topic, eventId: event.eventId, eventType: event.type, headers }, parent));
      }
      records.push({ key: messageKey(event), value: eventCodec.encode(event), headers });
      byTopic.set(topic, records);
    }
    try {
      await this.publishRaw([...byTopic].map(([topic, records]) => ({ topic, records })));
    } catch (error) {
      endSpans(spans, error);
      throw error;
    }
    endSpans(spans);
  }

  /**
   * Already-encoded records (the outbox relay, the DLQ), in as many requests as their bytes need,
   * one after the other. A record too large for its topic throws RecordTooLargeError before any
   * request is sent; callers that must go on without it check `fitsAlone` first.
   */
  async publishRaw(batches: ReadonlyArray<{ topic: string; records: readonly RawRecord[] }>): Promise<void> {
    if (batches.length === 0) return;
    const topics = [...new Set(batches.map((b) => b.topic))];
    const limits = new Map(await Promise.all(topics.map(async (t) => [t, await this.maxMessageBytes(t)] as const)));
    const requests = planRequests(batches, (topic) => limits.get(topic) ?? FALLBACK_MAX_MESSAGE_BYTES);
    await this.connect();
    for (const request of requests) {
      try {
        await this.producer.sendBatch({
          acks: -1,
          topicMessages: request.map(({ topic, records }) => ({
            topic,
            messages: records.map((r) => ({ key: r.key, value: r.value, headers: r.headers })),
          })),
        });
      } catch (error) {
        // The limit we read is stale (lowered since): read it again before the caller retries.
        if (isMessageTooLarge(error)) for (const { topic } of request) this.limits.delete(topic);
        throw error;
      }
    }
  }

  /** The topic's `max.message.bytes`, cached for 5 minutes. */
  maxMessageBytes(topic: string): Promise<number> {
    const cached = this.limits.get(topic);
    if (cached && Date.now() - cached.at < LIMIT_TTL_MS) return cached.bytes;
    const bytes = this.readLimit(topic);
    this.limits.set(topic, { bytes, at: Date.now() });
    return bytes;
  }

  private async readLimit(topic: string): Promise<number> {
    try {
      this.admin ??= this.kafka.admin({ retry: { retries: 2 } });
      await this.admin.connect();
      const { resources } = await this.admin.describeConfigs({
        includeSynonyms: false,
        resources: [{ type: TOPIC_RESOURCE, name: topic, configNames: ['max.message.bytes'] }],
      });
      const entry = resources[0]?.configEntries.find((e) => e.configName === 'max.message.bytes');
      const bytes = Number(entry?.configValue);
      if (!Number.isSafeInteger(bytes) || bytes <= RECORD_BATCH_OVERHEAD) {
        throw new Error(`unusable max.message.bytes ${JSON.stringify(entry?.configValue)}`);
      }
      return bytes;
    } catch (error) {
      this.logger?.warn(
        { err: error, topic, assumedBytes: FALLBACK_MAX_MESSAGE_BYTES },
        "could not read the topic's max.message.bytes; assuming 1 MiB",
      );
      return FALLBACK_MAX_MESSAGE_BYTES;
    }
  }

  async disconnect(): Promise<void> {
    this.connected = undefined;
    await this.admin?.disconnect().catch(() => undefined);
    this.admin = undefined;
    await this.producer.disconnect();
  }
}
