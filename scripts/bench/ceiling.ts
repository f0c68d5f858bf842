/**
 * The ceiling: two minimal stages (ceiling-worker.ts: kafkajs consume → one batched upsert → kafkajs
 * produce), as many hops as our planner + sender and no business logic. What this machine allows a
 * Kafka-and-PostgreSQL pipeline at all.
 */
import { join } from 'node:path';
import { createKafka, createTopicsSettled, EventProducer } from '@outreach/shared';
import { startProcess, waitFor } from '@outreach/testkit';
import pg from 'pg';
import { root } from '../lib/paths.js';
import { dropRunData } from '../lib/stack.js';
import { latencyOf, maxOf, postgresPids, UsageSampler, type BenchRequest } from './common.js';
import { feed, runId, tsNode, until, type BenchEnv } from './harness.js';
import type { SystemResult } from './report.js';

export async function ceiling(env: BenchEnv, requests: readonly BenchRequest[]): Promise<SystemResult> {
  const run = runId('ceil');
  const prefix = `${run}.`;
  const kafka = createKafka({ brokers: env.kafkaBrokers.split(','), clientId: 'bench-ceiling' });
  const [input, middle, output] = ['in', 'mid', 'out'].map((t) => `${prefix}${t}`) as [string, string, string];
  const admin = kafka.admin();
  await admin.connect();
  await createTopicsSettled(
    admin,
    [input, middle, output].map((topic) => ({ topic, numPartitions: 12, replicationFactor: -1 })),
  );
  await admin.disconnect();
  // The stages' own tables: the ceiling is no service, so it has a schema of its own.
  const schema = `${run}_ceiling`;
  const client = new pg.Client({ connectionString: env.databaseUrl });
  await client.connect();
  await client.query(`CREATE SCHEMA "${schema}"`);
  await client.end();
  const stage = (n: number, from: string, to: string) =>
    startProcess(
      join(root, 'scripts', 'bench', 'ceiling-worker.ts'),
      {
        PATH: process.env.PATH,
        KAFKA_BROKERS: env.kafkaBrokers,
        DATABASE_URL: env.databaseUrl,
        IN_TOPIC: from,
        OUT_TOPIC: to,
        TABLE: `"${schema}".stage${n}`,
        GROUP: `${run}-stage${n}`,
      },
      [],
      tsNode,
    );
  const stages = [stage(1, input, middle), stage(2, middle, output)];
  await waitFor(() => stages.every((s) => s.stdoutLines.some((l) => l.includes('running'))), {
    timeoutMs: 60_000,
    description: 'the ceiling stages to start',
  });
  const received = new Map<string, number>();
  const reader = kafka.consumer({ groupId: `${run}-reader`, maxWaitTimeInMs: 100 });
  await reader.connect();
  await reader.subscribe({ topic: output, fromBeginning: true });
  await reader.run({
    eachBatch: async ({ batch }) => {
      for (const m of batch.messages) {
        const key = m.key?.toString() ?? '';
        if (!received.has(key)) received.set(key, Number(m.timestamp));
      }
    },
  });
  const sampler = new UsageSampler(() => [
    ...stages.map((s, i) => ({ name: `stage ${i + 1}`, pid: s.child.pid ?? 0 })),
    ...(env.kafkaPid ? [{ name: 'kafka broker', pid: env.kafkaPid }] : []),
    ...postgresPids().map((pid) => ({ name: 'postgres (all backends)', pid })),
  ]);
  const distinct = new Set(requests.map((r) => r.event.candidateId)).size;
  const producer = new EventProducer(kafka);
  const started = Date.now();
  const publishedAt = await feed(
    requests,
    (r) => r.event.candidateId,
    (chunk) => producer.publish(chunk.map((r) => ({ topic: input, event: r.event }))),
  );
  await until(
    'ceiling',
    () => received.size >= distinct,
    () => `${received.size}/${distinct}`,
    Math.max(300_000, distinct * 20),
  );
  const usage = sampler.stop();
  await producer.disconnect();
  await reader.disconnect();
  await Promise.all(stages.map((s) => s.stop('SIGTERM')));
  const seconds = (maxOf(received.values()) - started) / 1000;
  await dropRunData(env, prefix, [schema]);
  return {
    system: 'ceiling (2 minimal stages)',
    requests: requests.length,
    distinct,
    sendsPerSecond: Math.round(distinct / seconds),
    seconds: Math.round(seconds * 10) / 10,
    latencyMs: latencyOf([...received].map(([key, at]) => at - (publishedAt.get(key) ?? at))),
    delivered: received.size,
    duplicates: 0,
    usage,
    kills: 0,
    note: 'no provider call; "delivered" = records out of stage 2',
  };
}
