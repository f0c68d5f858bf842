/**
 * The one consumer runner. Per kafkajs batch (one partition), in chunks:
 *   decode each message; bytes that are not a valid event go to `<topic>.dlq` with the reason;
 *   hand the decoded events to the service's handler (which commits its own database work);
 *   a transient failure (database or peer down) is retried with backoff, heartbeating, without
 *   skipping or committing, up to a cap of attempts and time; then each event of the chunk gets one
 *   more try alone, and those that still fail go to the DLQ as TRANSIENT_EXHAUSTED, so a peer that
 *   answers 503 for one experiment forever holds its partition for minutes, never for good;
 *   any other failure is narrowed to the one event that causes it, which is dead-lettered, so a
 *   poison message never blocks its partition or crash-loops the consumer;
 *   only then are the chunk's offsets resolved and committed.
 * DLQ writes are cut by bytes under the DLQ topic's max.message.bytes; a copy too large even alone
 * goes without its value (header `dlq-value-omitted`), the source coordinates say where it is.
 * Work on a batch stops as soon as it goes stale (rebalance) or the consumer is stopping; the
 * uncommitted rest is redelivered, which handlers tolerate because they are idempotent.
 * kafkajs gives up on a consumer whose credentials the brokers refuse (a non-retriable error): on a
 * reconnect while running that is a rotation half done (the broker has the new password, the
 * mounted Secret not yet), so the runner restarts the consumer itself, with backoff, each attempt
 * reading the credential files again, for `authRetryWindowMs`; only then is it dead (issue #31).
 */
import type { Consumer, ConsumerRunConfig, EachBatchPayload, IHeaders, Kafka, KafkaMessage } from 'kafkajs';
import type { Registry } from 'prom-client';
import { CONSUMER_RETRY_DEFAULTS, KAFKA_AUTH_RETRY_WINDOW_DEFAULT_MS } from '../config.js';
import { eventCodec } from '@outreach/contracts';
import { learnUnknownSchemaIds } from '../registry/binding.js';
import type { OutreachEvent } from '@outreach/contracts';
import { maskAddresses, type Logger } from '../logger.js';
import { consumerMetrics } from '../metrics.js';
import { classifyPgError, PG_CLIENT_TRANSIENT_MESSAGE } from '../pg/errors.js';
import { startChunkTrace, tracingActive } from '../telemetry/trace.js';
import { isCredentialRefusal } from './access.js';
import { EventProducer, fitsAlone, HEADER, isMessageTooLarge, recordBytes, type RawRecord } from './producer.js';
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

/**
 * A failure worth retrying unchanged: the cause is outside the message. `code` names the cause in
 * logs (e.g. PEER_UNAUTHORIZED for a peer's 401/403 during a token rotation).
 */
export class TransientError extends Error {
  override readonly name = 'TransientError';
  readonly code: string | undefined;
  constructor(message: string, options: { code?: string; cause?: unknown } = {}) {
    super(message, options.cause === undefined ? undefined : { cause: options.cause });
    this.code = options.code;
  }
}

/** The DLQ code of events whose transient failure outlasted the retry cap. */
export const TRANSIENT_EXHAUSTED = 'TRANSIENT_EXHAUSTED';

const TRANSIENT_NODE_CODES = new Set(['ECONNREFUSED', 'ECONNRESET', 'ETIMEDOUT', 'EPIPE', 'ENOTFOUND', 'EAI_AGAIN']);

/**
 * Connection loss, Postgres failures whose SQLSTATE class is about the server rather than the
 * statement (pg/errors.ts), kafkajs retriable errors, and TransientError.
 */
export function isTransientError(error: unknown): boolean {
  if (error instanceof TransientError) return true;
  if (typeof error !== 'object' || error === null) return false;
  const { code, retriable, message } = error as { code?: unknown; retriable?: unknown; message?: unknown };
  if (retriable === true) return true;
  if (typeof code === 'string' && TRANSIENT_NODE_CODES.has(code)) return true;
  const pg = classifyPgError(error);
  if (pg !== undefined) return pg === 'transient';
  return typeof message === 'string' && PG_CLIENT_TRANSIENT_MESSAGE.test(message);
}

const REBALANCE_ERRORS = new Set([
  'REBALANCE_IN_PROGRESS',
  'ILLEGAL_GENERATION',
  'UNKNOWN_MEMBER_ID',
  'NOT_COORDINATOR',
  'FENCED_INSTANCE_ID',
]);

/** ConsumerRunnerOptions.sessionTimeoutMs: a dead member's partitions resume elsewhere within about this long. */
export const DEFAULT_SESSION_TIMEOUT_MS = 8_000;

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
  /**
   * Backoff between attempts after a transient failure (`initialMs` doubling up to `maxMs`), and the
   * cap: a chunk is tried at most `maxAttempts` times and for at most `maxElapsedMs` (whichever
   * comes first; CONSUMER_RETRY_DEFAULTS: 100 and 15 minutes).
   */
  readonly retry?: {
    readonly initialMs?: number;
    readonly maxMs?: number;
    readonly maxAttempts?: number;
    readonly maxElapsedMs?: number;
  };
  readonly isTransient?: (error: unknown) => boolean;
  readonly fromBeginning?: boolean;
  /**
   * How long the group waits for a member that stopped heartbeating before it hands its partitions
   * to the others (a SIGKILLed pod): default 8 s. Heartbeats go every second while a batch runs,
   * whatever the handler waits for (a slow provider), so a long batch never costs the membership.
   */
  readonly sessionTimeoutMs?: number;
  /**
   * A chunk still unfinished after this long makes `/health/live` fail: its partition is stuck (a
   * handler that never settles, a DLQ write that can never succeed). Default: the retry cap's time
   * plus 5 minutes, so a chunk working through its retries is not called stuck.
   */
  readonly stallAfterMs?: number;
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
  /**
   * The event types the handler takes; the others are skipped unread and committed with their chunk
   * (each message's type read from its writer schema's id or fingerprint, EventCodec.typeOf, never
   * from a header; a message whose framing names no known schema is decoded and dead-lettered as
   * before). Default: every type reaches the handler. Decoding what a handler then ignores was most
   * of the cost of a consumer reading a busy topic for a few types (#29).
   */
  readonly eventTypes?: ReadonlySet<string>;
  /** What one fetch may bring back (every record of it is held until its batches are handled). */
  readonly fetchLimits?: { readonly maxBytes: number; readonly maxBytesPerPartition: number };
  /**
   * How long the runner restarts a consumer whose credentials the brokers refuse on reconnecting
   * before it counts as dead (KAFKA_AUTH_RETRY_WINDOW_MS, default 5 minutes; 0: dead at once).
   */
  readonly authRetryWindowMs?: number;
}

/** Restarts after a refused credential: from 1 s, doubling, at most 10 s apart. */
const AUTH_RETRY_INITIAL_MS = 1_000;
const AUTH_RETRY_MAX_MS = 10_000;

class StopWork extends Error {
  override readonly name = 'StopWork';
}

/** A message bound for the DLQ, with the code and reason its headers will carry. */
interface DeadLetter {
  readonly message: KafkaMessage;
  readonly code: string;
  readonly reason: string;
}

/** A handler's rejection, or the runner's own verdict on an event, with its DLQ code. */
interface Verdict extends Rejection {
  readonly code: string;
}

interface RetryBudget {
  readonly attempts: number;
  readonly ms: number;
  /** What was spent before this budget (a chunk's attempts), for the DLQ reason. */
  readonly spent?: string;
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
  private readonly budget: RetryBudget;
  private stopping = false;
  /** Set when kafkajs crashed and said it will not restart: the consumer is dead until the process is. */
  private deadReason: string | undefined;
  /** While the brokers refuse our credentials: since when, the restarts made, the next one. */
  private refused: { readonly since: number; attempts: number; timer?: NodeJS.Timeout } | undefined;
  /** A restart of ours in progress (stop() waits for it before disconnecting). */
  private restarting: Promise<void> | undefined;
  private readonly authRetryWindowMs: number;
  /** When the chunk each partition is working on started: the watchdog of liveness(). */
  private readonly working = new Map<string, number>();
  private readonly stallAfterMs: number;
  private readonly sessionTimeoutMs: number;
  private readonly heartbeatIntervalMs: number;
  /** True while the consumer is a member of its group: false before the join, during rebalances, after a crash. */
  joined = false;
  /** Observable counters, also exported as metrics. */
  readonly stats = { handled: 0, deadLettered: 0, retries: 0, crashes: 0, exhausted: 0, joins: 0 };

  constructor(private readonly options: ConsumerRunnerOptions) {
    this.sessionTimeoutMs = options.sessionTimeoutMs ?? DEFAULT_SESSION_TIMEOUT_MS;
    this.heartbeatIntervalMs = Math.min(1_000, Math.floor(this.sessionTimeoutMs / 3));
    this.consumer = options.kafka.consumer({
      groupId: options.groupId,
      sessionTimeout: this.sessionTimeoutMs,
      metadataMaxAge: options.metadataMaxAgeMs ?? 30_000,
      // kafkajs refuses an interval not below the session timeout; at most a third of it is its advice.
      heartbeatInterval: this.heartbeatIntervalMs,
      maxWaitTimeInMs: options.maxWaitTimeMs ?? 500,
      ...(options.fetchLimits ?? {}),
      allowAutoTopicCreation: false,
    });
    this.dlq = new EventProducer(options.kafka, { logger: options.logger });
    this.metrics = options.metrics ? consumerMetrics(options.metrics) : undefined;
    // Every series an alert takes increase() of exists at 0 from the start: one born at 1 by the
    // first dead letter (or crash) shows Prometheus no increase, and the alert never fires for it.
    for (const topic of options.topics) {
      for (const result of ['handled', 'dead_lettered']) {
        this.metrics?.messages.inc({ group: options.groupId, topic, result }, 0);
      }
      this.metrics?.exhausted.inc({ group: options.groupId, topic }, 0);
      this.metrics?.dlqValueOmitted.inc({ group: options.groupId, topic }, 0);
    }
    this.metrics?.crashes.inc({ group: options.groupId }, 0);
    this.metrics?.credentialsRefused.set({ group: options.groupId }, 0);
    this.authRetryWindowMs = Math.max(0, options.authRetryWindowMs ?? KAFKA_AUTH_RETRY_WINDOW_DEFAULT_MS);
    this.chunkSize = options.chunkSize ?? 200;
    this.initialBackoff = options.retry?.initialMs ?? 200;
    this.maxBackoff = options.retry?.maxMs ?? 10_000;
    this.isTransient = options.isTransient ?? isTransientError;
    this.budget = {
      attempts: Math.max(1, options.retry?.maxAttempts ?? CONSUMER_RETRY_DEFAULTS.maxAttempts),
      ms: options.retry?.maxElapsedMs ?? CONSUMER_RETRY_DEFAULTS.maxElapsedMs,
    };
    this.stallAfterMs = options.stallAfterMs ?? this.budget.ms + 5 * 60_000;
    const { events } = this.consumer;
    this.consumer.on(events.GROUP_JOIN, () => {
      this.joined = true;
      this.stats.joins++;
      if (this.refused) {
        options.logger.warn(
          { refusedForMs: Date.now() - this.refused.since, restarts: this.refused.attempts },
          'the brokers accept our credentials again; the consumer rejoined its group',
        );
        this.refused = undefined;
        this.metrics?.credentialsRefused.set({ group: options.groupId }, 0);
      }
    });
    for (const left of [events.REBALANCING, events.STOP, events.DISCONNECT]) {
      this.consumer.on(left, () => {
        this.joined = false;
      });
    }
    this.consumer.on(events.CRASH, (event) => {
      this.joined = false;
      this.stats.crashes++;
      this.metrics?.crashes.inc({ group: options.groupId });
      const { error, restart } = event.payload;
      if (!restart && !this.stopping) this.givenUp(error);
      else options.logger.error({ err: error, restart }, 'consumer crashed');
    });
  }

  /**
   * kafkajs gave up on the consumer (or a restart of ours failed): a refusal of our credentials is
   * restarted with backoff until `authRetryWindowMs` has passed since the first; anything else, or a
   * refusal past the window, leaves it dead, for liveness to report.
   */
  private givenUp(error: Error): void {
    if (this.stopping) return;
    const { logger, groupId } = this.options;
    if (isCredentialRefusal(error)) {
      const now = Date.now();
      this.refused ??= { since: now, attempts: 0 };
      const refused = this.refused;
      const elapsed = now - refused.since;
      this.metrics?.credentialsRefused.set({ group: groupId }, 1);
      if (elapsed < this.authRetryWindowMs) {
        // The last attempt falls at the window's end, so a file fixed just in time still counts.
        const delay = Math.min(
          AUTH_RETRY_MAX_MS,
          AUTH_RETRY_INITIAL_MS * 2 ** Math.min(refused.attempts, 16),
          this.authRetryWindowMs - elapsed,
        );
        refused.attempts++;
        logger.error(
          {
            err: error,
            alert: 'kafka_credentials_refused',
            refusedForMs: elapsed,
            windowMs: this.authRetryWindowMs,
            retryInMs: delay,
            restarts: refused.attempts - 1,
          },
          'the brokers refused our credentials; restarting the consumer with the credential files read again',
        );
        refused.timer = setTimeout(() => {
          this.restarting = this.restart().finally(() => {
            this.restarting = undefined;
          });
        }, delay);
        return;
      }
      this.deadReason = `the brokers refused our credentials for ${Math.round(elapsed / 1000)} s (KAFKA_AUTH_RETRY_WINDOW_MS ${Math.round(this.authRetryWindowMs / 1000)} s): ${error.message}`;
    } else {
      this.deadReason = `crashed and will not restart: ${error.message}`;
    }
    logger.fatal({ err: error, alert: 'consumer_dead' }, 'consumer crashed for good');
  }

  /**
   * Connects, subscribes and runs the consumer again, as at start; new connections authenticate with
   * what the credential files hold now. A refusal at connect comes back here through givenUp; one at
   * the group join comes as kafkajs' CRASH.
   */
  private async restart(): Promise<void> {
    if (this.stopping) return;
    try {
      await this.consumer.connect();
      await this.consumer.subscribe({
        topics: [...this.options.topics],
        fromBeginning: this.options.fromBeginning ?? true,
      });
      await this.consumer.run(this.runConfig());
    } catch (error) {
      await this.consumer.disconnect().catch(() => undefined);
      this.givenUp(error instanceof Error ? error : new Error(String(error)));
    }
  }

  /**
   * Undefined while the brokers accept our credentials; otherwise what readiness says meanwhile:
   * since when they refuse them, and until when the consumer keeps trying.
   */
  credentialsRefused(now = Date.now()): string | undefined {
    if (!this.refused || this.deadReason) return undefined;
    const elapsed = Math.round((now - this.refused.since) / 1000);
    return `the brokers have refused our credentials for ${elapsed} s; retrying with the credential files read again until ${Math.round(this.authRetryWindowMs / 1000)} s (KAFKA_AUTH_RETRY_WINDOW_MS)`;
  }

  /**
   * Why the consumer is dead (kafkajs gave up on it) or stuck (a chunk unfinished past
   * `stallAfterMs`: heartbeats keep the group membership, so nothing else would notice), or
   * undefined while it runs, retries within its cap, or restarts.
   */
  liveness(now = Date.now()): string | undefined {
    if (this.stopping) return undefined;
    if (this.deadReason) return this.deadReason;
    for (const [partition, since] of this.working) {
      if (now - since > this.stallAfterMs) {
        return `stuck: ${partition} has worked on one chunk for ${Math.round((now - since) / 1000)} s (limit ${Math.round(this.stallAfterMs / 1000)} s)`;
      }
    }
    return undefined;
  }

  async start(): Promise<void> {
    await this.dlq.connect();
    await this.consumer.connect();
    await this.consumer.subscribe({
      topics: [...this.options.topics],
      fromBeginning: this.options.fromBeginning ?? true,
    });
    await this.consumer.run(this.runConfig());
  }

  private runConfig(): ConsumerRunConfig {
    return {
      autoCommit: true,
      eachBatchAutoResolve: false,
      partitionsConsumedConcurrently: this.options.partitionsConsumedConcurrently ?? 1,
      eachBatch: (payload) => this.onBatch(payload),
    };
  }

  /** Graceful: the current chunk finishes or is abandoned uncommitted; nothing is skipped. */
  async stop(): Promise<void> {
    this.stopping = true;
    clearTimeout(this.refused?.timer);
    await this.restarting;
    await this.consumer.disconnect();
    await this.dlq.disconnect();
  }

  private async onBatch(payload: EachBatchPayload): Promise<void> {
    const { batch, resolveOffset, commitOffsetsIfNecessary, heartbeat, isRunning, isStale } = payload;
    // Heartbeats on a timer while the batch runs: a handler waiting on a slow peer (every send of a
    // chunk in a provider call) keeps the membership, so the session timeout can stay short. A beat
    // that says the group moved on (a rebalance) stops the batch at its next check.
    let membershipLost = false;
    const beating = setInterval(() => {
      heartbeat().catch(() => {
        membershipLost = true;
      });
    }, this.heartbeatIntervalMs);
    const shouldStop = () => this.stopping || membershipLost || !isRunning() || isStale();
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
    const partitionKey = `${batch.topic}[${batch.partition}]`;
    try {
      for (let start = 0; start < batch.messages.length; start += this.chunkSize) {
        if (shouldStop()) return;
        this.working.set(partitionKey, Date.now());
        const chunk = batch.messages.slice(start, start + this.chunkSize);
        const dead: DeadLetter[] = [];
        const events: ConsumedEvent[] = [];
        // Registry ids first seen here (a newer writer) are fetched once; what stays unknown dead-letters.
        await learnUnknownSchemaIds(chunk.map((m) => m.value));
        const wanted = this.options.eventTypes;
        let skipped = 0;
        for (const message of chunk) {
          if (wanted && message.value) {
            const type = eventCodec.typeOf(message.value);
            if (type !== undefined && !wanted.has(type)) {
              skipped++;
              continue;
            }
          }
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
        const rejected = events.length > 0 ? await this.handleTraced(events, context) : [];
        for (const rejection of rejected) {
          const message = chunk.find((m) => m.offset === rejection.offset);
          if (message) dead.push({ message, code: rejection.code, reason: String(rejection.reason) });
        }
        if (dead.length > 0) await this.deadLetter(batch.topic, batch.partition, dead, context);
        // The group moved on while the handler ran: leave this chunk uncommitted for its new owner.
        if (shouldStop()) throw new StopWork();

        const last = chunk.at(-1);
        if (last) resolveOffset(last.offset);
        await commitOffsetsIfNecessary();
        await heartbeat();
        // A skipped event counts as handled: its type is one this consumer has no work for.
        this.stats.handled += events.length - rejected.length + skipped;
        this.stats.deadLettered += dead.length;
        this.metrics?.messages.inc(
          { group: this.options.groupId, topic: batch.topic, result: 'handled' },
          events.length - rejected.length + skipped,
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
    } finally {
      clearInterval(beating);
      this.working.delete(partitionKey);
    }
  }

  /**
   * `handle` with tracing: one `process <topic>` span per event, a child of its headers' context, and
   * the handler in the context of the chunk's first event (telemetry/trace.ts). Off: `handle`.
   */
  private async handleTraced(events: readonly ConsumedEvent[], context: BatchContext): Promise<Verdict[]> {
    if (!tracingActive()) return this.handle(events, context, this.budget);
    const chunk = startChunkTrace(
      events.map((e) => ({ ...e, eventId: e.event.eventId, eventType: e.event.type })),
      this.options.groupId,
    );
    let verdicts: Verdict[] = [];
    try {
      verdicts = await chunk.run(() => this.handle(events, context, this.budget));
    } catch (error) {
      chunk.end(new Map(), error);
      throw error;
    }
    chunk.end(new Map(verdicts.map((v) => [v.offset, `${v.code}: ${v.reason}`])));
    return verdicts;
  }

  /**
   * Runs the handler; returns the events to dead-letter. Throws StopWork when the batch must stop.
   * A transient failure is retried within `budget`; once it is spent, each event is tried alone
   * once more, so only the events that still fail are dead-lettered (TRANSIENT_EXHAUSTED).
   */
  private async handle(
    events: readonly ConsumedEvent[],
    context: BatchContext,
    budget: RetryBudget,
  ): Promise<Verdict[]> {
    const started = Date.now();
    for (let attempt = 1; ; attempt++) {
      if (context.shouldStop()) throw new StopWork();
      try {
        const result = await this.options.handler(events, context);
        return (result?.rejected ?? []).map((r) => ({ offset: r.offset, reason: String(r.reason), code: 'REJECTED' }));
      } catch (error) {
        // A rebalance is not the events' fault: give the batch up uncommitted and let kafkajs rejoin.
        if (isRebalanceError(error)) throw error;
        if (context.shouldStop()) throw new StopWork();
        const message = error instanceof Error ? error.message : String(error);
        if (this.isTransient(error)) {
          const elapsed = Date.now() - started;
          const topic = events[0]?.topic ?? '';
          if (attempt < budget.attempts && elapsed < budget.ms) {
            this.stats.retries++;
            this.metrics?.retries.inc({ group: this.options.groupId, topic });
            const delay = Math.max(
              1,
              Math.min(this.maxBackoff, this.initialBackoff * 2 ** Math.min(attempt - 1, 16), budget.ms - elapsed),
            );
            context.logger.warn(
              { err: error, attempt, maxAttempts: budget.attempts, delayMs: delay },
              'transient failure; retrying the same events',
            );
            await this.pause(delay, context);
            continue;
          }
          if (events.length === 1) {
            const [only] = events as [ConsumedEvent];
            this.stats.exhausted++;
            this.metrics?.exhausted.inc({ group: this.options.groupId, topic });
            context.logger.error(
              { err: error, attempts: attempt, elapsedMs: elapsed, offset: only.offset, eventId: only.event.eventId },
              'transient failure outlasted the retry cap; dead-lettering the event',
            );
            return [
              {
                offset: only.offset,
                code: TRANSIENT_EXHAUSTED,
                reason: `transient failure after ${budget.spent ?? `${attempt} attempts over ${elapsed} ms`}: ${message}`,
              },
            ];
          }
          // The chunk spent the budget: one more try each, alone, so the events that are fine pass.
          context.logger.warn(
            { err: error, attempts: attempt, elapsedMs: elapsed, events: events.length },
            'transient failure outlasted the retry cap; trying each event once alone',
          );
          return this.oneByOne(events, context, {
            attempts: 1,
            ms: 0,
            spent: `${attempt} attempts over ${elapsed} ms with its chunk, then 1 alone`,
          });
        }
        if (events.length === 1) {
          const [only] = events as [ConsumedEvent];
          context.logger.error(
            { err: error, offset: only.offset, eventId: only.event.eventId },
            'event failed; dead-lettering it',
          );
          return [{ offset: only.offset, code: 'REJECTED', reason: `handler failed: ${message}` }];
        }
        // Narrow a non-transient failure to the event causing it: one by one, in order.
        context.logger.warn({ err: error, events: events.length }, 'batch failed; retrying its events one by one');
        return this.oneByOne(events, context, this.budget);
      }
    }
  }

  private async oneByOne(
    events: readonly ConsumedEvent[],
    context: BatchContext,
    budget: RetryBudget,
  ): Promise<Verdict[]> {
    const verdicts: Verdict[] = [];
    for (const event of events) {
      verdicts.push(...(await this.handle([event], context, budget)));
      // kafkajs heartbeats only when asked; a long walk through a chunk must not cost the membership.
      await context.heartbeat();
    }
    return verdicts;
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
    dead: readonly DeadLetter[],
    context: BatchContext,
  ): Promise<void> {
    const dlqTopic = dlqTopicOf(topic);
    const failedAt = new Date().toISOString();
    // Nothing is lost: the offsets are committed only after the DLQ has the records.
    for (let attempt = 0; ; attempt++) {
      try {
        const limit = await this.dlq.maxMessageBytes(dlqTopic);
        const omitted: string[] = [];
        const records = dead.map(({ message, code, reason }) => {
          const dlqHeaders = {
            // Reasons name fields, not values; the mask catches what a library's message brings
            // along (a PostgreSQL error quoting an input), since DLQ headers are read like logs.
            'dlq-reason': maskAddresses(reason).slice(0, 1_000),
            'dlq-error-code': code,
            'dlq-source-topic': topic,
            'dlq-source-partition': String(partition),
            'dlq-source-offset': message.offset,
            'dlq-consumer-group': this.options.groupId,
            'dlq-failed-at': failedAt,
          };
          const record: RawRecord = {
            key: message.key,
            value: message.value,
            headers: { ...message.headers, ...dlqHeaders },
          };
          if (fitsAlone(record, limit)) return record;
          // Too large for the DLQ even alone: keep the verdict and where the original is; the
          // source topic still has the bytes (until its retention ends).
          omitted.push(message.offset);
          const note = {
            'dlq-value-omitted': `${recordBytes(record)} bytes exceed ${dlqTopic} max.message.bytes ${limit}`,
          };
          const slim: RawRecord = {
            key: message.key,
            value: null,
            headers: { ...message.headers, ...dlqHeaders, ...note },
          };
          return fitsAlone(slim, limit) ? slim : { key: null, value: null, headers: { ...dlqHeaders, ...note } };
        });
        await this.dlq.publishRaw([{ topic: dlqTopic, records }]);
        if (omitted.length > 0) {
          this.metrics?.dlqValueOmitted.inc({ group: this.options.groupId, topic }, omitted.length);
          context.logger.error(
            { offsets: omitted, dlqTopic, limitBytes: limit, alert: 'dlq_value_omitted' },
            'dead-lettered messages too large for the DLQ without their value; the source topic has them',
          );
        }
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
        context.logger.warn(
          { err: error, attempt, delayMs: delay, tooLarge: isMessageTooLarge(error) },
          'could not write to the DLQ; retrying',
        );
        await this.pause(delay, context);
      }
    }
  }
}
