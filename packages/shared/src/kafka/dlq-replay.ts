/**
 * Replays dead-lettered messages to the topic they came from, once the cause is fixed (a handler
 * bug, a missing experiment): the original key, value and headers, plus where the replay came from.
 * The destination is the DLQ's own source (its name without `.dlq`), never what a message's
 * `dlq-source-topic` header says: a message naming another topic is skipped as misrouted.
 * Every consumer group of the source topic sees the message again; handlers are idempotent by event
 * id. Progress is a consumer group of its own (`dlq-replay.<dlq topic>`), so a second run replays
 * only what was dead-lettered since. Filters choose by error code and by the group that gave up on
 * the message; what they leave out is skipped for good (its offset is committed). A dry run
 * commits nothing and publishes nothing.
 */
import type { Kafka, KafkaMessage } from 'kafkajs';
import { waitFor } from '../wait.js';
import { EventProducer, type RawRecord } from './producer.js';

export interface DlqReplayOptions {
  readonly kafka: Kafka;
  /** The dead-letter topic, `<source>.dlq`. */
  readonly dlqTopic: string;
  /** Only messages with one of these `dlq-error-code`s (e.g. REJECTED, HANDLER); all when empty. */
  readonly codes?: readonly string[];
  /** Only messages this consumer group dead-lettered; all when unset. */
  readonly group?: string;
  readonly dryRun?: boolean;
  readonly timeoutMs?: number;
}

export interface DlqReplayResult {
  /** The one topic a replay of this DLQ writes to: its own source (the DLQ's name without `.dlq`). */
  readonly destination: string;
  readonly replayed: number;
  readonly skipped: number;
  /**
   * Of the skipped, messages whose `dlq-source-topic` names another topic than the DLQ's own source:
   * never published there (whoever may write a DLQ could otherwise route a record into any topic the
   * replaying principal may write, a SendRequested into the sender's input among them).
   */
  readonly misrouted: number;
  /** Messages seen, by `code: reason` (reasons cut at 120 characters). */
  readonly byReason: Record<string, number>;
}

const header = (message: KafkaMessage, name: string): string | undefined => {
  const value = message.headers?.[name];
  const first = Array.isArray(value) ? value[0] : value;
  return first?.toString();
};

/** The source topic of a dead-letter topic (`<source>.dlq`); throws for a name that is not one. */
export function sourceOfDlq(dlqTopic: string): string {
  if (!dlqTopic.endsWith(DLQ_SUFFIX) || dlqTopic.length === DLQ_SUFFIX.length)
    throw new Error(`${dlqTopic} is not a dead-letter topic (<source>${DLQ_SUFFIX})`);
  return dlqTopic.slice(0, -DLQ_SUFFIX.length);
}
const DLQ_SUFFIX = '.dlq';
const MISROUTED = 'MISROUTED: names another source topic than this DLQ’s; not replayed';

export async function replayDeadLetters(options: DlqReplayOptions): Promise<DlqReplayResult> {
  const destination = sourceOfDlq(options.dlqTopic);
  const admin = options.kafka.admin();
  await admin.connect();
  const groupId = `dlq-replay.${options.dlqTopic}`;
  const producer = new EventProducer(options.kafka);
  const consumer = options.kafka.consumer({ groupId: options.dryRun ? `${groupId}.dry-run.${Date.now()}` : groupId });
  const result = { destination, replayed: 0, skipped: 0, misrouted: 0, byReason: {} as Record<string, number> };
  try {
    // The end of the DLQ when the replay began: what arrives later waits for the next run.
    const ends = new Map(
      (await admin.fetchTopicOffsets(options.dlqTopic)).map((p) => [p.partition, BigInt(p.high)] as const),
    );
    const reached = new Map([...ends].map(([partition, high]) => [partition, high === 0n] as const));
    if (!options.dryRun) {
      // Resume: partitions this group has already read up to the end need nothing.
      const committed = await admin.fetchOffsets({ groupId, topics: [options.dlqTopic] });
      for (const p of committed[0]?.partitions ?? []) {
        if (BigInt(p.offset) >= (ends.get(p.partition) ?? 0n)) reached.set(p.partition, true);
      }
    }
    if ([...reached.values()].every(Boolean)) return result;

    await consumer.connect();
    await consumer.subscribe({ topic: options.dlqTopic, fromBeginning: true });
    let failure: unknown;
    await consumer.run({
      autoCommit: false,
      eachBatch: async ({ batch, resolveOffset }) => {
        try {
          const end = ends.get(batch.partition) ?? 0n;
          const messages = batch.messages.filter((m) => BigInt(m.offset) < end);
          const replay: Array<{ topic: string; record: RawRecord }> = [];
          for (const message of messages) {
            const code = header(message, 'dlq-error-code') ?? 'UNKNOWN';
            const reason = `${code}: ${(header(message, 'dlq-reason') ?? '').slice(0, 120)}`;
            result.byReason[reason] = (result.byReason[reason] ?? 0) + 1;
            const source = header(message, 'dlq-source-topic');
            if (source !== undefined && source !== destination) {
              result.misrouted++;
              result.skipped++;
              result.byReason[MISROUTED] = (result.byReason[MISROUTED] ?? 0) + 1;
              continue;
            }
            const wanted =
              source !== undefined &&
              (!options.codes?.length || options.codes.includes(code)) &&
              (options.group === undefined || header(message, 'dlq-consumer-group') === options.group);
            if (!wanted) {
              result.skipped++;
              continue;
            }
            const headers: Record<string, string> = {};
            for (const [name, value] of Object.entries(message.headers ?? {})) {
              const text = (Array.isArray(value) ? value[0] : value)?.toString();
              if (text !== undefined && !name.startsWith('dlq-')) headers[name] = text;
            }
            headers['replayed-from'] = `${batch.topic}/${batch.partition}/${message.offset}`;
            replay.push({ topic: destination, record: { key: message.key, value: message.value, headers } });
          }
          if (!options.dryRun) {
            const byTopic = new Map<string, RawRecord[]>();
            for (const { topic, record } of replay) {
              const records = byTopic.get(topic);
              if (records) records.push(record);
              else byTopic.set(topic, [record]);
            }
            await producer.publishRaw([...byTopic].map(([topic, records]) => ({ topic, records })));
            const last = messages.at(-1);
            if (last) {
              resolveOffset(last.offset);
              await consumer.commitOffsets([
                { topic: batch.topic, partition: batch.partition, offset: (BigInt(last.offset) + 1n).toString() },
              ]);
            }
          }
          result.replayed += replay.length;
          if (BigInt(batch.lastOffset()) + 1n >= end || messages.length < batch.messages.length) {
            reached.set(batch.partition, true);
          }
        } catch (error) {
          failure ??= error;
          throw error;
        }
      },
    });
    await waitFor(
      () => {
        if (failure) throw failure;
        return [...reached.values()].every(Boolean);
      },
      {
        timeoutMs: options.timeoutMs ?? 120_000,
        intervalMs: 100,
        description: `the replay of ${options.dlqTopic} to reach its end`,
      },
    );
    return result;
  } finally {
    await consumer.disconnect();
    await producer.disconnect();
    await admin.disconnect();
  }
}
