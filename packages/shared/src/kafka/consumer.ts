/**
 * The one consumer runner. Per kafkajs batch (one partition), in chunks:
 *   decode each message; bytes that are not a valid event go to `<topic>.dlq` with the reason;
 *   hand the decoded events to the service's handler (which commits its own database work);
 *   a transient failure (database or broker down) is retried with backoff, heartbeating, without
 *   skipping or committing; any other failure is narrowed to the one event that causes it, which is
 *   dead-lettered, so a poison message never blocks its partition or crash-loops the consumer;
 *   only then are the chunk's offsets resolved and committed.
 * Work on a batch stops as soon as it goes stale (rebalance) or the consumer is stopping; the
 * uncommitted rest is redelivered, which handlers tolerate because they are idempotent.
 */
import type { Consumer, EachBatchPayload, IHeaders, Kafka, KafkaMessage } from 'kafkajs';
import type { Registry } from 'prom-client';
import { eventCodec } from '../contracts/codec.js';
import type { OutreachEvent } from '../contracts/events.generated.js';
import type { Logger } from '../logger.js';
import { consumerMetrics } from '../metrics.js';
import { EventProducer, HEADER, type RawRecord } from './producer.js';
import { dlqTopicOf } from './topics.js';

export interface ConsumedEvent<E extends OutreachEvent = OutreachEvent> {
  readonly event: E;
  readonly topic: string;
  readonly partition: number;
  readonly offset: string;
  readonly key: string | null;
  /** The record timestamp: the broker's append time on LogAppendTime topics. */
  readonly timestamp: number;
  readonly headers: Readonly<Record<string, string>>;
}

export interface Rejection {
  readonly offset: string;
  readonly reason: string;
}

export interface BatchContext {
  readonly logger: Logger;
  /** Call during long work; rejects when the group is rebalancing (let it propagate). */
  heartbeat(): Promise<void>;
  /** True once the batch must not be worked on any more (rebalance or shutdown). */
  shouldStop(): boolean;
  /** A logger carrying the event's correlation id, event id and type. */
  loggerFor(event: ConsumedEvent): Logger;
}

/**
 * Handles events in order. Resolve only once its database work is committed. Return rejections for
 * events that are invalid for the domain (they are dead-lettered with the reason); throw for
 * failures. Throw a TransientError (or a connection error) for "try again later".
 */
export type EventBatchHandler = (
  events: readonly ConsumedEvent[],
  context: BatchContext,
) => Promise<void | { rejected?: readonly Rejection[] }>;

/** A failure worth retrying unchanged: the cause is outside the message. */
export class TransientError extends Error {
  override readonly name = 'TransientError';
}

const TRANSIENT_NODE_CODES = new Set(['ECONNREFUSED', 'ECONNRESET', 'ETIMEDOUT', 'EPIPE', 'ENOTFOUND', 'EAI_AGAIN']);

/** Connection loss, Postgres unavailability or contention, kafkajs retriable errors. */
export function isTransientError(error: unknown): boolean {
  if (error instanceof TransientError) return true;
  if (typeof error !== 'object' || error === null) return false;
  const { code, retriable, message } = error as { code?: unknown; retriable?: unknown; message?: unknown };
  if (retriable === true) return true;
  if (typeof code === 'string') {
    if (TRANSIENT_NODE_CODES.has(code)) return true;
    // Postgres: connection exceptions, admin shutdown / crash / cannot connect now, too many
    // connections, serialization failure, deadlock.
    if (/^08/.test(code) || /^57P0[1-3]$/.test(code) || ['53300', '40001', '40P01'].includes(code)) return true;
  }
  return (
    typeof message === 'string' &&
    /Connection terminated|connection timeout|Client has encountered a connection error|timeout exceeded when trying to connect/i.test(
      message,
    )
  );
}

const REBALANCE_ERRORS = new Set([
  'REBALANCE_IN_PROGRESS',
  'ILLEGAL_GENERATION',
  'UNKNOWN_MEMBER_ID',
  'NOT_COORDINATOR',
  'FENCED_INSTANCE_ID',
]);

/** The group moved on (a heartbeat said so): stop this batch and let kafkajs rejoin. */
export function isRebalanceError(error: unknown): boolean {
  const type = (error as { type?: unknown } | null)?.type;
  return typeof type === 'string' && REBALANCE_ERRORS.has(type);
}

export interface ConsumerRunnerOptions {
  readonly kafka: Kafka;
  readonly groupId: string;
  readonly topics: readonly string[];
  readonly handler: EventBatchHandler;
  readonly logger: Logger;
  readonly metrics?: Registry;
  /** Events handed to the handler at once. */
  readonly chunkSize?: number;
  readonly retry?: { readonly initialMs?: number; readonly maxMs?: number };
  readonly isTransient?: (error: unknown) => boolean;
  readonly fromBeginning?: boolean;
  readonly sessionTimeoutMs?: number;
  /**
   * How often the consumer refreshes topic metadata (default 30 s). A refresh that finds new
   * partitions makes the group rebalance onto them; with `fromBeginning` (the default) they are read
   * from their first record, so a record produced to a new partition before its discovery is late,
   * never skipped.
   */
  readonly metadataMaxAgeMs?: number;
  /** Partitions worked on at once, each in order (default 1). */
  readonly partitionsConsumedConcurrently?: number;
  /** Short long-polls keep shutdown and rebalances quick. */
  readonly maxWaitTimeMs?: number;
}

class StopWork extends Error {
  override readonly name = 'StopWork';
}

const headerText = (headers: IHeaders | undefined): Record<string, string> => {
  const out: Record<string, string> = {};
  for (const [name, value] of Object.entries(headers ?? {})) {
    const first = Array.isArray(value) ? value[0] : value;
    if (first !== undefined) out[name] = first.toString();
  }
  return out;
};

export class ConsumerRunner {
  private readonly consumer: Consumer;
  private readonly dlq: EventProducer;
  private readonly metrics: ReturnType<typeof consumerMetrics> | undefined;
  private readonly chunkSize: number;
  private readonly initialBackoff: number;
  private readonly maxBackoff: number;
  private readonly isTransient: (error: unknown) => boolean;
  private stopping = false;
  /** True once the consumer has joined its group and has an assignment. */
  joined = false;
  /** Observable counters, also exported as metrics. */
  readonly stats = { handled: 0, deadLettered: 0, retries: 0, crashes: 0 };

  constructor(private readonly options: ConsumerRunnerOptions) {
    this.consumer = options.kafka.consumer({
      groupId: options.groupId,
      sessionTimeout: options.sessionTimeoutMs ?? 30_000,
      metadataMaxAge: options.metadataMaxAgeMs ?? 30_000,
      heartbeatInterval: 3_000,
      maxWaitTimeInMs: options.maxWaitTimeMs ?? 500,
      allowAutoTopicCreation: false,
    });
    this.dlq = new EventProducer(options.kafka);
    this.metrics = options.metrics ? consumerMetrics(options.metrics) : undefined;
    this.chunkSize = options.chunkSize ?? 200;
    this.initialBackoff = options.retry?.initialMs ?? 200;
    this.maxBackoff = options.retry?.maxMs ?? 10_000;
    this.isTransient = options.isTransient ?? isTransientError;
    this.consumer.on(this.consumer.events.GROUP_JOIN, () => {
      this.joined = true;
    });
    this.consumer.on(this.consumer.events.CRASH, (event) => {
      this.stats.crashes++;
      this.metrics?.crashes.inc({ group: options.groupId });
      options.logger.error({ err: event.payload.error, restart: event.payload.restart }, 'consumer crashed');
    });
  }

  async start(): Promise<void> {
    await this.dlq.connect();
    await this.consumer.connect();
    await this.consumer.subscribe({
      topics: [...this.options.topics],
      fromBeginning: this.options.fromBeginning ?? true,
    });
    await this.consumer.run({
      autoCommit: true,
      eachBatchAutoResolve: false,
      partitionsConsumedConcurrently: this.options.partitionsConsumedConcurrently ?? 1,
      eachBatch: (payload) => this.onBatch(payload),
    });
  }

  /** Graceful: the current chunk finishes or is abandoned uncommitted; nothing is skipped. */
  async stop(): Promise<void> {
    this.stopping = true;
    await this.consumer.disconnect();
    await this.dlq.disconnect();
  }

  private async onBatch(payload: EachBatchPayload): Promise<void> {
    const { batch, resolveOffset, commitOffsetsIfNecessary, heartbeat, isRunning, isStale } = payload;
    const shouldStop = () => this.stopping || !isRunning() || isStale();
    const logger = this.options.logger.child({ topic: batch.topic, partition: batch.partition });
    const context: BatchContext = {
      logger,
      heartbeat,
      shouldStop,
      loggerFor: (consumed) =>
        logger.child({
          correlationId: consumed.event.correlationId,
          eventId: consumed.event.eventId,
          eventType: consumed.event.type,
          offset: consumed.offset,
        }),
    };
    try {
      for (let start = 0; start < batch.messages.length; start += this.chunkSize) {
        if (shouldStop()) return;
        const chunk = batch.messages.slice(start, start + this.chunkSize);
        const dead: Array<{ message: KafkaMessage; code: string; reason: string }> = [];
        const events: ConsumedEvent[] = [];
        for (const message of chunk) {
          const decoded = message.value
            ? eventCodec.tryDecode(message.value)
            : ({ ok: false, error: { code: 'EMPTY', message: 'message has no value (tombstone)' } } as const);
          if (decoded.ok) {
            events.push({
              event: decoded.event,
              topic: batch.topic,
              partition: batch.partition,
              offset: message.offset,
              key: message.key?.toString() ?? null,
              timestamp: Number(message.timestamp),
              headers: headerText(message.headers),
            });
          } else {
            dead.push({ message, code: decoded.error.code, reason: decoded.error.message });
          }
        }
        const rejected = events.length > 0 ? await this.handle(events, context) : [];
        for (const rejection of rejected) {
          const message = chunk.find((m) => m.offset === rejection.offset);
          if (message) dead.push({ message, code: 'REJECTED', reason: rejection.reason });
        }
        if (dead.length > 0) await this.deadLetter(batch.topic, batch.partition, dead, context);
        // The group moved on while the handler ran: leave this chunk uncommitted for its new owner.
        if (shouldStop()) throw new StopWork();

        const last = chunk.at(-1);
        if (last) resolveOffset(last.offset);
        await commitOffsetsIfNecessary();
        await heartbeat();
        this.stats.handled += events.length - rejected.length;
        this.stats.deadLettered += dead.length;
        this.metrics?.messages.inc(
          { group: this.options.groupId, topic: batch.topic, result: 'handled' },
          events.length - rejected.length,
        );
        if (dead.length > 0) {
          this.metrics?.messages.inc(
            { group: this.options.groupId, topic: batch.topic, result: 'dead_lettered' },
            dead.length,
          );
        }
      }
    } catch (error) {
      if (error instanceof StopWork) {
        logger.info('batch abandoned uncommitted (rebalance or shutdown); it will be redelivered');
        return;
      }
      throw error;
    }
  }

  /** Runs the handler; returns the events to dead-letter. Throws StopWork when the batch must stop. */
  private async handle(events: readonly ConsumedEvent[], context: BatchContext): Promise<Rejection[]> {
    for (let attempt = 0; ; attempt++) {
      if (context.shouldStop()) throw new StopWork();
      try {
        const result = await this.options.handler(events, context);
        return [...(result?.rejected ?? [])];
      } catch (error) {
        // A rebalance is not the events' fault: give the batch up uncommitted and let kafkajs rejoin.
        if (isRebalanceError(error)) throw error;
        if (context.shouldStop()) throw new StopWork();
        if (this.isTransient(error)) {
          this.stats.retries++;
          this.metrics?.retries.inc({ group: this.options.groupId, topic: events[0]?.topic ?? '' });
          const delay = Math.min(this.maxBackoff, this.initialBackoff * 2 ** Math.min(attempt, 16));
          context.logger.warn({ err: error, attempt, delayMs: delay }, 'transient failure; retrying the same events');
          await this.pause(delay, context);
          continue;
        }
        if (events.length === 1) {
          const [only] = events as [ConsumedEvent];
          context.logger.error(
            { err: error, offset: only.offset, eventId: only.event.eventId },
            'event failed; dead-lettering it',
          );
          return [
            {
              offset: only.offset,
              reason: `handler failed: ${error instanceof Error ? error.message : String(error)}`,
            },
          ];
        }
        // Narrow a non-transient failure to the event causing it: one by one, in order.
        context.logger.warn({ err: error, events: events.length }, 'batch failed; retrying its events one by one');
        const rejected: Rejection[] = [];
        for (const event of events) rejected.push(...(await this.handle([event], context)));
        return rejected;
      }
    }
  }

  /** Waits out a backoff while keeping the membership alive; a rebalance error propagates. */
  private async pause(ms: number, context: BatchContext): Promise<void> {
    const until = Date.now() + ms;
    while (Date.now() < until) {
      if (context.shouldStop()) throw new StopWork();
      await new Promise((resolve) => setTimeout(resolve, Math.min(250, until - Date.now())));
      await context.heartbeat();
    }
  }

  private async deadLetter(
    topic: string,
    partition: number,
    dead: ReadonlyArray<{ message: KafkaMessage; code: string; reason: string }>,
    context: BatchContext,
  ): Promise<void> {
    const records: RawRecord[] = dead.map(({ message, code, reason }) => ({
      key: message.key,
      value: message.value,
      headers: {
        ...message.headers,
        'dlq-reason': reason.slice(0, 1_000),
        'dlq-error-code': code,
        'dlq-source-topic': topic,
        'dlq-source-partition': String(partition),
        'dlq-source-offset': message.offset,
        'dlq-consumer-group': this.options.groupId,
        'dlq-failed-at': new Date().toISOString(),
      },
    }));
    // Nothing is lost: the offsets are committed only after the DLQ has the records.
    for (let attempt = 0; ; attempt++) {
      try {
        await this.dlq.publishRaw([{ topic: dlqTopicOf(topic), records }]);
        context.logger.warn(
          {
            count: records.length,
            codes: [...new Set(dead.map((d) => d.code))],
            eventIds: dead.map((d) => d.message.headers?.[HEADER.eventId]?.toString()),
          },
          'dead-lettered messages',
        );
        return;
      } catch (error) {
        const delay = Math.min(this.maxBackoff, this.initialBackoff * 2 ** Math.min(attempt, 16));
        context.logger.warn({ err: error, attempt, delayMs: delay }, 'could not write to the DLQ; retrying');
        await this.pause(delay, context);
      }
    }
  }
}
