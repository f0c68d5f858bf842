import { randomBytes } from 'node:crypto';
import { Partitioners, type IHeaders, type Kafka, type Producer } from 'kafkajs';
import { eventCodec } from '../contracts/codec.js';
import type { OutreachEvent } from '../contracts/events.generated.js';
import { normalizeCandidateKey } from '../domain/keys.js';

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

/** Every event is keyed by its candidate, so one candidate's events stay in order on one partition. */
export function messageKey(event: OutreachEvent): string {
  if ('candidateKey' in event) return event.candidateKey;
  if ('candidateId' in event) return normalizeCandidateKey(event.candidateId);
  throw new Error(`${(event as { type: string }).type} has no candidate to key by`);
}

/** W3C traceparent: continue the caller's trace with a new span id, or start a trace. */
export function childTraceparent(parent?: string): string {
  const match = parent ? /^00-([0-9a-f]{32})-[0-9a-f]{16}-([0-9a-f]{2})$/.exec(parent) : null;
  const traceId = match?.[1] ?? randomBytes(16).toString('hex');
  return `00-${traceId}-${randomBytes(8).toString('hex')}-${match?.[2] ?? '01'}`;
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
 * Idempotent producer with acks=all and one request in flight, so retries neither duplicate nor
 * reorder within a partition. The partitioner is Java's (murmur2), so other clients agree on keys.
 */
export class EventProducer {
  private readonly producer: Producer;
  private connected: Promise<void> | undefined;

  constructor(kafka: Kafka, options: { transactionalId?: string } = {}) {
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

  async publish(events: readonly OutgoingEvent[]): Promise<void> {
    const byTopic = new Map<string, RawRecord[]>();
    for (const { topic, event, traceparent } of events) {
      const records = byTopic.get(topic) ?? [];
      records.push({
        key: messageKey(event),
        value: eventCodec.encode(event),
        headers: eventHeaders(event, traceparent),
      });
      byTopic.set(topic, records);
    }
    await this.publishRaw([...byTopic].map(([topic, records]) => ({ topic, records })));
  }

  /** Already-encoded records (the outbox relay, the DLQ). */
  async publishRaw(batches: ReadonlyArray<{ topic: string; records: readonly RawRecord[] }>): Promise<void> {
    if (batches.length === 0) return;
    await this.connect();
    await this.producer.sendBatch({
      acks: -1,
      topicMessages: batches.map(({ topic, records }) => ({
        topic,
        messages: records.map((r) => ({ key: r.key, value: r.value, headers: r.headers })),
      })),
    });
  }

  async disconnect(): Promise<void> {
    this.connected = undefined;
    await this.producer.disconnect();
  }
}
