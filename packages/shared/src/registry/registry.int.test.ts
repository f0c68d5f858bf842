/**
 * The schema registry (ADR 011) against the real one the test setup provides (Apicurio Registry 3's
 * ccompat API locally; SCHEMA_REGISTRY_URL otherwise). Every spec uses its own topic prefix, so its
 * subjects are its own and reruns never collide.
 */
import avro from 'avsc';
import type { Kafka, Producer } from 'kafkajs';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { EventCodec, eventCodec } from '@outreach/contracts';
import { schemaDefinitions, type SendRecorded, type StepCompleted } from '@outreach/contracts';
import { createKafka } from '../kafka/client.js';
import { ConsumerRunner, type ConsumedEvent } from '../kafka/consumer.js';
import { readTopic } from '@outreach/testkit';
import { createTopicsSettled, dlqTopicOf, topics } from '../kafka/topics.js';
import { createLogger } from '../logger.js';
import { createMetricsRegistry } from '../metrics.js';
import { StartupError } from '../service/startup-error.js';
import { stepCompleted } from '../../test/fixtures/events.js';
import { uniqueName } from '@outreach/testkit';
import { waitFor } from '../wait.js';
import { bindSchemaRegistry, SchemaIdResolver, unbindSchemaRegistry, type RegistryBindingConfig } from './binding.js';
import { SchemaRegistryClient } from './client.js';
import { registerSchemas, registerSubject, SchemaRegistrationError } from './register.js';
import { publisherSubjects, registrySubjects, schemaText, subjectName } from './subjects.js';

const url = inject('schemaRegistryUrl');
const client = url ? new SchemaRegistryClient({ url }) : (undefined as unknown as SchemaRegistryClient);
const prefix = () => `${uniqueName('sr')}.`;
const bindingConfig = (overrides: Partial<RegistryBindingConfig>): RegistryBindingConfig => ({
  EVENT_WIRE_FORMAT: 'confluent',
  SCHEMA_REGISTRY_URL: url ?? '',
  SCHEMA_REGISTRY_AUTH: '',
  SCHEMA_REGISTRY_TIMEOUT_MS: 5_000,
  SCHEMA_REGISTRY_STARTUP_TIMEOUT_MS: 0,
  TOPIC_PREFIX: '',
  ...overrides,
});

function sendRecorded(i: number): SendRecorded {
  const avroType = avro.Type.forSchema(schemaDefinitions.SendRecorded.current as avro.Schema);
  return { type: 'SendRecorded', ...(avroType.random() as object), eventId: `e-${i}` } as SendRecorded;
}

describe.skipIf(!url)('schema registry (ADR 011)', () => {
  it('answers the Confluent-compatible API', async () => {
    expect(Array.isArray(await client.subjects())).toBe(true);
    const response = await fetch(`${url}/schemas/types`);
    expect(response.ok).toBe(true);
    expect(await response.json()).toContain('AVRO');
  });

  it('schemas:register puts every public topic under TopicRecordNameStrategy, FULL_TRANSITIVE, history first; a rerun changes nothing', async () => {
    const p = prefix();
    const first = await registerSchemas(client, { prefix: p });
    const expected = [...registrySubjects(p), ...publisherSubjects(p)];
    expect(first.map((r) => r.subject)).toEqual(expected.map((s) => s.subject));
    // Topics without PII, which the platform writes in the Confluent format; of internal ones only the
    // topic other systems publish to (for their registry-aware serializers); never the send path's.
    expect(first.map((r) => r.subject)).toContain(`${p}outreach.send-recorded.v1-outreach.events.SendRecorded`);
    expect(first.map((r) => r.subject)).toContain(`${p}outreach.requested.v1-outreach.events.OutreachRequested`);
    expect(first.some((r) => r.subject.includes(topics.sendRequested.name))).toBe(false);
    expect(registrySubjects(p).some((s) => s.subject.includes(topics.outreachRequested.name))).toBe(false);
    for (const registered of first) {
      const subject = expected.find((s) => s.subject === registered.subject);
      expect(await client.compatibility(registered.subject)).toBe('FULL_TRANSITIVE');
      expect(await client.versions(registered.subject)).toHaveLength(subject?.versions.length ?? -1);
    }
    const sendRecordedIds = first.find((r) => r.subject.endsWith('SendRecorded'))?.ids ?? [];
    expect(sendRecordedIds).toHaveLength(schemaDefinitions.SendRecorded.history.length + 1);
    expect(JSON.parse(await client.schemaById(sendRecordedIds.at(-1) as number))).toEqual(
      schemaDefinitions.SendRecorded.current,
    );
    const again = await registerSchemas(client, { prefix: p });
    expect(again).toEqual(first);
  });

  it('refuses an incompatible version (a field removed without a default), naming the subject', async () => {
    const topic = `${prefix()}${topics.sendRecorded.name}`;
    const current = schemaDefinitions.SendRecorded.current as { fields: Array<{ name: string; default?: unknown }> };
    const withoutDefault = current.fields.find((f) => f.default === undefined && f.name !== 'eventId');
    expect(withoutDefault).toBeDefined();
    const subject = subjectName(topic, current);
    await registerSubject(client, { subject, topic, eventType: 'SendRecorded', versions: [schemaText(current)] });
    const broken = { ...current, fields: current.fields.filter((f) => f !== withoutDefault) };
    const attempt = registerSubject(client, {
      subject,
      topic,
      eventType: 'SendRecorded',
      versions: [schemaText(current), schemaText(broken)],
    });
    await expect(attempt).rejects.toBeInstanceOf(SchemaRegistrationError);
    await expect(attempt).rejects.toThrow(new RegExp(`^${subject.replaceAll('.', '\\.')}: version 2 of 2`));
    expect(await client.versions(subject)).toHaveLength(1);
  });

  it('a consumer holding only SendRecorded v2 reads what a v3 producer writes, learning its id once', async () => {
    const p = prefix();
    await registerSchemas(client, { prefix: p });
    const writer = new EventCodec(schemaDefinitions);
    const binding = await bindSchemaRegistry(bindingConfig({ TOPIC_PREFIX: p }), writer);
    const v3Id = binding?.currentIds.get('SendRecorded') as number;
    const event = sendRecorded(1);
    const bytes = writer.encode(event);
    expect(bytes[0]).toBe(0);
    expect(bytes.readUInt32BE(1)).toBe(v3Id);

    const [, v2] = schemaDefinitions.SendRecorded.history;
    const oldReader = new EventCodec({ SendRecorded: { current: v2 as object, history: [] } });
    expect(oldReader.tryDecode(bytes)).toMatchObject({ ok: false, error: { code: 'UNKNOWN_SCHEMA_ID' } });
    const resolver = new SchemaIdResolver(client, oldReader);
    await resolver.learn(oldReader.unknownSchemaIds([bytes]));
    const decoded = oldReader.decode(bytes) as unknown as Record<string, unknown>;
    const v2Fields = (v2 as { fields: Array<{ name: string }> }).fields.map((f) => f.name);
    expect(Object.keys(decoded).sort()).toEqual(['type', ...v2Fields].sort());
    for (const name of v2Fields)
      expect(decoded[name], name).toEqual((event as unknown as Record<string, unknown>)[name]);
  });

  it('an id the registry does not have stays unknown (UNKNOWN_SCHEMA_ID), without throwing', async () => {
    const codec = new EventCodec(schemaDefinitions);
    const resolver = new SchemaIdResolver(client, codec);
    const bytes = Buffer.concat([Buffer.from([0, 0x7f, 0xff, 0xff, 0xf0]), Buffer.alloc(8)]);
    await resolver.learn(codec.unknownSchemaIds([bytes]));
    expect(codec.tryDecode(bytes)).toMatchObject({ ok: false, error: { code: 'UNKNOWN_SCHEMA_ID' } });
  });

  it('made-up ids cost a bounded number of lookups per batch and a bounded memory of failures (all UNKNOWN_SCHEMA_ID)', async () => {
    const codec = new EventCodec(schemaDefinitions);
    const lookups: number[] = [];
    // The real registry, counting its calls.
    const counting = new (class extends SchemaRegistryClient {
      override schemaById(id: number): Promise<string> {
        lookups.push(id);
        return super.schemaById(id);
      }
    })({ url: url as string });
    const resolver = new SchemaIdResolver(counting, codec, 60_000, { maxFailed: 5, maxLookupsPerBatch: 3 });
    const record = (id: number) => {
      const header = Buffer.alloc(5);
      header.writeUInt32BE(id, 1);
      return Buffer.concat([header, Buffer.alloc(8)]);
    };
    // One batch of 20 distinct unknown ids (and a repeat): 3 looked up, every record stays unknown.
    const batch = Array.from({ length: 20 }, (_, i) => record(0x7f000000 + i));
    await resolver.learn(codec.unknownSchemaIds([...batch, record(0x7f000000)]));
    expect(lookups).toHaveLength(3);
    for (const bytes of batch)
      expect(codec.tryDecode(bytes)).toMatchObject({ ok: false, error: { code: 'UNKNOWN_SCHEMA_ID' } });
    // Batch after batch of new ids: the failures remembered stay at the cap.
    for (let round = 1; round <= 5; round++)
      await resolver.learn(
        codec.unknownSchemaIds(Array.from({ length: 20 }, (_, i) => record(0x7f100000 + round * 100 + i))),
      );
    expect(lookups).toHaveLength(18);
    expect(resolver.failedCount).toBe(5);
    // A remembered failure is not looked up again while it lasts.
    const lastLooked = lookups.at(-1) as number;
    await resolver.learn([lastLooked]);
    expect(lookups).toHaveLength(18);
  });

  it('refuses to start in confluent format when a subject lacks this build’s schema, naming it and the command', async () => {
    const p = prefix();
    const attempt = bindSchemaRegistry(bindingConfig({ TOPIC_PREFIX: p }), new EventCodec(schemaDefinitions));
    await expect(attempt).rejects.toBeInstanceOf(StartupError);
    await expect(attempt).rejects.toThrow(
      /subject .*-outreach\.events\.\w+ does not hold .*`npm run schemas:register`/,
    );
  });

  it('refuses to start when the registry does not answer (exit 69), and without a URL in confluent format (78)', async () => {
    const down = bindSchemaRegistry(
      bindingConfig({ SCHEMA_REGISTRY_URL: 'http://127.0.0.1:9/apis/ccompat/v7', SCHEMA_REGISTRY_TIMEOUT_MS: 1_000 }),
      new EventCodec(schemaDefinitions),
    );
    await expect(down).rejects.toMatchObject({ dependency: 'schema-registry', failure: 'unreachable', exitCode: 69 });
    const none = bindSchemaRegistry(bindingConfig({ SCHEMA_REGISTRY_URL: '' }), new EventCodec(schemaDefinitions));
    await expect(none).rejects.toMatchObject({ failure: 'configuration', exitCode: 78 });
    // single-object without a registry: nothing to bind, nothing refused.
    expect(
      await bindSchemaRegistry(
        bindingConfig({ EVENT_WIRE_FORMAT: 'single-object', SCHEMA_REGISTRY_URL: '' }),
        new EventCodec(schemaDefinitions),
      ),
    ).toBeUndefined();
  });
});

describe.skipIf(!url)('consumer with the registry (ADR 011)', () => {
  let kafka: Kafka;
  let producer: Producer;
  const runners: ConsumerRunner[] = [];
  beforeAll(async () => {
    kafka = createKafka({ brokers: inject('kafkaBrokers').split(','), clientId: 'registry-test' });
    producer = kafka.producer({ idempotent: true });
    await producer.connect();
  });
  afterAll(async () => {
    await Promise.all(runners.map((r) => r.stop()));
    await producer.disconnect();
    unbindSchemaRegistry();
  });

  it('learns an id first seen in flight, and dead-letters one the registry does not have as UNKNOWN_SCHEMA_ID', async () => {
    // The shared codec in single-object format, its topics not registered (yet): it knows no ids,
    // but a resolver is in place for ids met in flight. (Under test/vitest.confluent.config.ts the
    // setup bound it already, and ids name content, so it would know this one: start clean.)
    unbindSchemaRegistry();
    await bindSchemaRegistry(bindingConfig({ EVENT_WIRE_FORMAT: 'single-object', TOPIC_PREFIX: prefix() }));
    // A producer of another build, already in confluent format.
    const other = prefix();
    await registerSchemas(client, { prefix: other });
    const writer = new EventCodec(schemaDefinitions);
    const binding = await bindSchemaRegistry(bindingConfig({ TOPIC_PREFIX: other }), writer);
    const id = binding?.currentIds.get('StepCompleted') as number;
    const events = Array.from({ length: 5 }, (_, i) => stepCompleted(i, 'k'));
    const confluentBytes = events.map((e) => writer.encode(e));
    expect(eventCodec.unknownSchemaIds(confluentBytes)).toEqual([id]);
    const stray = Buffer.concat([Buffer.from([0, 0x7f, 0xff, 0xff, 0xf1]), Buffer.alloc(8)]);

    const admin = kafka.admin();
    await admin.connect();
    const topic = uniqueName('registry_consumer');
    await createTopicsSettled(admin, [
      { topic, numPartitions: 1 },
      { topic: dlqTopicOf(topic), numPartitions: 1 },
    ]);
    await admin.disconnect();
    await producer.send({
      topic,
      acks: -1,
      messages: [
        ...confluentBytes.map((value) => ({ key: 'k', value })),
        { key: 'k', value: stray },
        { key: 'k', value: eventCodec.encode(events[0] as StepCompleted) },
      ],
    });
    const handled: ConsumedEvent[] = [];
    const runner = new ConsumerRunner({
      kafka,
      groupId: uniqueName('group'),
      topics: [topic],
      handler: async (batch) => {
        handled.push(...batch);
      },
      logger: createLogger({ name: 'registry-test', level: 'silent' }),
      metrics: createMetricsRegistry('test', false),
    });
    runners.push(runner);
    await runner.start();
    await waitFor(() => runner.stats.handled + runner.stats.deadLettered >= 7, {
      timeoutMs: 30_000,
      description: '7 messages handled or dead-lettered',
    });
    expect(handled.map((h) => h.event.eventId)).toEqual([...events, events[0]].map((e) => e?.eventId));
    expect(runner.stats.crashes).toBe(0);
    expect(eventCodec.knowsSchemaId(id)).toBe(true);
    const [dead] = await readTopic(kafka, dlqTopicOf(topic), (m) => m.length >= 1);
    expect(dead?.headers['dlq-error-code']).toBe('UNKNOWN_SCHEMA_ID');
    expect(Buffer.compare(dead?.value as Buffer, stray)).toBe(0);
  });
});
