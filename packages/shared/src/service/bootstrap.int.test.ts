/**
 * A service made only of the shared layer (test/fixtures/echo-service.ts), as a process:
 * migrations at start, consume → database + outbox in one transaction → relay, readiness, metrics,
 * and a graceful SIGTERM mid-stream after which a restarted process finishes the work exactly once.
 */
import { randomUUID } from 'node:crypto';
import { join } from 'node:path';
import pg from 'pg';
import { afterAll, describe, expect, inject, it } from 'vitest';
import { eventCodec } from '@outreach/contracts';
import type { StepCompleted } from '@outreach/contracts';
import { uuidV5 } from '@outreach/contracts';
import { createKafka } from '../kafka/client.js';
import { EventProducer, HEADER } from '../kafka/producer.js';
import { readTopic } from '@outreach/testkit';
import { createTopicsSettled, dlqTopicOf } from '../kafka/topics.js';
import { quoteIdent } from '../pg/pool.js';
import { uniqueName } from '@outreach/testkit';
import { freePort, startProcess, type RunningProcess } from '@outreach/testkit';
import { waitFor } from '../wait.js';

const brokers = inject('kafkaBrokers');
const databaseUrl = inject('databaseUrl');
const registryUrl = inject('schemaRegistryUrl');
const root = join(import.meta.dirname, '..', '..', '..', '..');
const entry = join(import.meta.dirname, '..', '..', 'test', 'fixtures', 'echo-service.ts');
const kafka = createKafka({ brokers: brokers.split(','), clientId: 'bootstrap-test' });
const schema = uniqueName('echo');
const processes: RunningProcess[] = [];

afterAll(async () => {
  await Promise.all(processes.map((p) => p.stop('SIGKILL')));
  const client = new pg.Client({ connectionString: databaseUrl });
  await client.connect();
  await client.query(`DROP SCHEMA IF EXISTS ${quoteIdent(schema)} CASCADE`);
  await client.end();
});

describe('a service built from the shared bootstrap', () => {
  it('consumes, records and publishes through its outbox; SIGTERM mid-stream loses nothing and records each event once', async () => {
    const source = uniqueName('echo_in');
    const target = uniqueName('echo_out');
    const admin = kafka.admin();
    await admin.connect();
    await createTopicsSettled(
      admin,
      [source, dlqTopicOf(source), target].map((topic) => ({ topic, numPartitions: 2 })),
    );
    await admin.disconnect();

    const events: StepCompleted[] = Array.from({ length: 400 }, (_, i) => ({
      type: 'StepCompleted',
      eventId: randomUUID(),
      occurredAt: Date.now(),
      producer: 'test',
      correlationId: `corr-${i}`,
      causationId: null,
      conversationId: 'conv',
      campaignId: 'camp',
      candidateKey: `k${i % 7}`,
      stepId: String(i),
    }));
    const producer = new EventProducer(kafka);
    await producer.publish(events.map((event) => ({ topic: source, event })));
    await producer.disconnect();

    const start = async (): Promise<{ proc: RunningProcess; port: number }> => {
      const port = await freePort();
      const proc = startProcess(
        entry,
        {
          PATH: process.env.PATH,
          KAFKA_BROKERS: brokers,
          DATABASE_URL: databaseUrl,
          DATABASE_SCHEMA: schema,
          SOURCE_TOPIC: source,
          TARGET_TOPIC: target,
          HTTP_PORT: String(port),
          HTTP_HOST: '127.0.0.1',
          HANDLER_DELAY_MS: '100',
          // The wire format of the run (ADR 011; test/vitest.confluent.config.ts): a service learns
          // registry ids at start only when it is given the registry.
          ...(registryUrl ? { SCHEMA_REGISTRY_URL: registryUrl } : {}),
          ...(process.env.EVENT_WIRE_FORMAT ? { EVENT_WIRE_FORMAT: process.env.EVENT_WIRE_FORMAT } : {}),
        },
        [],
        ['--conditions=source', '--import', join(root, 'node_modules', 'tsx', 'dist', 'loader.mjs')],
      );
      processes.push(proc);
      return { proc, port };
    };
    const seen = async () => {
      const client = new pg.Client({ connectionString: databaseUrl });
      await client.connect();
      try {
        return (
          (await client.query<{ n: number }>(`SELECT count(*)::int AS n FROM ${quoteIdent(schema)}.seen`)).rows[0]?.n ??
          0
        );
      } catch {
        return 0; // not migrated yet
      } finally {
        await client.end();
      }
    };

    const first = await start();
    // Mid-stream, whenever it becomes ready: readiness is refreshed on a timer and may say so after
    // consumption began (the second process's readiness is waited for below).
    await waitFor(async () => (await seen()) >= 60, {
      timeoutMs: 30_000,
      intervalMs: 20,
      description: 'consumption under way',
    });
    const metrics = await (await fetch(`http://127.0.0.1:${first.port}/metrics`)).text();
    expect(metrics).toMatch(/outreach_outbox_unpublished_rows/);
    expect(metrics).toMatch(/outreach_consumer_messages_total\{[^}]*result="handled"/);

    expect(await first.proc.stop('SIGTERM')).toBe(0);
    expect(first.proc.stdoutLines.some((l) => l.includes('"msg":"shutting down"'))).toBe(true);
    const seenAtStop = await seen();
    expect(seenAtStop).toBeLessThan(events.length);

    const second = await start();
    await waitFor(async () => (await fetch(`http://127.0.0.1:${second.port}/health/ready`)).ok, {
      timeoutMs: 30_000,
      description: 'the restarted service to be ready (migrated, connected, joined)',
    });
    const echoed = await readTopic(
      kafka,
      target,
      (messages) => new Set(messages.map((m) => m.headers[HEADER.eventId])).size >= events.length,
      60_000,
    );
    expect(await seen()).toBe(events.length);
    const ids = new Set(echoed.map((m) => (eventCodec.decode(m.value as Buffer) as StepCompleted).eventId));
    expect(ids).toEqual(new Set(events.map((e) => uuidV5('echo', e.eventId))));
    const causes = echoed.map((m) => (eventCodec.decode(m.value as Buffer) as StepCompleted).causationId);
    expect(new Set(causes)).toEqual(new Set(events.map((e) => e.eventId)));
    expect(await second.proc.stop('SIGTERM')).toBe(0);
  });
});
