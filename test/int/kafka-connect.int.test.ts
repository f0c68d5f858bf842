/**
 * Data teams read the public topics with a standard tool that is not ours (issue #21, ADR 011): a
 * real Kafka Connect worker (Apache Kafka's Connect 4.3.1 from Maven Central, standalone) with
 * Apicurio's registry-aware Avro converter (`apicurio-registry-utils-converter` 2.6.13.Final) sinks
 * `outreach.send-recorded.v1` and the mixed `conversation.events.v1` (all seven record types, one
 * subject each under TopicRecordNameStrategy) to a file with FileStreamSink. The events go out
 * through our codec in the Confluent wire format, with the ids `schemas:register` gave them and the
 * registry binding bound, exactly as a service writes them. Every record must come out decoded,
 * every field with its value.
 *
 * FileStreamSink writes each value's `toString()`: Connect's `Struct{field=value,...}` (nulls left
 * out, arrays as `[a, b]`, timestamps as `java.util.Date`, to the second). A TimestampConverter turns
 * `occurredAt` (on every record) into epoch milliseconds, so the millisecond is checked there too.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { closeSync, existsSync, mkdtempSync, openSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import {
  bindSchemaRegistry,
  createKafka,
  createTopicsSettled,
  EventProducer,
  registerSchemas,
  SchemaRegistryClient,
  topics,
  unbindSchemaRegistry,
} from '@outreach/shared';
import { confluentSchemaId, schemaDefinitions, type EventType, type OutreachEvent } from '@outreach/contracts';
import { deleteTopicsWithPrefix, freePort, readTopic, uniqueName, waitFor } from '@outreach/testkit';
import avro from 'avsc';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import {
  CONNECT_VERSION,
  ensureConnect,
  javaToolsPresent,
  type ConnectInstall,
} from '../../scripts/lib/java-interop.js';

const registryUrl = inject('schemaRegistryUrl');
const brokers = inject('kafkaBrokers');
/** Apicurio's own API beside its Confluent-compatible one: what its 2.6 converter speaks. */
const apicurioV2 = registryUrl?.replace(/\/apis\/ccompat\/v7$/, '/apis/registry/v2');
const enabled = javaToolsPresent() && registryUrl !== null && apicurioV2 !== registryUrl;

const conversationTypes = topics.conversationEvents.eventTypes as readonly EventType[];
/** Timestamps in the renderer's sense: `java.util.Date`, unless the worker converted them to epoch ms. */
const UNIX_MILLIS_FIELDS = new Set(['occurredAt']);

type AvroType = string | readonly AvroType[] | { readonly type: string; readonly [key: string]: unknown };
interface AvroField {
  readonly name: string;
  readonly type: AvroType;
}

const DAYS = ['Sun', 'Mon', 'Tue', 'Wed', 'Thu', 'Fri', 'Sat'];
const MONTHS = ['Jan', 'Feb', 'Mar', 'Apr', 'May', 'Jun', 'Jul', 'Aug', 'Sep', 'Oct', 'Nov', 'Dec'];
const pad = (n: number) => String(n).padStart(2, '0');

/** `java.util.Date.toString()` in UTC (the worker runs with -Duser.timezone=UTC). */
function javaDate(ms: number): string {
  const d = new Date(ms);
  const time = `${pad(d.getUTCHours())}:${pad(d.getUTCMinutes())}:${pad(d.getUTCSeconds())}`;
  return `${DAYS[d.getUTCDay()]} ${MONTHS[d.getUTCMonth()]} ${pad(d.getUTCDate())} ${time} UTC ${d.getUTCFullYear()}`;
}

/** How Connect prints a value of Avro type `type` once the converter has made it Connect data. */
function connectValue(type: AvroType, value: unknown, field: string): string {
  if (Array.isArray(type)) return connectValue(type.find((t) => t !== 'null') as AvroType, value, field);
  if (typeof type === 'string') return String(value);
  const t = type as { type: string; logicalType?: string; items?: AvroType; fields?: AvroField[] };
  if (t.logicalType === 'timestamp-millis')
    return UNIX_MILLIS_FIELDS.has(field) ? String(value) : javaDate(Number(value));
  if (t.type === 'array')
    return `[${(value as unknown[]).map((v) => connectValue(t.items as AvroType, v, '')).join(', ')}]`;
  if (t.type === 'record') return connectStruct(t.fields as AvroField[], value as Record<string, unknown>);
  return String(value);
}

/** Connect's `Struct.toString()`: fields in schema order, nulls left out. */
function connectStruct(fields: readonly AvroField[], value: Record<string, unknown>): string {
  const parts = fields
    .filter((f) => value[f.name] !== null && value[f.name] !== undefined)
    .map((f) => `${f.name}=${connectValue(f.type, value[f.name], f.name)}`);
  return `Struct{${parts.join(',')}}`;
}

function expectedLine(event: OutreachEvent): string {
  const { type, ...fields } = event;
  const schema = schemaDefinitions[type].current as { fields: AvroField[] };
  return connectStruct(schema.fields, fields);
}

/**
 * An event of `type` with every field filled by avsc (a nullable field null or set, as it picks), then
 * made realistic where it matters: real UUIDs, and timestamps of today with their milliseconds.
 */
function sampleEvent(type: EventType, index: number): OutreachEvent {
  const avroType = avro.Type.forSchema(schemaDefinitions[type].current as avro.Schema);
  const random = avroType.random() as unknown as Record<string, unknown>;
  const now = Date.now() - index * 7_919;
  for (const key of ['eventId', 'sendId']) if (key in random) random[key] = randomUUID();
  for (const key of ['occurredAt', 'recordedAt', 'dueAt']) if (key in random) random[key] = now + index;
  return { type, ...random } as OutreachEvent;
}

function connectorProperties(name: string, topicList: string[], file: string): string {
  return [
    `name=${name}`,
    'connector.class=org.apache.kafka.connect.file.FileStreamSinkConnector',
    'tasks.max=1',
    `topics=${topicList.join(',')}`,
    `file=${file}`,
    'transforms=occurredAt',
    'transforms.occurredAt.type=org.apache.kafka.connect.transforms.TimestampConverter$Value',
    'transforms.occurredAt.field=occurredAt',
    'transforms.occurredAt.target.type=unix',
    'transforms.occurredAt.unix.precision=milliseconds',
    '',
  ].join('\n');
}

/** The converter settings this test proves (docs/data-teams.md, "Kafka Connect"). */
function workerProperties(install: ConnectInstall, dir: string, restPort: number): string {
  return [
    `bootstrap.servers=${brokers}`,
    'key.converter=org.apache.kafka.connect.storage.StringConverter',
    'value.converter=io.apicurio.registry.utils.converter.AvroConverter',
    `value.converter.apicurio.registry.url=${apicurioV2}`,
    // Read the Confluent wire format: magic byte 0 and a 4-byte id, the registry's content id.
    'value.converter.apicurio.registry.as-confluent=true',
    'value.converter.apicurio.registry.use-id=contentId',
    `plugin.path=${install.pluginPath}`,
    `plugin.discovery=${install.discovery}`,
    `offset.storage.file.filename=${join(dir, 'offsets')}`,
    'offset.flush.interval.ms=1000',
    `listeners=http://127.0.0.1:${restPort}`,
    '',
  ].join('\n');
}

const LOG4J = [
  'rootLogger.level=WARN',
  'rootLogger.appenderRef.file.ref=FILE',
  'appender.file.type=File',
  'appender.file.name=FILE',
  'appender.file.fileName=${sys:connect.log.file}',
  'appender.file.layout.type=PatternLayout',
  'appender.file.layout.pattern=[%d] %p %m (%c)%n',
  'logger.connect.name=org.apache.kafka.connect.runtime.WorkerSinkTask',
  'logger.connect.level=INFO',
  '',
].join('\n');

describe.skipIf(!enabled)(`Kafka Connect ${CONNECT_VERSION} with Apicurio's Avro converter`, () => {
  const prefix = `${uniqueName('kc')}.`;
  const connector = `outreach-file-sink-${prefix.slice(0, -1)}`;
  const kafka = createKafka({ brokers: brokers.split(','), clientId: 'kafka-connect-test' });
  const client = new SchemaRegistryClient({ url: registryUrl ?? '' });
  const producer = new EventProducer(kafka);
  let dir = '';
  let worker: ChildProcess | undefined;
  let subjects: string[] = [];

  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), 'kafka-connect-'));
    const admin = kafka.admin();
    await admin.connect();
    const names = [topics.sendRecorded.name, topics.conversationEvents.name].map((name) => `${prefix}${name}`);
    await createTopicsSettled(
      admin,
      names.map((topic) => ({ topic, numPartitions: 2 })),
    );
    await admin.disconnect();
    // What `npm run schemas:register` does at deploy, for this run's topics; then what a service
    // does at start with EVENT_WIRE_FORMAT=confluent.
    subjects = (await registerSchemas(client, { prefix })).map((s) => s.subject);
    await bindSchemaRegistry({
      EVENT_WIRE_FORMAT: 'confluent',
      SCHEMA_REGISTRY_URL: registryUrl ?? '',
      SCHEMA_REGISTRY_AUTH: '',
      SCHEMA_REGISTRY_TIMEOUT_MS: 5_000,
      SCHEMA_REGISTRY_STARTUP_TIMEOUT_MS: 10_000,
      TOPIC_PREFIX: prefix,
    });
  });

  afterAll(async () => {
    if (worker && worker.exitCode === null && worker.signalCode === null) {
      const exited = new Promise((resolve) => worker?.once('exit', resolve));
      worker.kill('SIGTERM');
      const killer = setTimeout(() => worker?.kill('SIGKILL'), 10_000);
      await exited;
      clearTimeout(killer);
    }
    unbindSchemaRegistry();
    await producer.disconnect();
    await deleteTopicsWithPrefix(kafka, prefix).catch(() => undefined);
    const admin = kafka.admin();
    await admin.connect();
    await admin.deleteGroups([`connect-${connector}`]).catch(() => undefined);
    await admin.disconnect();
    // The run's subjects go too (soft, then permanent, as the registry requires).
    for (const subject of subjects) {
      const url = `${registryUrl}/subjects/${encodeURIComponent(subject)}`;
      await fetch(url, { method: 'DELETE' }).catch(() => undefined);
      await fetch(`${url}?permanent=true`, { method: 'DELETE' }).catch(() => undefined);
    }
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  it('a FileStreamSink worker decodes every record of a single-type and a mixed topic, field by field', async () => {
    const install = ensureConnect();
    const sinkFile = join(dir, 'sink.txt');
    const logFile = join(dir, 'worker.log');
    const sends = Array.from({ length: 6 }, (_, i) => sampleEvent('SendRecorded', i));
    const conversation = conversationTypes.flatMap((type, t) =>
      Array.from({ length: 2 }, (_, i) => sampleEvent(type, t * 2 + i)),
    );
    await producer.publish([
      ...sends.map((event) => ({ topic: `${prefix}${topics.sendRecorded.name}`, event })),
      ...conversation.map((event) => ({ topic: `${prefix}${topics.conversationEvents.name}`, event })),
    ]);

    // What Connect will read is what a service writes: magic 0, the registry's id of the schema.
    const written = await readTopic(kafka, `${prefix}${topics.conversationEvents.name}`, (m) => m.length >= 14);
    const ids = new Set(written.map((m) => confluentSchemaId(m.value ?? Buffer.alloc(0))));
    expect(ids.has(undefined)).toBe(false);
    expect(ids.size).toBe(conversationTypes.length);

    const restPort = await freePort();
    writeFileSync(join(dir, 'worker.properties'), workerProperties(install, dir, restPort));
    writeFileSync(
      join(dir, 'connector.properties'),
      connectorProperties(
        connector,
        [topics.sendRecorded.name, topics.conversationEvents.name].map((name) => `${prefix}${name}`),
        sinkFile,
      ),
    );
    writeFileSync(join(dir, 'log4j2.properties'), LOG4J);
    const out = openSync(join(dir, 'worker.out'), 'w');
    worker = spawn(
      'java',
      [
        '-Xms128m',
        '-Xmx512m',
        // A worker that lives for seconds: the C1 compiler only, which starts it markedly faster.
        '-XX:TieredStopAtLevel=1',
        '-XX:+UseSerialGC',
        '-Duser.timezone=UTC',
        `-Dlog4j2.configurationFile=${join(dir, 'log4j2.properties')}`,
        `-Dconnect.log.file=${logFile}`,
        '-cp',
        `${install.workerLibs}/*`,
        'org.apache.kafka.connect.cli.ConnectStandalone',
        join(dir, 'worker.properties'),
        join(dir, 'connector.properties'),
      ],
      { stdio: ['ignore', out, out] },
    );
    closeSync(out);
    const failure = () => {
      const log = [logFile, join(dir, 'worker.out')]
        .filter((f) => existsSync(f))
        .map((f) => readFileSync(f, 'utf8').slice(-4_000))
        .join('\n');
      return `worker exit ${worker?.exitCode ?? worker?.signalCode ?? '(running)'}; log tail:\n${log}`;
    };

    const expected = [...sends, ...conversation].map(expectedLine);
    // Done when the file holds every record; a failed task (its trace from the REST API) or a dead
    // worker ends the wait at once.
    const result = await waitFor(
      async () => {
        if (!worker || worker.exitCode !== null || worker.signalCode !== null) return { error: failure() };
        const status = await fetch(`http://127.0.0.1:${restPort}/connectors/${connector}/status`)
          .then(async (r) => (r.ok ? ((await r.json()) as { tasks: Array<{ state: string; trace?: string }> }) : null))
          .catch(() => null);
        const failed = status?.tasks.find((t) => t.state === 'FAILED');
        if (failed) return { error: `task FAILED: ${failed.trace ?? ''}` };
        const lines = existsSync(sinkFile) ? readFileSync(sinkFile, 'utf8').split('\n').filter(Boolean) : [];
        return lines.length >= expected.length ? { lines } : undefined;
      },
      { timeoutMs: 90_000, intervalMs: 250, description: `${expected.length} records in ${sinkFile}` },
    ).catch((error: Error) => ({ error: `${error.message}\n${failure()}` }));

    if ('error' in result) expect.fail(result.error);
    // Partitions interleave in the file: compare as sets of whole lines, and count them.
    expect(result.lines).toHaveLength(expected.length);
    expect([...result.lines].sort()).toEqual([...expected].sort());
    // Every type of the mixed topic came through under its own subject.
    for (const type of conversationTypes) {
      expect(subjects).toContain(`${prefix}${topics.conversationEvents.name}-outreach.events.${type}`);
    }
  }, 150_000);
});
