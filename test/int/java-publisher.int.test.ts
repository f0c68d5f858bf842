/**
 * A publisher in another language (issue #21): examples/java-publisher, a Maven project on
 * kafka-clients and Apicurio's Avro serializer, is compiled (`mvn package`) and run against the
 * plaintext broker and the registry. It produces OutreachRequested in the Confluent wire format (the
 * id the registry holds for the schema under `<topic>-outreach.events.OutreachRequested`); the
 * planner and the sender run as processes, in the Confluent format too (EVENT_WIRE_FORMAT=confluent).
 * The planner learns the id at first sight, plans, and the sender delivers to an SMTP server this
 * test runs: SendRequested, the mail, and SendRecorded(sent) carrying the request's id.
 *
 * And a Java publisher gone wrong (test/int/java/HostilePublisher.java): an id no registry gave out,
 * someone else's record, an impostor schema under our record's name, a truncated body. The registry
 * refuses the impostor under the real subject (FULL_TRANSITIVE); everything that reaches the topic is
 * dead-lettered with a reason, the planner keeps running, and a request sent after them is delivered.
 */
import { spawn } from 'node:child_process';
import { join } from 'node:path';
import {
  bindSchemaRegistry,
  createKafka,
  dlqTopicOf,
  registerSchemas,
  registerSubject,
  schemaText,
  SchemaRegistryClient,
  topicName,
  unbindSchemaRegistry,
} from '@outreach/shared';
import {
  confluentSchemaId,
  eventCodec,
  schemaDefinitions,
  type SendRecorded,
  type SendRequested,
} from '@outreach/contracts';
import {
  freePort,
  readTopic,
  SmtpSink,
  startProcess,
  uniqueName,
  waitFor,
  type ReadMessage,
  type RunningProcess,
} from '@outreach/testkit';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { buildJavaPublisher, javaToolsPresent, type JavaPublisherBuild } from '../../scripts/lib/java-interop.js';
import { Stack, type Service } from '../../scripts/lib/stack.js';

const root = join(import.meta.dirname, '..', '..');
const registryUrl = inject('schemaRegistryUrl');
const kafkaBrokers = inject('kafkaBrokers');
const databaseUrl = inject('databaseUrl');
/** Apicurio's own API, which its 2.6 serdes speak (Confluent's serializer would take registryUrl). */
const apicurioV2 = registryUrl?.replace(/\/apis\/ccompat\/v7$/, '/apis/registry/v2');
const enabled = javaToolsPresent() && registryUrl !== null && apicurioV2 !== registryUrl;
const tsx = ['--conditions=source', '--import', join(root, 'node_modules', 'tsx', 'dist', 'loader.mjs')];
const TOKEN = 'java-publisher-token';

interface JavaRun {
  readonly code: number | null;
  readonly stdout: string[];
  readonly stderr: string;
}

/** Runs a Java program to its end (bounded), feeding it `input` on standard input. */
function runJava(args: readonly string[], env: Record<string, string>, input = ''): Promise<JavaRun> {
  return new Promise((resolve, reject) => {
    // Short-lived JVMs: the C1 compiler only, which starts them markedly faster.
    const child = spawn('java', ['-XX:TieredStopAtLevel=1', '-XX:+UseSerialGC', ...args], {
      env: { PATH: process.env.PATH, ...env },
      stdio: ['pipe', 'pipe', 'pipe'],
    });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (chunk: Buffer) => (stdout += chunk.toString()));
    child.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
    const timer = setTimeout(() => child.kill('SIGKILL'), 60_000);
    child.once('error', reject);
    child.once('close', (code) => {
      clearTimeout(timer);
      resolve({ code, stdout: stdout.split('\n').filter(Boolean), stderr });
    });
    child.stdin.end(input);
  });
}

/** The body of the planner's POST /v1/outreach-requests: what the Java publisher reads, one per line. */
interface RequestBody {
  readonly requestId: string;
  readonly email: string;
  readonly contents: ReadonlyArray<{ readonly subject: string; readonly body: string }>;
  readonly [field: string]: unknown;
}

function request(n: number, extra: Record<string, unknown> = {}): RequestBody {
  return {
    requestId: `java-${n}`,
    campaignId: 'Java-Publishers',
    candidateId: `cand-${n}`,
    email: `java.candidate${n}@example.com`,
    step: 'intro',
    contents: [{ subject: `A role for candidate ${n}`, body: `Hello ${n}, would you like to talk?` }],
    ...extra,
  };
}

describe.skipIf(!enabled)('a publisher in Java (examples/java-publisher)', () => {
  const stack = new Stack({
    run: uniqueName('jp'),
    kafkaBrokers,
    databaseUrl,
    portBase: 0,
    token: TOKEN,
    smtpPort: 0,
  });
  const sink = new SmtpSink();
  const client = new SchemaRegistryClient({ url: registryUrl ?? '' });
  const kafka = createKafka({ brokers: kafkaBrokers.split(','), clientId: 'java-publisher-test' });
  const requestedTopic = topicName('outreachRequested', stack.prefix);
  const requestedSubject = `${requestedTopic}-outreach.events.OutreachRequested`;
  const processes: RunningProcess[] = [];
  const ports = new Map<Service, number>();
  const subjects: string[] = [];
  let build: JavaPublisherBuild;
  let requestedId: number;

  const url = (service: Service, path: string) => `http://127.0.0.1:${ports.get(service)}${path}`;
  const javaEnv = () => ({ KAFKA_BROKERS: kafkaBrokers, REGISTRY_URL: apicurioV2 ?? '', TOPIC: requestedTopic });
  const tails = () =>
    processes.map((p) => [...p.stderrLines.slice(-15), ...p.stdoutLines.slice(-15)].join('\n')).join('\n---\n');

  async function startService(service: Service): Promise<void> {
    const port = await freePort();
    ports.set(service, port);
    const proc = startProcess(
      join(root, 'services', service, 'src', 'server.ts'),
      {
        ...stack.env(service),
        HTTP_PORT: String(port),
        SMTP_PORT: String(sink.port),
        SCHEMA_REGISTRY_URL: registryUrl ?? '',
        EVENT_WIRE_FORMAT: 'confluent',
        FASTIFY_AUTOLOAD_TYPESCRIPT: '1',
        LOG_LEVEL: 'warn',
      },
      [],
      tsx,
    );
    processes.push(proc);
    await waitFor(
      async () => {
        if (proc.child.exitCode !== null) throw new Error(`${service} exited: ${proc.stderrLines.join('\n')}`);
        return (await fetch(url(service, '/health/ready'))).ok;
      },
      { timeoutMs: 90_000, intervalMs: 200, description: `${service} to report ready` },
    );
  }

  beforeAll(async () => {
    await sink.start();
    await stack.createTopics(2);
    // The deploy step (`schemas:register`) for the run's public topics, which the services bind at
    // start; and the OutreachRequested subject the publisher's serializer looks its schema up in.
    subjects.push(...(await registerSchemas(client, { prefix: stack.prefix })).map((s) => s.subject));
    const definition = schemaDefinitions.OutreachRequested;
    const registered = await registerSubject(client, {
      subject: requestedSubject,
      topic: requestedTopic,
      eventType: 'OutreachRequested',
      versions: [...definition.history, definition.current].map(schemaText),
    });
    subjects.push(requestedSubject);
    requestedId = registered.ids.at(-1) as number;
    // The test reads SendRecorded in the Confluent format: it binds the run's ids as a service does.
    await bindSchemaRegistry({
      EVENT_WIRE_FORMAT: 'single-object',
      SCHEMA_REGISTRY_URL: registryUrl ?? '',
      SCHEMA_REGISTRY_AUTH: '',
      SCHEMA_REGISTRY_TIMEOUT_MS: 5_000,
      SCHEMA_REGISTRY_STARTUP_TIMEOUT_MS: 10_000,
      TOPIC_PREFIX: stack.prefix,
    });
    // Maven compiles the example while the services start.
    [build] = await Promise.all([buildJavaPublisher(), startService('planner'), startService('sender')]);
  }, 180_000);

  afterAll(async () => {
    await Promise.all(processes.map((p) => p.stop('SIGTERM', 15_000).catch(() => p.stop('SIGKILL'))));
    await sink.stop();
    unbindSchemaRegistry();
    await stack.dropData(['planner', 'sender']).catch(() => undefined);
    await stack.stopAll();
    for (const subject of [...subjects, `${requestedTopic}-com.attacker.Payload`, `${requestedTopic}-impostor`]) {
      const subjectUrl = `${registryUrl}/subjects/${encodeURIComponent(subject)}`;
      await fetch(subjectUrl, { method: 'DELETE' }).catch(() => undefined);
      await fetch(`${subjectUrl}?permanent=true`, { method: 'DELETE' }).catch(() => undefined);
    }
  });

  it('its requests are planned and sent; a hostile one is dead-lettered and the planner carries on', async () => {
    // 1. The attacks first, so the good requests after them show that nothing was blocked.
    const hostile = await runJava(
      ['-cp', `${build.jar}:${build.libs}/*`, join(import.meta.dirname, 'java', 'HostilePublisher.java')],
      { ...javaEnv(), KNOWN_ID: String(requestedId) },
    );
    expect(hostile.code, hostile.stderr).toBe(0);
    const attacks = ['unknown-id', 'truncated', 'foreign-record', 'impostor'];
    for (const attack of attacks) expect(hostile.stdout).toContainEqual(expect.stringMatching(`^sent ${attack} `));
    // The registry's compatibility rule stopped the impostor at the real subject: nothing was sent.
    expect(hostile.stdout).toContainEqual(
      expect.stringMatching(/^refused impostor-at-subject RuleViolationException: Incompatible artifact/),
    );

    // 2. The example publisher, as a publisher runs it: requests as JSON lines on standard input.
    const withFollowUp = request(3, {
      followUps: [
        { step: 'follow-up', delayMs: 300, contents: [{ subject: 'Following up, 3', body: 'Any thoughts?' }] },
      ],
    });
    const requests = [request(1), request(2, { sendAt: new Date(Date.now() - 60_000).toISOString() }), withFollowUp];
    const published = await runJava(['-jar', build.jar], javaEnv(), requests.map((r) => JSON.stringify(r)).join('\n'));
    expect(published.code, published.stderr).toBe(0);
    expect(published.stdout.filter((l) => l.startsWith('acked '))).toHaveLength(requests.length);

    // On the topic: the Confluent wire format with the registry's id of OutreachRequested.
    const onTopic = await readTopic(kafka, requestedTopic, (m) => m.length >= attacks.length + requests.length);
    const fromPublisher = onTopic.filter((m) => m.key?.startsWith('cand-'));
    expect(fromPublisher.map((m) => confluentSchemaId(m.value as Buffer))).toEqual(requests.map(() => requestedId));

    // 3. The planner planned each request (SendRequested), the sender mailed it, and recorded it.
    const sendRequested = await readTopic(
      kafka,
      topicName('sendRequested', stack.prefix),
      (m) => m.length >= requests.length + 1,
      60_000,
    ).catch((error: Error) => expect.fail(`${error.message}\n${tails()}`));
    const planned = sendRequested.map((m) => eventCodec.decode(m.value as Buffer) as SendRequested);
    for (const r of requests) {
      expect(planned).toContainEqual(
        expect.objectContaining({
          requestId: r.requestId,
          email: r.email,
          step: 'intro',
          subject: r.contents[0]?.subject,
        }),
      );
    }
    await waitFor(() => requests.every((r) => sink.deliveredTo(r.email).length > 0), {
      timeoutMs: 60_000,
      description: 'a mail to every requested candidate',
    }).catch((error: Error) => expect.fail(`${error.message}\n${tails()}`));
    for (const r of requests) {
      expect(sink.deliveredTo(r.email).map((m) => m.subject)).toContain(r.contents[0]?.subject);
    }
    // The follow-up (a nested record in the Java-built event) was scheduled and sent too.
    await waitFor(() => sink.deliveredTo(withFollowUp.email).some((m) => m.subject === 'Following up, 3'), {
      timeoutMs: 30_000,
      description: 'the follow-up mail',
    });
    const recorded = await readTopic(
      kafka,
      topicName('sendRecorded', stack.prefix),
      (m) => m.length >= requests.length,
      30_000,
    );
    const outcomes = recorded.map((m) => eventCodec.decode(m.value as Buffer) as SendRecorded);
    for (const r of requests) {
      expect(outcomes).toContainEqual(expect.objectContaining({ requestId: r.requestId, outcome: 'sent' }));
    }

    // 4. Every hostile record is in the DLQ with its reason; the planner is still up and ready.
    const dead = await readTopic(kafka, dlqTopicOf(requestedTopic), (m) => m.length >= attacks.length);
    const byKey = new Map<string, ReadMessage>(dead.map((m) => [m.key ?? '', m]));
    expect([...byKey.keys()].sort()).toEqual(attacks.map((a) => `attack-${a}`).sort());
    expect(byKey.get('attack-unknown-id')?.headers).toMatchObject({
      'dlq-error-code': 'UNKNOWN_SCHEMA_ID',
      'dlq-reason': 'schema id 2000000007 is unknown to this consumer',
      'dlq-source-topic': requestedTopic,
    });
    for (const attack of ['foreign-record', 'impostor']) {
      const headers = byKey.get(`attack-${attack}`)?.headers ?? {};
      const id = confluentSchemaId(byKey.get(`attack-${attack}`)?.value as Buffer);
      // The registry knows these ids (the serializer registered them); the platform reads neither.
      expect(await client.schemaById(id as number)).toMatch(/Payload|OutreachRequested/);
      expect(headers).toMatchObject({
        'dlq-error-code': 'UNKNOWN_SCHEMA_ID',
        'dlq-reason': `schema id ${id} is unknown to this consumer`,
      });
    }
    expect(byKey.get('attack-truncated')?.headers['dlq-error-code']).toMatch(/^(TRUNCATED|INVALID_BODY)$/);
    expect(byKey.get('attack-truncated')?.headers['dlq-reason']).toMatch(/OutreachRequested body/);
    // Nothing of the publisher's went to the DLQ, and the planner never stopped.
    expect(dead.filter((m) => m.key?.startsWith('cand-'))).toEqual([]);
    expect(processes.every((p) => p.child.exitCode === null)).toBe(true);
    expect((await fetch(url('planner', '/health/ready'))).status).toBe(200);
  }, 150_000);
});
