/**
 * The dead-letter topics as the console reads them with its own Kafka principal (`console` in
 * packages/shared/src/kafka/acls.ts: READ on every DLQ and on groups under `dlq-replay.`, WRITE on
 * the source topics for a replay). No service serves dead letters over HTTP, so the console reads
 * them itself: the newest records of a DLQ (never committing: a browse group of its own each time),
 * their headers, and their payload decoded (Avro in either wire format, the schema learnt from the
 * registry when needed; else JSON; else text) with personal data masked before anything leaves here.
 * A replay is the shared replayDeadLetters (the `dlq:replay` command's), so both resume from the
 * same consumer group.
 */
import { randomUUID } from 'node:crypto';
import { confluentSchemaId, eventCodec } from '@outreach/contracts';
import {
  createKafka,
  dlqTopicOf,
  replayDeadLetters,
  SchemaRegistryClient,
  topics,
  type KafkaSecurity,
} from '@outreach/shared';
import { isPersonalField, MASK, maskPersonal, maskText } from '../domain/mask.js';

export interface DeadLetterTopic {
  readonly source: string;
  readonly dlq: string;
  /** Records held (high minus low watermark, over the partitions). */
  readonly depth: number;
}

export interface DeadLetter {
  readonly partition: number;
  readonly offset: string;
  readonly timestamp: string;
  readonly code: string;
  /** Every header as text, addresses masked. */
  readonly headers: Readonly<Record<string, string>>;
  /** How the payload was read: an event type, `json`, `text`, or `empty`. */
  readonly decodedAs: string;
  /** The payload with personal data masked, ready to show as text. */
  readonly payload: string;
  readonly bytes: number;
}

export interface DeadLettersOptions {
  readonly brokers: readonly string[];
  readonly security: KafkaSecurity;
  readonly topicPrefix: string;
  readonly registryUrl?: string | undefined;
  readonly timeoutMs: number;
  /** How long a replay may take (below the console's HTTP request timeout); six reads when unset. */
  readonly replayTimeoutMs?: number | undefined;
}

const MAX_PREVIEW = 4_000;

type Kafka = ReturnType<typeof createKafka>;
/** What the console reads of a Kafka record. */
export interface RawMessage {
  readonly offset: string;
  readonly timestamp: string;
  readonly headers?: Readonly<Record<string, Buffer | string | Array<Buffer | string> | undefined>>;
  readonly value: Buffer | null;
}

/** Control characters (but tab and newline) shown as a middle dot. */
const printable = (text: string) =>
  [...text].map((c) => (/[\t\n]/.test(c) || (c >= ' ' && c !== '\u007f') ? c : '\u00b7')).join('');

export class DeadLetters {
  private readonly kafka: Kafka;
  private readonly registry: SchemaRegistryClient | undefined;

  constructor(private readonly options: DeadLettersOptions) {
    this.kafka = createKafka({ brokers: [...options.brokers], clientId: 'console', security: options.security });
    this.registry = options.registryUrl ? new SchemaRegistryClient({ url: options.registryUrl }) : undefined;
  }

  /** The declared topics' DLQs (under the prefix), with their depth. */
  async topics(): Promise<DeadLetterTopic[]> {
    const admin = this.kafka.admin();
    await admin.connect();
    try {
      return await Promise.all(
        Object.values(topics).map(async ({ name }) => {
          const source = `${this.options.topicPrefix}${name}`;
          const dlq = dlqTopicOf(source);
          const offsets = await admin.fetchTopicOffsets(dlq).catch(() => []);
          const depth = offsets.reduce((n, p) => n + Number(BigInt(p.high) - BigInt(p.low)), 0);
          return { source, dlq, depth };
        }),
      );
    } finally {
      await admin.disconnect();
    }
  }

  /** Whether `dlq` is one of the declared DLQs (a page never names another topic to Kafka). */
  isDeadLetterTopic(dlq: string): boolean {
    return Object.values(topics).some(({ name }) => dlqTopicOf(`${this.options.topicPrefix}${name}`) === dlq);
  }

  /** The newest `limit` records of each partition of `dlq` (newest first), optionally of one code. */
  async newest(dlq: string, limit: number, code?: string): Promise<DeadLetter[]> {
    const admin = this.kafka.admin();
    await admin.connect();
    let offsets: Array<{ partition: number; low: string; high: string }>;
    try {
      offsets = await admin.fetchTopicOffsets(dlq);
    } finally {
      await admin.disconnect();
    }
    const wanted = offsets
      .map((p) => ({
        partition: p.partition,
        high: BigInt(p.high),
        start: maxOf(BigInt(p.low), BigInt(p.high) - BigInt(limit)),
      }))
      .filter((p) => p.start < p.high);
    if (wanted.length === 0) return [];
    // A group of its own that never commits: browsing moves no replay's progress.
    const consumer = this.kafka.consumer({ groupId: `dlq-replay.browse.${randomUUID()}`, maxWaitTimeInMs: 200 });
    const seen: Array<{ partition: number; message: RawMessage }> = [];
    const done = new Set<number>();
    try {
      await consumer.connect();
      await consumer.subscribe({ topic: dlq, fromBeginning: true });
      let seek: (() => void) | undefined;
      const assigned = new Promise<void>((resolve) => (seek = resolve));
      consumer.on(consumer.events.GROUP_JOIN, () => seek?.());
      await consumer.run({
        autoCommit: false,
        eachMessage: async ({ partition, message }) => {
          const p = wanted.find((w) => w.partition === partition);
          if (!p || BigInt(message.offset) < p.start || BigInt(message.offset) >= p.high) return;
          seen.push({ partition, message });
          if (BigInt(message.offset) + 1n >= p.high) done.add(partition);
        },
      });
      await assigned;
      for (const p of wanted) consumer.seek({ topic: dlq, partition: p.partition, offset: p.start.toString() });
      const deadline = Date.now() + this.options.timeoutMs;
      while (done.size < wanted.length && Date.now() < deadline) await new Promise((r) => setTimeout(r, 50));
    } finally {
      await consumer.disconnect();
    }
    const letters = await Promise.all(seen.map(({ partition, message }) => this.letter(partition, message)));
    return letters
      .filter((l) => code === undefined || code === '' || l.code === code)
      .sort((a, b) => b.timestamp.localeCompare(a.timestamp) || Number(BigInt(b.offset) - BigInt(a.offset)));
  }

  /** The shared replay: a dry run (reads, publishes and commits nothing) or the real one. */
  replay(
    dlq: string,
    options: { codes: readonly string[]; dryRun: boolean },
  ): Promise<{ replayed: number; skipped: number; byReason: Record<string, number> }> {
    return replayDeadLetters({
      kafka: this.kafka,
      dlqTopic: dlq,
      codes: options.codes,
      dryRun: options.dryRun,
      timeoutMs: this.options.replayTimeoutMs ?? this.options.timeoutMs * 6,
    });
  }

  private async letter(partition: number, message: RawMessage): Promise<DeadLetter> {
    const headers = maskHeaders(message.headers ?? {});
    const { decodedAs, payload } = await this.decode(message.value);
    return {
      partition,
      offset: message.offset,
      timestamp: new Date(Number(message.timestamp)).toISOString(),
      code: headers['dlq-error-code'] ?? 'UNKNOWN',
      headers,
      decodedAs,
      payload,
      bytes: message.value?.length ?? 0,
    };
  }

  /** The payload as text with personal data masked: Avro (either wire format), else JSON, else text. */
  private async decode(value: Buffer | null): Promise<{ decodedAs: string; payload: string }> {
    if (!value || value.length === 0) return { decodedAs: 'empty', payload: '' };
    const id = confluentSchemaId(value);
    if (id !== undefined && !eventCodec.knowsSchemaId(id) && this.registry) {
      try {
        eventCodec.learnSchema(id, await this.registry.schemaById(id));
      } catch {
        // Another team's schema, or the registry does not answer: read it as bytes below.
      }
    }
    const avro = eventCodec.tryDecode(value);
    if (avro.ok) return { decodedAs: avro.event.type, payload: show(maskPersonal(avro.event)) };
    const text = value.toString('utf8');
    try {
      return { decodedAs: 'json', payload: show(maskPersonal(JSON.parse(text))) };
    } catch {
      // Neither Avro nor JSON: the text, addresses masked, control characters shown as such.
      return { decodedAs: 'text', payload: maskText(printable(text.slice(0, MAX_PREVIEW * 2)), MAX_PREVIEW) };
    }
  }
}

/**
 * A record's headers as text, personal data masked: a header's name may be an address too (masked
 * like any); the value under a personal name is masked whole, any other's addresses are masked
 * before it is cut to 1000 characters (a cut first would leave half an address to read).
 */
export function maskHeaders(raw: NonNullable<RawMessage['headers']>): Record<string, string> {
  const entries: Array<[string, string]> = [];
  for (const [name, value] of Object.entries(raw)) {
    const text = (Array.isArray(value) ? value[0] : value)?.toString();
    if (text !== undefined) entries.push([maskText(name, 200), isPersonalField(name) ? MASK : maskText(text, 1_000)]);
  }
  return Object.fromEntries(entries);
}

const maxOf = (a: bigint, b: bigint) => (a > b ? a : b);

function show(value: unknown): string {
  const text = JSON.stringify(value, (_key, v: unknown) => (typeof v === 'bigint' ? v.toString() : v), 2);
  return text.length > MAX_PREVIEW ? `${text.slice(0, MAX_PREVIEW)}…` : text;
}
