/**
 * The AsyncAPI 3.0 document of the event log, generated from what the code runs on: the topic
 * declaration (kafka/topics.ts: names, event types, partitions, retention, keys, PII), the Kafka
 * roles (kafka/acls.ts: who produces and who consumes each topic), the headers the producer writes
 * (kafka/producer.ts) and the Avro schemas themselves as message payloads. `npm run specs:gen`
 * writes it to docs/api/asyncapi.yaml; a test parses it with @asyncapi/parser and fails when the
 * committed file is not what this function gives.
 *
 * One channel per topic and one per dead-letter topic; one message per event type (and its
 * dead-letter form); per role and topic, an operation: `send` for what the role produces,
 * `receive` for what it consumes. The document describes the platform and the systems around it
 * as the roles the broker knows.
 */
import { kafkaRoles, type KafkaRole } from '../kafka/acls.js';
import { HEADER } from '../kafka/producer.js';
import { declaredTopics, dlqTopicOf, topics, type TopicId, type TopicSpec } from '../kafka/topics.js';
import { schemaDefinitions, type EventType } from '@outreach/contracts';
import type { AvroSchema } from './schema-tools.js';

const AVRO_SCHEMA_FORMAT = 'application/vnd.apache.avro;version=1.9.0';
const KAFKA_BINDING = '0.5.0';

type Doc = Record<string, unknown>;

/**
 * Headers a consumer adds when it dead-letters a record (kafka/consumer.ts); the record keeps its
 * own key and headers beside them. A test checks each name against the consumer's source.
 */
export const DEAD_LETTER_HEADERS: Readonly<Record<string, string>> = {
  'dlq-reason': 'Why the consumer could not handle the record (addresses masked, at most 1000 characters).',
  'dlq-error-code': 'A code for the failure (e.g. DECODE_FAILED, REJECTED, TRANSIENT_EXHAUSTED).',
  'dlq-source-topic': 'The topic the record was read from.',
  'dlq-source-partition': 'Its partition.',
  'dlq-source-offset': 'Its offset.',
  'dlq-consumer-group': 'The consumer group that gave up on it.',
  'dlq-failed-at': 'When, as an ISO 8601 instant.',
  'dlq-value-omitted':
    'Present when the value (and maybe the key) did not fit the DLQ: why. Find it by the source coordinates.',
};

const cap = (s: string) => `${s.charAt(0).toUpperCase()}${s.slice(1)}`;
/** `dlq-replay` → `dlqReplay`: AsyncAPI ids and component names are word characters. */
const camel = (s: string) => s.replace(/[-.]([a-z])/g, (_m, c: string) => c.toUpperCase());

function avroOf(type: EventType): AvroSchema {
  return schemaDefinitions[type].current as AvroSchema;
}

/** What the producer keys the topic's records by (kafka/producer.ts messageKey). */
function keyOf(spec: TopicSpec): Doc {
  const fields = (type: EventType) => (avroOf(type).fields as AvroSchema[]).map((f) => f.name as string);
  const all = spec.eventTypes.map(fields);
  const keyed = (field: string) => all.every((names) => names.includes(field));
  const description =
    spec.key !== undefined
      ? `The event's \`${spec.key}\`.`
      : keyed('candidateKey')
        ? "The event's `candidateKey` (its canonical candidate key): one candidate's events stay in order on one partition."
        : keyed('candidateId')
          ? "The event's `candidateId` in canonical form (NFKC, invisible characters removed, trimmed; case kept), as the caller sent it otherwise."
          : 'The candidate the event is about.';
  return { type: 'string', description };
}

function eventHeaders(type: EventType): Doc {
  return {
    type: 'object',
    required: Object.values(HEADER),
    properties: {
      [HEADER.eventId]: { type: 'string', format: 'uuid', description: "The event's `eventId`." },
      [HEADER.eventType]: { type: 'string', const: type, description: 'The event type (the fingerprint says it too).' },
      [HEADER.correlationId]: { type: 'string', description: "The event's `correlationId`." },
      [HEADER.traceparent]: {
        type: 'string',
        pattern: '^00-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}$',
        description: "W3C trace context: a new span of the cause's trace, or a new trace.",
      },
    },
  };
}

function deadLetterHeaders(type: EventType): Doc {
  const original = eventHeaders(type);
  return {
    type: 'object',
    required: ['dlq-reason', 'dlq-error-code', 'dlq-source-topic', 'dlq-source-partition', 'dlq-source-offset'],
    properties: {
      ...(original.properties as Doc),
      ...Object.fromEntries(
        Object.entries(DEAD_LETTER_HEADERS).map(([name, description]) => [name, { type: 'string', description }]),
      ),
    },
  };
}

function message(type: EventType, spec: TopicSpec, deadLetter: boolean): Doc {
  const avro = avroOf(type);
  return {
    name: deadLetter ? `${type}DeadLetter` : type,
    title: deadLetter ? `${type} (dead-lettered)` : type,
    summary: (avro.doc as string | undefined) ?? type,
    ...(deadLetter
      ? {
          description:
            'The record exactly as it was read (key, value and headers), plus the dead-letter headers. The value may not be a valid event: it failed here.',
        }
      : {}),
    contentType: 'application/octet-stream',
    headers: deadLetter ? deadLetterHeaders(type) : eventHeaders(type),
    payload: { $ref: `#/components/schemas/${type}` },
    correlationId: { location: `$message.header#/${HEADER.correlationId}` },
    bindings: { kafka: { key: keyOf(spec), bindingVersion: KAFKA_BINDING } },
  };
}

/** Topic configuration as Kafka reads it: numbers as numbers, the cleanup policy as a list. */
function topicConfiguration(config: Readonly<Record<string, string>>): Doc {
  return Object.fromEntries(
    Object.entries(config).map(([name, value]) => [
      name,
      name === 'cleanup.policy' ? value.split(',') : /^-?\d+$/.test(value) ? Number(value) : value,
    ]),
  );
}

export interface AsyncApiOptions {
  /** The replication factor the deployment gives each topic (Strimzi: 3). */
  readonly replicas: number;
}

export function asyncApiDocument(options: AsyncApiOptions): Doc {
  const ids = Object.keys(topics) as TopicId[];
  const declared = new Map(declaredTopics('', undefined, options.replicas).map((t) => [t.name, t]));
  const roles = Object.entries(kafkaRoles) as Array<[string, KafkaRole]>;
  const channels: Record<string, Doc> = {};
  const operations: Record<string, Doc> = {};
  const messages: Record<string, Doc> = {};
  const schemas: Record<string, Doc> = {};

  for (const id of ids) {
    const spec: TopicSpec = topics[id];
    for (const type of spec.eventTypes) {
      messages[type] = message(type, spec, false);
      messages[`${type}DeadLetter`] = message(type, spec, true);
      schemas[type] = { schemaFormat: AVRO_SCHEMA_FORMAT, schema: avroOf(type) };
    }
    const producers = roles.filter(([, role]) => role.produces.includes(id)).map(([name]) => name);
    const consumers = roles.filter(([, role]) => role.consumes.includes(id)).map(([name]) => name);
    const topic = declared.get(spec.name);
    const dlq = declared.get(dlqTopicOf(spec.name));
    if (!topic || !dlq) throw new Error(`${spec.name} is not among the declared topics`);
    const ref = (name: string) => ({ $ref: `#/components/messages/${name}` });
    channels[id] = {
      address: spec.name,
      title: spec.name,
      description: [
        `${cap(spec.description)}.`,
        spec.pii
          ? '**Carries PII** (a raw address or content): internal only, never for data teams.'
          : 'Free of addresses and content: for data teams too.',
        `Timestamps are ${spec.logAppendTime ? "the broker's append time" : "the producer's"}.`,
        `Produced by ${producers.join(', ') || 'nobody yet'}; consumed by ${consumers.join(', ') || 'nobody yet'}.`,
      ].join(' '),
      messages: Object.fromEntries(spec.eventTypes.map((type) => [type, ref(type)])),
      bindings: {
        kafka: {
          topic: spec.name,
          partitions: topic.partitions,
          replicas: options.replicas,
          topicConfiguration: topicConfiguration(topic.config),
          bindingVersion: KAFKA_BINDING,
        },
      },
      'x-pii': spec.pii,
    };
    const dlqId = `${id}DeadLetters`;
    channels[dlqId] = {
      address: dlq.name,
      title: dlq.name,
      description: `Records of \`${spec.name}\` a consumer could not handle, byte for byte, with the reason in headers. Replayed with \`npm run dlq:replay\`.`,
      messages: Object.fromEntries(spec.eventTypes.map((type) => [`${type}DeadLetter`, ref(`${type}DeadLetter`)])),
      bindings: {
        kafka: {
          topic: dlq.name,
          partitions: dlq.partitions,
          replicas: options.replicas,
          topicConfiguration: topicConfiguration(dlq.config),
          bindingVersion: KAFKA_BINDING,
        },
      },
      'x-pii': spec.pii,
    };

    const operation = (role: string, action: 'send' | 'receive', channel: string) => {
      const messagesOf = channels[channel]?.messages as Doc;
      operations[`${camel(role)}${action === 'send' ? 'Sends' : 'Receives'}${cap(channel)}`] = {
        action,
        channel: { $ref: `#/channels/${channel}` },
        title: `${role} ${action === 'send' ? 'produces to' : 'consumes'} ${channels[channel]?.address as string}`,
        description: `Kafka role \`${role}\`: ${(kafkaRoles as Record<string, KafkaRole>)[role]?.description ?? ''}.`,
        messages: Object.keys(messagesOf).map((name) => ({ $ref: `#/channels/${channel}/messages/${name}` })),
      };
    };
    for (const role of producers) operation(role, 'send', id);
    for (const role of consumers) {
      operation(role, 'receive', id);
      // A consumer dead-letters what it cannot handle (kafka/consumer.ts).
      operation(role, 'send', dlqId);
    }
    for (const [role, spec] of roles) if (spec.replaysDeadLetters) operation(role, 'receive', dlqId);
  }

  return {
    asyncapi: '3.0.0',
    info: {
      title: 'Outreach platform events',
      version: '1',
      description: [
        'Every topic of the platform, generated by `npm run specs:gen` from the topic declaration, the Kafka roles',
        'and the Avro schemas in `schemas/` (the single source of truth; `schemas/README.md` explains each field and',
        'the key rules).',
        '',
        "- Values are Avro single-object encoding: `C3 01`, the writer schema's 8-byte little-endian CRC-64-AVRO",
        '  fingerprint, then the Avro binary body. Older writer schemas are in `schemas/history/`.',
        '- One topic may carry several event types: the fingerprint (and the `event-type` header) tells them apart.',
        '- Delivery is at least once: deduplicate by `eventId` (the `event-id` header).',
        '- Each topic `T` has a dead-letter topic `T.dlq` (30 days) with what its consumers could not handle.',
      ].join('\n'),
    },
    defaultContentType: 'application/octet-stream',
    channels,
    operations,
    components: { schemas, messages },
  };
}
