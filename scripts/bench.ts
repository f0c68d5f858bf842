/**
 * `npm run bench`: throughput, latency and scaling, measured side by side in one run on one machine:
 *   1. our pipeline: the four services as processes, the null provider, N requests (10% repeated)
 *      through `outreach.requested.v1`; sends/s from the first request to the last SendRecorded,
 *      request→SendRecorded latency (HDR histogram), CPU seconds and peak RSS per process;
 *   2. the ceiling: two minimal stages (kafkajs consume → one batched upsert → kafkajs produce), as
 *      many hops as our planner + sender, no business logic;
 *   3. peers on the same request set and null provider: BullMQ (jobId = campaign:candidate:step) and
 *      pg-boss (singletonKey), then worker SIGKILL ×3 on each system, counting duplicate deliveries;
 *   4. scaling: the pipeline at 10k/50k/200k, the check endpoint's p99 at 1k req/s over 1M sent
 *      rows, experiment assignments single and batched, a liveness sweep over 10k/100k/1M open
 *      conversations;
 *   5. a CPU profile of planner and sender, summed by where the time goes.
 * Writes reports/bench/report.{md,json}. Figures are printed and recorded, never asserted.
 *
 *   npm run bench [-- --requests 50000 --fault-requests 10000 --scaling 10000,50000,200000 --only ...]
 */
import { existsSync, mkdirSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { cpus } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import autocannon from 'autocannon';
import { Queue } from 'bullmq';
import { Redis } from 'ioredis';
import PgBoss from 'pg-boss';
import pg from 'pg';
import {
  createKafka,
  createPool,
  eventCodec,
  EventProducer,
  migrate,
  topicName,
  type SendRecorded,
} from '@outreach/shared';
import { startProcess, waitFor, type RunningProcess } from '@outreach/shared/testing';
import { up } from './infra.js';
import { describeMachine, machineMarkdown } from './lib/machine.js';
import { dropRunData, services, Stack, type Service } from './lib/stack.js';
import {
  duplicateDeliveries,
  latencyOf,
  maxOf,
  postgresPids,
  readDeliveryLog,
  requestSet,
  say,
  UsageSampler,
  type BenchRequest,
  type Latency,
  type ProcessUsage,
} from './bench/common.js';
import { ConversationsRepository } from '../services/liveness/src/adapters/conversations-repository.js';

const root = join(import.meta.dirname, '..');
const { values: args } = parseArgs({
  options: {
    requests: { type: 'string', default: '50000' },
    'fault-requests': { type: 'string', default: '10000' },
    scaling: { type: 'string', default: '10000,50000,200000' },
    'profile-requests': { type: 'string', default: '20000' },
    'steady-rate': { type: 'string', default: '1000' },
    'check-rows': { type: 'string', default: '1000000' },
    'sweep-sizes': { type: 'string', default: '10000,100000,1000000' },
    'steady-requests': { type: 'string', default: '10000' },
    only: { type: 'string' },
    'port-base': { type: 'string', default: '8280' },
  },
});
const sections = new Set(
  (args.only ?? 'pipeline,ceiling,bullmq,pgboss,steady,faults,scaling,check,experiment,sweep,profile').split(','),
);
const work = join(root, '.infra', 'bench');
const REDIS_URL = process.env.REDIS_URL ?? 'redis://127.0.0.1:6379';
const tsNode = ['--conditions=source', '--import', 'tsx'];

interface SystemResult {
  readonly system: string;
  readonly requests: number;
  readonly distinct: number;
  readonly sendsPerSecond: number;
  readonly seconds: number;
  readonly latencyMs: Latency;
  readonly delivered: number;
  readonly duplicates: number;
  readonly usage: readonly ProcessUsage[];
  readonly kills: number;
  readonly note?: string;
}

let runCounter = 0;
function runId(label: string): string {
  return `bench${label}${Date.now().toString(36)}${runCounter++}`;
}

/** Waits with a progress line every 5 s. */
async function until(
  description: string,
  done: () => Promise<boolean> | boolean,
  progress: () => string,
  timeoutMs: number,
  intervalMs = 250,
) {
  const ticker = setInterval(() => say(`  ${description}: ${progress()}`), 5_000);
  try {
    await waitFor(done, { timeoutMs, intervalMs, description });
  } finally {
    clearInterval(ticker);
  }
}

// ------------------------------------------------------------------------------------------ ours

/**
 * Hands the requests to `send` in chunks: all at once (a burst, the throughput runs), or at `pace`
 * requests per second (the steady-rate latency runs). Records each key's first hand-over time.
 */
async function feed(
  requests: readonly BenchRequest[],
  keyOf: (r: BenchRequest) => string,
  send: (chunk: readonly BenchRequest[]) => Promise<void>,
  pace?: number,
): Promise<Map<string, number>> {
  const handedAt = new Map<string, number>();
  const size = pace ? Math.max(1, Math.round(pace / 20)) : 1_000;
  const started = Date.now();
  for (let i = 0; i < requests.length; i += size) {
    if (pace) {
      const due = started + (i / pace) * 1000;
      if (due > Date.now()) await new Promise((resolve) => setTimeout(resolve, due - Date.now()));
    }
    const chunk = requests.slice(i, i + size);
    const now = Date.now();
    for (const r of chunk) if (!handedAt.has(keyOf(r))) handedAt.set(keyOf(r), now);
    await send(chunk);
  }
  return handedAt;
}

async function ours(
  infra: { kafkaBrokers: string; databaseUrl: string; kafkaPid?: number },
  requests: readonly BenchRequest[],
  options: { kills?: number; profileDir?: string; pace?: number; providerDelayMs?: number } = {},
): Promise<SystemResult> {
  const run = runId('ours');
  const deliveryLog = join(work, `${run}.deliveries`);
  const kafka = createKafka({ brokers: infra.kafkaBrokers.split(','), clientId: 'bench' });
  const stack = await benchStack(run, infra, (service) =>
    service === 'sender'
      ? {
          MAIL_PROVIDER: 'null',
          NULL_PROVIDER_LOG: deliveryLog,
          NULL_PROVIDER_DELAY_MS: String(options.providerDelayMs ?? 0),
          SEND_CONCURRENCY: '64',
          SEND_BATCH_SIZE: '500',
          SEND_RATE_PER_SECOND: '1000000',
          LEASE_MS: '30000',
          PROVIDER_TIMEOUT_MS: '10000',
        }
      : service === 'planner'
        ? { REQUEST_BATCH_SIZE: '500' }
        : {},
  );
  const nodeArgs = (service: string) =>
    options.profileDir ? [`--cpu-prof`, `--cpu-prof-dir=${join(options.profileDir, service)}`] : [];
  for (const service of ['experiment', 'liveness', 'sender', 'planner'] as const) {
    await stack.start(service, { nodeArgs: nodeArgs(service) });
  }
  const pids = () => [
    ...[...stack.processes].map(([key, p]) => ({ name: key.replace(/#\d+$/, ''), pid: p.child.pid ?? 0 })),
    ...(infra.kafkaPid ? [{ name: 'kafka broker', pid: infra.kafkaPid }] : []),
    ...postgresPids().map((pid) => ({ name: 'postgres (all backends)', pid })),
  ];

  // SendRecorded, by sendId, with its Kafka timestamp (the broker's append time).
  const recorded = new Map<string, number>();
  const outcomes = new Map<string, number>();
  const reader = kafka.consumer({ groupId: `${run}-reader`, maxWaitTimeInMs: 100 });
  await reader.connect();
  await reader.subscribe({ topic: topicName('sendRecorded', stack.prefix), fromBeginning: true });
  await reader.run({
    eachBatch: async ({ batch }) => {
      for (const message of batch.messages) {
        if (!message.value) continue;
        const event = eventCodec.decode(message.value) as SendRecorded;
        if (!recorded.has(event.sendId)) {
          recorded.set(event.sendId, Number(message.timestamp));
          outcomes.set(event.outcome, (outcomes.get(event.outcome) ?? 0) + 1);
        }
      }
    },
  });

  const distinct = new Set(requests.map((r) => r.sendId)).size;
  const sampler = new UsageSampler(pids);
  let publishedAt = new Map<string, number>();
  const producer = new EventProducer(kafka);
  const topic = topicName('outreachRequested', stack.prefix);
  const started = Date.now();
  let kills = 0;
  try {
    // The kills run while the requests are still arriving.
    const feeding = feed(
      requests,
      (r) => r.sendId,
      (chunk) => producer.publish(chunk.map((r) => ({ topic, event: r.event }))),
      options.pace,
    );
    for (let k = 1; k <= (options.kills ?? 0); k++) {
      await until(
        `kill ${k}`,
        () => recorded.size >= (distinct * k) / 4,
        () => `${recorded.size}/${distinct}`,
        600_000,
        10, // kill within milliseconds of the mark, while work is in flight
      );
      await stack.stop('sender', 'SIGKILL');
      await stack.start('sender');
      kills++;
    }
    publishedAt = await feeding;
    await until(
      `${distinct} sends recorded`,
      () => recorded.size >= distinct,
      () => `${recorded.size}/${distinct} recorded, ${((Date.now() - started) / 1000).toFixed(0)} s`,
      Math.max(300_000, distinct * 20),
    );
  } finally {
    await producer.disconnect();
    await reader.disconnect();
  }
  const usage = sampler.stop();
  await stack.stopAll();
  const last = maxOf(recorded.values());
  const seconds = (last - started) / 1000;
  const latencies = [...recorded].map(([sendId, at]) => at - (publishedAt.get(sendId) ?? at));
  const deliveries = readDeliveryLog(deliveryLog);
  await stack.dropData(services);
  return {
    system: 'outreach (ours)',
    note: `outcomes: ${[...outcomes].map(([k, v]) => `${k} ${v}`).join(', ')}`,
    requests: requests.length,
    distinct,
    sendsPerSecond: Math.round(distinct / seconds),
    seconds: Math.round(seconds * 10) / 10,
    latencyMs: latencyOf(latencies),
    delivered: deliveries.size,
    duplicates: duplicateDeliveries(deliveries),
    usage,
    kills,
  };
}

/** A stack of service processes for one bench run, with its topics created. */
async function benchStack(
  run: string,
  infra: { kafkaBrokers: string; databaseUrl: string },
  env?: (service: Service) => Record<string, string>,
): Promise<Stack> {
  const stack = new Stack({
    run,
    kafkaBrokers: infra.kafkaBrokers,
    databaseUrl: infra.databaseUrl,
    portBase: Number(args['port-base']),
    token: 'bench-token',
    smtpPort: 2525,
    ...(env ? { env } : {}),
  });
  await stack.createTopics();
  return stack;
}

// --------------------------------------------------------------------------------------- ceiling

async function ceiling(
  infra: { kafkaBrokers: string; databaseUrl: string; kafkaPid?: number },
  requests: readonly BenchRequest[],
): Promise<SystemResult> {
  const run = runId('ceil');
  const prefix = `${run}.`;
  const kafka = createKafka({ brokers: infra.kafkaBrokers.split(','), clientId: 'bench-ceiling' });
  const [input, middle, output] = ['in', 'mid', 'out'].map((t) => `${prefix}${t}`) as [string, string, string];
  const admin = kafka.admin();
  await admin.connect();
  await admin.createTopics({
    waitForLeaders: true,
    topics: [input, middle, output].map((topic) => ({ topic, numPartitions: 12, replicationFactor: -1 })),
  });
  await admin.disconnect();
  const schema = `${run}_ceiling`;
  const client = new pg.Client({ connectionString: infra.databaseUrl });
  await client.connect();
  await client.query(`CREATE SCHEMA "${schema}"`);
  await client.end();
  const stage = (n: number, from: string, to: string) =>
    startProcess(
      join(root, 'scripts', 'bench', 'ceiling-worker.ts'),
      {
        PATH: process.env.PATH,
        KAFKA_BROKERS: infra.kafkaBrokers,
        DATABASE_URL: infra.databaseUrl,
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
    ...(infra.kafkaPid ? [{ name: 'kafka broker', pid: infra.kafkaPid }] : []),
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
  await dropRunData(infra, prefix, [schema]);
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

// ----------------------------------------------------------------------------------------- peers

interface Peer {
  readonly name: string;
  setUp(): Promise<void>;
  enqueue(chunk: readonly BenchRequest[]): Promise<void>;
  worker(deliveryLog: string, delayMs: number): RunningProcess;
  /** Nothing waiting, active or due for a retry. */
  idle(): Promise<boolean>;
  tearDown(): Promise<void>;
}

function bullmqPeer(): Peer {
  const queueName = runId('bullmq');
  const connection = new Redis(REDIS_URL, { maxRetriesPerRequest: null });
  const queue = new Queue(queueName, { connection });
  return {
    name: 'BullMQ 6.7 (Redis)',
    setUp: async () => undefined,
    async enqueue(chunk) {
      await queue.addBulk(
        chunk.map((r) => ({
          name: 'send',
          data: { to: r.event.email, subject: r.event.contents[0]?.subject, body: r.event.contents[0]?.body },
          // The dedupe key is the job id; failed attempts retry with backoff, as BullMQ's docs advise.
          opts: { jobId: r.jobKey, attempts: 3, backoff: { type: 'exponential', delay: 1_000 } },
        })),
      );
    },
    worker: (deliveryLog, delayMs) =>
      startProcess(
        join(root, 'scripts', 'bench', 'bullmq-worker.ts'),
        {
          PATH: process.env.PATH,
          REDIS_URL,
          QUEUE: queueName,
          DELIVERY_LOG: deliveryLog,
          CONCURRENCY: '64',
          DELAY_MS: String(delayMs),
        },
        [],
        tsNode,
      ),
    async idle() {
      const counts = await queue.getJobCounts('active', 'wait', 'delayed', 'prioritized');
      return Object.values(counts).every((n) => n === 0);
    },
    async tearDown() {
      await queue.obliterate({ force: true });
      await queue.close();
      connection.disconnect();
    },
  };
}

function pgbossPeer(databaseUrl: string): Peer {
  const queueName = 'bench';
  const schema = runId('pgboss');
  const boss = new PgBoss({ connectionString: databaseUrl, schema, max: 4 });
  const pool = new pg.Pool({ connectionString: databaseUrl, max: 1 });
  boss.on('error', () => undefined);
  return {
    name: 'pg-boss 10.4 (PostgreSQL)',
    async setUp() {
      await boss.start();
      await boss.createQueue(queueName);
    },
    async enqueue(chunk) {
      await boss.insert(
        chunk.map((r) => ({
          name: queueName,
          data: { key: r.jobKey, to: r.event.email },
          // The dedupe key; with singletonSeconds the unique index covers every state in that window.
          singletonKey: r.jobKey,
          singletonSeconds: 86_400,
          expireInSeconds: 15,
        })),
      );
    },
    worker: (deliveryLog, delayMs) =>
      startProcess(
        join(root, 'scripts', 'bench', 'pgboss-worker.ts'),
        {
          DELAY_MS: String(delayMs),
          PATH: process.env.PATH,
          DATABASE_URL: databaseUrl,
          SCHEMA: schema,
          QUEUE: queueName,
          DELIVERY_LOG: deliveryLog,
          WORKERS: '8',
          BATCH: '50',
        },
        [],
        tsNode,
      ),
    async idle() {
      const { rows } = await pool.query<{ n: number }>(
        `SELECT count(*)::int AS n FROM "${schema}".job WHERE name = $1 AND state IN ('created', 'retry', 'active')`,
        [queueName],
      );
      return rows[0]?.n === 0;
    },
    async tearDown() {
      await boss.stop({ graceful: false, wait: true });
      await pool.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
      await pool.end();
    },
  };
}

async function peerRun(
  peer: Peer,
  requests: readonly BenchRequest[],
  options: { kills?: number; pace?: number; providerDelayMs?: number } = {},
): Promise<SystemResult> {
  const delayMs = options.providerDelayMs ?? 0;
  const deliveryLog = join(work, `${runId('peer')}.deliveries`);
  await peer.setUp();
  const workers: RunningProcess[] = [peer.worker(deliveryLog, delayMs), peer.worker(deliveryLog, delayMs)];
  const allWorkers = [...workers];
  await waitFor(() => workers.every((w) => w.stdoutLines.some((l) => l.includes('running'))), {
    timeoutMs: 60_000,
    description: `${peer.name} workers to start`,
  });
  const sampler = new UsageSampler(() => [
    ...allWorkers.map((w) => ({ name: 'workers', pid: w.child.pid ?? 0 })),
    ...(peer.name.startsWith('BullMQ') ? redisPids() : postgresPids()).map((pid) => ({
      name: peer.name.startsWith('BullMQ') ? 'redis' : 'postgres (all backends)',
      pid,
    })),
  ]);
  const distinct = new Set(requests.map((r) => r.jobKey)).size;
  const started = Date.now();
  // The kills run while the requests are still arriving.
  const feeding = feed(
    requests,
    (r) => r.jobKey,
    (chunk) => peer.enqueue(chunk),
    options.pace,
  );
  let deliveries = new Map<string, number[]>();
  const refresh = () => {
    deliveries = readDeliveryLog(deliveryLog);
    return deliveries.size;
  };
  let kills = 0;
  for (let k = 1; k <= (options.kills ?? 0); k++) {
    await until(
      `${peer.name} kill ${k}`,
      () => refresh() >= (distinct * k) / 4,
      () => `${deliveries.size}/${distinct}`,
      600_000,
      10, // kill within milliseconds of the mark, while work is in flight
    );
    const victim = workers.shift() as RunningProcess;
    await victim.stop('SIGKILL');
    const replacement = peer.worker(deliveryLog, delayMs);
    workers.push(replacement);
    allWorkers.push(replacement);
    kills++;
  }
  const enqueuedAt = await feeding;
  let stable = 0;
  await until(
    `${peer.name}: every job delivered and nothing left to retry`,
    async () => {
      const all = refresh() >= distinct;
      stable = all && (await peer.idle()) ? stable + 1 : 0;
      return stable >= 3;
    },
    () => `${deliveries.size}/${distinct} delivered`,
    Math.max(300_000, distinct * 20),
  );
  const usage = sampler.stop();
  await Promise.all(workers.map((w) => w.stop('SIGTERM').catch(() => w.stop('SIGKILL'))));
  await peer.tearDown();
  refresh();
  const firstDelivery = [...deliveries].map(([key, times]) => [key, -maxOf(times.map((t) => -t))] as const);
  const seconds = (maxOf(firstDelivery.map(([, t]) => t)) - started) / 1000;
  return {
    system: peer.name,
    requests: requests.length,
    distinct,
    sendsPerSecond: Math.round(distinct / seconds),
    seconds: Math.round(seconds * 10) / 10,
    latencyMs: latencyOf(firstDelivery.map(([key, t]) => t - (enqueuedAt.get(key) ?? t))),
    delivered: deliveries.size,
    duplicates: duplicateDeliveries(deliveries),
    usage,
    kills,
  };
}

function redisPids(): number[] {
  return readdirSync('/proc')
    .filter((e) => /^\d+$/.test(e))
    .filter((e) => {
      try {
        return readFileSync(`/proc/${e}/comm`, 'utf8').trim().startsWith('redis-server');
      } catch {
        return false;
      }
    })
    .map(Number);
}

// ---------------------------------------------------------------------------- scaling: endpoints

async function checkEndpoint(infra: { kafkaBrokers: string; databaseUrl: string }, rows: number) {
  const stack = await benchStack(runId('check'), infra, () => ({ MAIL_PROVIDER: 'null' }));
  await stack.start('sender');
  const client = new pg.Client({ connectionString: infra.databaseUrl });
  await client.connect();
  const seeded = Date.now();
  await client.query(
    `INSERT INTO "${stack.schema('sender')}".sends
       (send_id, campaign_id, candidate_id, candidate_key, email, email_norm, email_hash, step, subject, body,
        request_id, correlation_id, status, sent_at)
     SELECT md5(i::text)::uuid, 'bench', 'cand-' || i, 'cand-' || i, 'cand-' || i || '@example.com',
            'cand-' || i || '@example.com', md5('cand-' || i), 'intro', 's', 'b', 'r-' || i, 'c-' || i, 'sent', now()
     FROM generate_series(1, $1::int) AS i`,
    [rows],
  );
  await client.query(`ANALYZE "${stack.schema('sender')}".sends`);
  await client.end();
  say(`  seeded ${rows} sent rows in ${((Date.now() - seeded) / 1000).toFixed(1)} s`);
  let i = 0;
  const result = await autocannon({
    url: stack.url('sender', ''),
    connections: 32,
    overallRate: 1_000,
    duration: 20,
    requests: [
      {
        method: 'GET',
        // The check reveals send details: it needs the read scope.
        headers: { authorization: 'Bearer bench-token' },
        setupRequest: (request: autocannon.Request) => ({
          ...request,
          path: `/v1/sends/check?campaignId=bench&candidateId=cand-${(i++ * 7919) % (rows * 2)}&step=intro&email=cand-${i}@example.com`,
        }),
      },
    ],
  });
  await stack.stopAll();
  await stack.dropData(['sender']);
  return {
    rows,
    targetRate: 1_000,
    achievedRate: Math.round(result.requests.average),
    p50: result.latency.p50,
    p99: result.latency.p99,
    max: result.latency.max,
    errors: result.errors + result.non2xx,
  };
}

async function experimentAssignments(infra: { kafkaBrokers: string; databaseUrl: string }) {
  const stack = await benchStack(runId('exp'), infra);
  await stack.start('experiment');
  await stack.json('experiment', '/v1/experiments', {
    method: 'POST',
    body: {
      experimentId: 'bench',
      variants: [
        { name: 'a', weight: 1 },
        { name: 'b', weight: 1 },
      ],
    },
  });
  const auth = { authorization: 'Bearer bench-token' };
  const headers = { ...auth, 'content-type': 'application/json' };
  let single = 0;
  const singleRun = await autocannon({
    url: stack.url('experiment', ''),
    connections: 16,
    duration: 15,
    requests: [
      {
        method: 'PUT',
        headers: auth,
        setupRequest: (request: autocannon.Request) => ({
          ...request,
          path: `/v1/experiments/bench/assignments/single-${single++}`,
        }),
      },
    ],
  });
  let batch = 0;
  const BATCH = 500;
  const batchRun = await autocannon({
    url: stack.url('experiment', ''),
    connections: 4,
    duration: 15,
    requests: [
      {
        method: 'POST',
        path: '/v1/experiments/bench/assignments',
        headers,
        setupRequest: (request: autocannon.Request) => {
          const start = batch++ * BATCH;
          return {
            ...request,
            body: JSON.stringify({ candidateIds: Array.from({ length: BATCH }, (_, k) => `batch-${start + k}`) }),
          };
        },
      },
    ],
  });
  await stack.stopAll();
  await stack.dropData(['experiment']);
  return {
    singlePerSecond: Math.round(singleRun.requests.average),
    singleP99Ms: singleRun.latency.p99,
    batchSize: BATCH,
    batchedPerSecond: Math.round(batchRun.requests.average * BATCH),
    batchP99Ms: batchRun.latency.p99,
    errors: singleRun.errors + singleRun.non2xx + batchRun.errors + batchRun.non2xx,
  };
}

async function livenessSweep(databaseUrl: string, open: number) {
  const schema = runId('sweep');
  await migrate({
    databaseUrl,
    schema,
    dir: join(root, 'services', 'liveness', 'migrations'),
    outbox: true,
    logger: { info: () => undefined, debug: () => undefined },
  });
  const pool = createPool({ connectionString: databaseUrl, applicationName: 'bench-sweep', schema, max: 2 });
  const due = 100;
  const seeded = Date.now();
  // Open conversations owing a reply; `due` of them past their deadline, the rest far from it.
  await pool.query(
    `INSERT INTO conversations (conversation_id, campaign_id, candidate_key, status, obligation_since, obligation_kind,
       last_event_at, last_event_type, obligation_deadline, stall_deadline)
     SELECT 'conv-' || i, 'bench', 'cand-' || i, 'open', now(), 'inbound', now(), 'MessageReceived',
            CASE WHEN i <= $2 THEN now() - interval '1 minute' ELSE now() + interval '1 day' END,
            CASE WHEN i <= $2 THEN now() - interval '1 minute' ELSE now() + interval '1 day' END
     FROM generate_series(1, $1::int) AS i`,
    [open, due],
  );
  await pool.query('ANALYZE conversations');
  const seedSeconds = (Date.now() - seeded) / 1000;
  const repository = new ConversationsRepository(pool, 'bench.conversation.liveness.v1', {
    inboundMs: 60_000,
    outboundMs: 60_000,
    overdueMs: 60_000,
  });
  let t = performance.now();
  const flagged = (await repository.sweep(1_000)).length;
  const withDueMs = performance.now() - t;
  const idle: number[] = [];
  for (let k = 0; k < 20; k++) {
    t = performance.now();
    await repository.sweep(1_000);
    idle.push(performance.now() - t);
  }
  idle.sort((a, b) => a - b);
  await pool.query(`DROP SCHEMA "${schema}" CASCADE`);
  await pool.end();
  return {
    open,
    seedSeconds: Math.round(seedSeconds * 10) / 10,
    flagged,
    sweepWithDueMs: Math.round(withDueMs * 10) / 10,
    idleSweepMedianMs: Math.round((idle[10] ?? 0) * 100) / 100,
  };
}

// ------------------------------------------------------------------------------------- profiling

interface ProfileNode {
  id: number;
  callFrame: { functionName: string; url: string };
  hitCount?: number;
}

/** Self time of a --cpu-prof profile, summed by where the code lives. */
function summarizeProfile(dir: string): Array<{ category: string; share: number }> {
  const totals = new Map<string, number>();
  let all = 0;
  for (const file of existsSync(dir) ? readdirSync(dir).filter((f) => f.endsWith('.cpuprofile')) : []) {
    const profile = JSON.parse(readFileSync(join(dir, file), 'utf8')) as { nodes: ProfileNode[] };
    for (const node of profile.nodes) {
      const hits = node.hitCount ?? 0;
      if (hits === 0) continue;
      const category = categorize(node.callFrame);
      totals.set(category, (totals.get(category) ?? 0) + hits);
      all += hits;
    }
  }
  return [...totals]
    .map(([category, hits]) => ({ category, share: Math.round((hits / Math.max(1, all)) * 1000) / 10 }))
    .sort((a, b) => b.share - a.share);
}

function categorize(frame: { functionName: string; url: string }): string {
  const { url, functionName } = frame;
  if (functionName === '(idle)') return 'idle (waiting on I/O)';
  if (functionName === '(garbage collector)') return 'garbage collection';
  if (functionName === '(program)') return 'V8/native (program)';
  if (['writev', 'writeBuffer', 'writeString', 'writeUtf8String', 'writeLatin1String'].includes(functionName))
    return 'socket writes (system calls)';
  const pkg = /node_modules\/((?:@[^/]+\/)?[^/]+)/.exec(url)?.[1];
  if (pkg === 'kafkajs') return 'kafkajs (Kafka protocol, batching)';
  if (pkg === 'pg' || pkg === 'pg-protocol' || pkg === 'pg-pool' || pkg === 'pg-types') return 'pg (Postgres protocol)';
  if (pkg === 'avsc') return 'avsc (Avro serialization)';
  if (pkg === 'pino' || pkg === 'thread-stream' || pkg === 'sonic-boom') return 'pino (logging)';
  if (pkg?.startsWith('fastify') || pkg?.startsWith('@fastify') || pkg === 'find-my-way' || pkg === 'light-my-request')
    return 'fastify';
  if (pkg === 'prom-client') return 'prom-client (metrics)';
  if (pkg) return 'other packages';
  if (url.includes('/packages/shared/')) return 'our shared layer (codec, consumer, outbox)';
  if (url.includes('/services/')) return 'our service code';
  if (url.startsWith('node:') || url === '') return 'Node core (streams, net, buffers, crypto)';
  return 'other';
}

// ------------------------------------------------------------------------------------------- main

function usageText(usage: readonly ProcessUsage[]): string {
  return usage.map((u) => `${u.name} ${u.cpuSeconds} s / ${u.peakRssMiB} MiB`).join('; ');
}

async function main(): Promise<void> {
  rmSync(work, { recursive: true, force: true });
  mkdirSync(work, { recursive: true });
  const state = await up();
  const infra = {
    kafkaBrokers: state.kafkaBrokers,
    databaseUrl: state.databaseUrl,
    ...(state.kafka.pid ? { kafkaPid: state.kafka.pid } : {}),
  };
  const n = Number(args.requests);
  const machine = await describeMachine(
    state.databaseUrl,
    `npm run bench${process.argv.slice(2).length ? ` -- ${process.argv.slice(2).join(' ')}` : ''}`,
  );
  const requests = requestSet(n);
  say(`${requests.length} requests (${n} distinct, ${requests.length - n} repeats) for every system`);
  const report: Record<string, unknown> = { machine, requests: requests.length, distinct: n };
  const main: SystemResult[] = [];
  const write = () => {
    const dir = join(root, 'reports', 'bench');
    mkdirSync(dir, { recursive: true });
    writeFileSync(join(dir, 'report.json'), `${JSON.stringify(report, null, 2)}\n`);
    writeFileSync(join(dir, 'report.md'), markdown(report));
  };
  const step = async <T>(name: string, section: string, fn: () => Promise<T>): Promise<T | undefined> => {
    if (!sections.has(section)) return undefined;
    say(`${name} ...`);
    const started = Date.now();
    const result = await fn();
    say(`${name} done in ${((Date.now() - started) / 1000).toFixed(0)} s: ${JSON.stringify(result).slice(0, 300)}`);
    return result;
  };

  const pipeline = await step('our pipeline', 'pipeline', () => ours(infra, requests));
  if (pipeline) main.push(pipeline);
  const ceil = await step('ceiling', 'ceiling', () => ceiling(infra, requests));
  if (ceil) main.push(ceil);
  const bull = await step('BullMQ', 'bullmq', () => peerRun(bullmqPeer(), requests));
  if (bull) main.push(bull);
  const boss = await step('pg-boss', 'pgboss', () => peerRun(pgbossPeer(state.databaseUrl), requests));
  if (boss) main.push(boss);
  report.main = main;
  if (pipeline) report.analysis = analysis(pipeline, ceil);
  write();

  const steadyRequests = requestSet(Number(args['steady-requests']));
  const pace = Number(args['steady-rate']);
  const steady: SystemResult[] = [];
  report.steady = steady;
  for (const [name, run] of [
    [`our pipeline at ${pace} req/s`, () => ours(infra, steadyRequests, { pace })],
    [`BullMQ at ${pace} req/s`, () => peerRun(bullmqPeer(), steadyRequests, { pace })],
    [`pg-boss at ${pace} req/s`, () => peerRun(pgbossPeer(state.databaseUrl), steadyRequests, { pace })],
  ] as const) {
    const result = await step(name, 'steady', run);
    if (result) steady.push(result);
    write();
  }

  const faultRequests = requestSet(Number(args['fault-requests']));
  const providerDelayMs = 50;
  const faults: SystemResult[] = [];
  report.faults = faults;
  for (const [name, run] of [
    // Paced, so that every system is mid-run at each kill.
    // Paced, and with a provider that answers 50 ms after accepting (as an SMTP server does), so that
    // every system has sends in flight at each kill.
    ['our pipeline, sender SIGKILL ×3', () => ours(infra, faultRequests, { kills: 3, pace, providerDelayMs })],
    ['BullMQ, worker SIGKILL ×3', () => peerRun(bullmqPeer(), faultRequests, { kills: 3, pace, providerDelayMs })],
    [
      'pg-boss, worker SIGKILL ×3',
      () => peerRun(pgbossPeer(state.databaseUrl), faultRequests, { kills: 3, pace, providerDelayMs }),
    ],
  ] as const) {
    const result = await step(name, 'faults', run);
    if (result) faults.push(result);
    write();
  }

  const scaling: SystemResult[] = [];
  report.scaling = scaling;
  for (const size of args.scaling.split(',').map(Number)) {
    const result =
      size === n && pipeline
        ? pipeline
        : await step(`our pipeline at ${size}`, 'scaling', () => ours(infra, requestSet(size)));
    if (result) scaling.push(result);
    write();
  }
  report.check = await step('check endpoint at 1k req/s', 'check', () =>
    checkEndpoint(infra, Number(args['check-rows'])),
  );
  write();
  report.experiment = await step('experiment assignments', 'experiment', () => experimentAssignments(infra));
  write();
  const sweeps = [];
  for (const open of args['sweep-sizes'].split(',').map(Number)) {
    const result = await step(`liveness sweep over ${open} open conversations`, 'sweep', () =>
      livenessSweep(state.databaseUrl, open),
    );
    if (result) sweeps.push(result);
  }
  report.sweep = sweeps;
  write();
  const profileDir = join(work, 'profiles');
  const profiled = await step('profiled pipeline run', 'profile', () =>
    ours(infra, requestSet(Number(args['profile-requests'])), { profileDir }),
  );
  if (profiled) {
    report.profile = {
      requests: profiled.requests,
      sendsPerSecond: profiled.sendsPerSecond,
      sender: summarizeProfile(join(profileDir, 'sender')),
      planner: summarizeProfile(join(profileDir, 'planner')),
    };
  }
  write();
  process.stdout.write(`\n${markdown(report)}\n`);
  say('reports/bench/report.md and report.json written');
}

/** What bounds our pipeline: CPU per send, by process, against the machine's cores. */
function analysis(ours: SystemResult, ceil?: SystemResult): string {
  const perSend = ours.usage
    .map((u) => ({ name: u.name, micros: (u.cpuSeconds / ours.distinct) * 1e6 }))
    .sort((a, b) => b.micros - a.micros);
  const total = perSend.reduce((n, p) => n + p.micros, 0);
  const cores = cpus().length;
  const ceilTotal = ceil ? (ceil.usage.reduce((n, u) => n + u.cpuSeconds, 0) / ceil.distinct) * 1e6 : undefined;
  return [
    `**What is in the way.** Our pipeline spends ${Math.round(total)} µs of CPU per send across its processes ` +
      `(${perSend.map((p) => `${p.name} ${Math.round(p.micros)} µs`).join(', ')}), not counting the driver. ` +
      `On ${cores} cores that alone bounds it at about ${Math.round((cores * 1e6) / total)} sends/s` +
      (ceilTotal ? `; the ceiling spends ${Math.round(ceilTotal)} µs per record.` : '.') +
      ` The largest share is ${perSend[0]?.name ?? 'n/a'}: each send is several durable state transitions ` +
      '(planner outbox insert and relay; sender claim, fence, record with its outbox row and relay; the liveness ' +
      'and experiment projections of SendRecorded), each a PostgreSQL statement with WAL, where the ceiling has one upsert per hop.',
  ].join('');
}

function cpuPerSend(r: SystemResult): string {
  return r.usage
    .filter((u) => u.cpuSeconds > 0)
    .map((u) => `${u.name} ${Math.round((u.cpuSeconds / r.distinct) * 1e6)}`)
    .join(', ');
}

function markdown(report: Record<string, unknown>): string {
  const main = (report.main as SystemResult[] | undefined) ?? [];
  const steady = (report.steady as SystemResult[] | undefined) ?? [];
  const faults = (report.faults as SystemResult[] | undefined) ?? [];
  const scaling = (report.scaling as SystemResult[] | undefined) ?? [];
  const machine = report.machine as Parameters<typeof machineMarkdown>[0];
  const row = (r: SystemResult) =>
    `| ${r.system}${r.note ? ` (${r.note})` : ''} | ${r.requests} (${r.distinct} distinct) | ${r.sendsPerSecond} | ${r.seconds} | ${r.latencyMs.p50} / ${r.latencyMs.p95} / ${r.latencyMs.p99} | ${r.delivered} | ${r.duplicates} | ${usageText(r.usage)} |`;
  const header =
    '| system | requests | sends/s | seconds | latency p50 / p95 / p99 (ms) | delivered | duplicate deliveries | CPU seconds / peak RSS per process |\n|---|---|---|---|---|---|---|---|';
  const ours = main.find((r) => r.system.startsWith('outreach'));
  const ceil = main.find((r) => r.system.startsWith('ceiling'));
  const peers = main.filter((r) => !r.system.startsWith('outreach') && !r.system.startsWith('ceiling'));
  const fastest = [...peers].sort((a, b) => b.sendsPerSecond - a.sendsPerSecond)[0];
  const ratio = (a?: SystemResult, b?: SystemResult) =>
    a && b ? (a.sendsPerSecond / b.sendsPerSecond).toFixed(2) : 'n/a';
  const lines = [
    '# Benchmarks',
    '',
    machineMarkdown(machine),
    '- Everything runs on this one machine at once: the services or workers, Kafka, PostgreSQL, Redis and the',
    '  benchmark driver itself (which publishes the requests and reads the results), so they share its 2 cores.',
    '',
    '## Targets and where we stand',
    '',
    '| target | result |',
    '|---|---|',
    `| ≥ 5,000 end-to-end sends/s | ${ours?.sendsPerSecond ?? 'n/a'} sends/s (${ours ? `${(ours.sendsPerSecond / 5000).toFixed(2)}× the target` : ''}) |`,
    `| ≥ 0.6× the ceiling | ${ratio(ours, ceil)}× (ceiling ${ceil?.sendsPerSecond ?? 'n/a'} sends/s) |`,
    `| ≥ the faster peer (${fastest?.system ?? 'n/a'}) | ${ratio(ours, fastest)}× (${peers.map((p) => `${p.system} ${p.sendsPerSecond}/s, ours ${ratio(ours, p)}×`).join('; ')}) |`,
    `| 0 duplicates where a peer has more | ${faults.map((f) => `${f.system}: ${f.duplicates}`).join('; ') || 'n/a'} |`,
    '',
    String(report.analysis ?? ''),
    '',
    '## Side by side: throughput (every request published at once), same request set (10% repeats), null provider',
    '',
    'Latency here is queueing: every request is handed over at the start, so p50 is about half the drain time.',
    '',
    header,
    ...main.map(row),
    '',
    'CPU microseconds per send, by process: ' + main.map((r) => `**${r.system}**: ${cpuPerSend(r)}`).join('; ') + '.',
    '',
    `## Latency at a steady ${args['steady-rate']} requests/s`,
    '',
    header,
    ...steady.map(row),
    '',
    `## Worker SIGKILL ×3 mid-run, at ${args['steady-rate']} requests/s, provider answering 50 ms after accepting (sender for ours; one of two workers for the peers; restarted each time)`,
    '',
    'A delivery the provider accepted but whose answer was lost to the kill: the peers run the job again once their',
    'lock (BullMQ, 30 s) or expiry (pg-boss, 15 s) lapses, and the candidate gets a second email; ours records the send',
    'as `ambiguous` and never repeats it (an operator resolves it, docs/operations.md section 5). Our run is longer: a',
    "killed sender's partitions wait for its Kafka session (30 s) to time out, and its in-flight sends for their lease.",
    '',
    header,
    ...faults.map(row),
    '',
    '## Pipeline scaling',
    '',
    header,
    ...scaling.map(row),
    '',
  ];
  const check = report.check as Awaited<ReturnType<typeof checkEndpoint>> | undefined;
  if (check)
    lines.push(
      '## Check before compose (`GET /v1/sends/check`, autocannon)',
      '',
      `${check.rows.toLocaleString('en')} rows in the sent log; target ${check.targetRate} req/s, achieved ${check.achievedRate} req/s; latency p50 ${check.p50} ms, p99 ${check.p99} ms, max ${check.max} ms; ${check.errors} errors.`,
      '',
    );
  const experiment = report.experiment as Awaited<ReturnType<typeof experimentAssignments>> | undefined;
  if (experiment)
    lines.push(
      '## Experiment assignment (HTTP, autocannon)',
      '',
      `Single (\`PUT /v1/experiments/:id/assignments/:candidateId\`, new candidates): ${experiment.singlePerSecond} assignments/s, p99 ${experiment.singleP99Ms} ms. Batched (\`POST /v1/experiments/:id/assignments\`, ${experiment.batchSize} per call): ${experiment.batchedPerSecond} assignments/s, p99 ${experiment.batchP99Ms} ms per call. ${experiment.errors} errors.`,
      '',
    );
  const sweep = report.sweep as Array<Awaited<ReturnType<typeof livenessSweep>>> | undefined;
  if (sweep?.length)
    lines.push(
      '## Liveness sweep',
      '',
      '| open conversations | seeded in (s) | flagged | sweep with 100 due (ms) | idle sweep, median of 20 (ms) |',
      '|---|---|---|---|---|',
      ...sweep.map(
        (w) => `| ${w.open} | ${w.seedSeconds} | ${w.flagged} | ${w.sweepWithDueMs} | ${w.idleSweepMedianMs} |`,
      ),
      '',
    );
  const profile = report.profile as
    | {
        requests: number;
        sendsPerSecond: number;
        sender: Array<{ category: string; share: number }>;
        planner: Array<{ category: string; share: number }>;
      }
    | undefined;
  if (profile)
    lines.push(
      `## Profile (\`--cpu-prof\` of planner and sender, ${profile.requests} requests, ${profile.sendsPerSecond} sends/s while profiled)`,
      '',
      '| where the self time goes | sender % | planner % |',
      '|---|---|---|',
      ...[...new Set([...profile.sender, ...profile.planner].map((c) => c.category))].map(
        (category) =>
          `| ${category} | ${profile.sender.find((c) => c.category === category)?.share ?? 0} | ${profile.planner.find((c) => c.category === category)?.share ?? 0} |`,
      ),
      '',
    );
  return lines.join('\n');
}

main().then(
  () => process.exit(0),
  (error: unknown) => {
    process.stderr.write(`[bench] ${error instanceof Error ? (error.stack ?? error.message) : String(error)}\n`);
    process.exit(1);
  },
);
