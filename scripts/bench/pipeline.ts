/**
 * Our pipeline: the four services as processes and the sender's null provider, the requests published
 * to `outreach.requested.v1`. Sends/s run from the first request to the last SendRecorded; latency is
 * request → SendRecorded (the broker's append time). The throughput, steady-rate, fault, scaling and
 * profile sections all run this, with different options.
 */
import { join } from 'node:path';
import { createKafka, EventProducer, topicName } from '@outreach/shared';
import { eventCodec, type SendRecorded, type SendRequested } from '@outreach/contracts';
import { services, type Service } from '../lib/stack.js';
import {
  duplicateDeliveries,
  latencyOf,
  maxOf,
  postgresPids,
  readDeliveryLog,
  UsageSampler,
  type BenchRequest,
} from './common.js';
import { benchStack, bindBenchCodec, feed, runId, until, type BenchEnv } from './harness.js';
import type { DatabaseCost, Hop, SystemResult } from './report.js';
import pg from 'pg';
import { waitFor } from '@outreach/testkit';

export interface PipelineOptions {
  /** Sender SIGKILLs, each at the next quarter of the sends recorded, the sender restarted each time. */
  readonly kills?: number;
  /** Runs the four services with `--cpu-prof`, writing under `<profileDir>/<service>`. */
  readonly profileDir?: string;
  /** Requests per second; all at once when absent. */
  readonly pace?: number;
  /** How long the null provider takes to answer after accepting a message. */
  readonly providerDelayMs?: number;
}

export async function pipeline(
  env: BenchEnv,
  requests: readonly BenchRequest[],
  options: PipelineOptions = {},
): Promise<SystemResult> {
  const run = runId('ours');
  const deliveryLog = join(env.work, `${run}.deliveries`);
  const kafka = createKafka({ brokers: env.kafkaBrokers.split(','), clientId: 'bench' });
  const stack = await benchStack(env, run, (service) => ({
    ...env.serviceEnv,
    ...(service === 'sender'
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
        : {}),
  }));
  const nodeArgs = (service: string) => [
    ...(env.serviceNodeArgs ?? []),
    ...(options.profileDir ? [`--cpu-prof`, `--cpu-prof-dir=${join(options.profileDir, service)}`] : []),
  ];
  for (const service of ['experiment', 'liveness', 'sender', 'planner'] as const) {
    await stack.start(service, { nodeArgs: nodeArgs(service) });
  }
  await bindBenchCodec(stack);
  const pids = () => [
    ...[...stack.processes].map(([key, p]) => ({ name: key.replace(/#\d+$/, ''), pid: p.child.pid ?? 0 })),
    ...(env.kafkaPid ? [{ name: 'kafka broker', pid: env.kafkaPid }] : []),
    ...postgresPids().map((pid) => ({ name: 'postgres (all backends)', pid })),
  ];

  // SendRecorded, by sendId, with its Kafka timestamp (the broker's append time).
  const recorded = new Map<string, number>();
  const outcomes = new Map<string, number>();
  // SendRecorded event ids → sendId: the liveness projection's rows name their source event.
  const recordedEventIds = new Map<string, string>();
  const reader = kafka.consumer({ groupId: `${run}-reader`, maxWaitTimeInMs: 100 });
  await reader.connect();
  await reader.subscribe({ topic: topicName('sendRecorded', stack.prefix), fromBeginning: true });
  await reader.run({
    eachBatch: async ({ batch }) => {
      for (const message of batch.messages) {
        if (!message.value) continue;
        const event = eventCodec.decode(message.value) as SendRecorded;
        recordedEventIds.set(event.eventId, event.sendId);
        if (!recorded.has(event.sendId)) {
          recorded.set(event.sendId, Number(message.timestamp));
          outcomes.set(event.outcome, (outcomes.get(event.outcome) ?? 0) + 1);
        }
      }
    },
  });

  // SendRequested, by sendId, with its Kafka timestamp: the per-hop table's "on the log" time.
  const requestedOnLog = new Map<string, number>();
  const requestedReader = kafka.consumer({ groupId: `${run}-requested-reader`, maxWaitTimeInMs: 100 });
  await requestedReader.connect();
  await requestedReader.subscribe({ topic: topicName('sendRequested', stack.prefix), fromBeginning: true });
  await requestedReader.run({
    eachBatch: async ({ batch }) => {
      for (const message of batch.messages) {
        if (!message.value) continue;
        const event = eventCodec.decode(message.value) as SendRequested;
        if (!requestedOnLog.has(event.sendId)) requestedOnLog.set(event.sendId, Number(message.timestamp));
      }
    },
  });

  const distinct = new Set(requests.map((r) => r.sendId)).size;
  const statements = async () =>
    Object.fromEntries(
      await Promise.all(
        ['planner', 'sender', 'experiment', 'liveness'].map(
          async (service) => [service, await statementsOf(stack.url(service as Service, '/metrics'))] as const,
        ),
      ),
    );
  const statementsBefore = await statements();
  const serverBefore = await serverCounters(env.databaseUrl);
  const sampler = new UsageSampler(pids);
  let publishedAt = new Map<string, number>();
  const producer = new EventProducer(kafka);
  const topic = topicName('outreachRequested', stack.prefix);
  const started = Date.now();
  let kills = 0;
  /** Per kill: ms from the SIGKILL to the first claim after it (the partitions working again), or -1. */
  const resumedAfterKillMs: number[] = [];
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
      const killedAt = Date.now();
      await stack.stop('sender', 'SIGKILL');
      await stack.start('sender', { nodeArgs: nodeArgs('sender') });
      kills++;
      resumedAfterKillMs.push(await firstClaimAfter(env.databaseUrl, `"${run}_sender"`, killedAt));
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
    await requestedReader.disconnect();
  }
  // The projections (liveness, experiment) may still be working through the last SendRecorded events:
  // the statements are read once the services are down to their idle rate for a second. Idle is not
  // zero: the relays poll, the sweeps run, and each /metrics read runs the outbox gauges' query (so
  // waiting for no statement at all waited out the whole minute, in every pipeline run).
  let database: DatabaseCost | undefined;
  if (!options.kills) {
    const total = (counts: Record<string, number>) => Object.values(counts).reduce((a, b) => a + b, 0);
    let last = await statements();
    await waitFor(
      async () => {
        const now = await statements();
        const settled = total(now) - total(last) <= IDLE_STATEMENTS_PER_SECOND;
        last = now;
        return settled;
      },
      { timeoutMs: 60_000, intervalMs: 1_000, description: 'the services to finish their statements' },
    ).catch(() => undefined);
    const after = last;
    const server = await serverCounters(env.databaseUrl);
    database = {
      statementsPerSend: Object.fromEntries(
        Object.entries(after).map(([service, n]) => [
          service,
          round2((n - (statementsBefore[service] ?? 0)) / distinct),
        ]),
      ),
      transactionsPerSend: round2((server.commits - serverBefore.commits) / distinct),
      walBytesPerSend: Math.round((server.walBytes - serverBefore.walBytes) / distinct),
    };
  }
  const usage = sampler.stop();
  await stack.stopAll();
  const last = maxOf(recorded.values());
  const seconds = (last - started) / 1000;
  const latencies = [...recorded].map(([sendId, at]) => at - (publishedAt.get(sendId) ?? at));
  const deliveries = readDeliveryLog(deliveryLog);
  if (database) database = { ...database, rowsPerSend: await rowWrites(env.databaseUrl, run, distinct) };
  const hops = options.kills
    ? undefined
    : await hopLatencies(env.databaseUrl, run, {
        published: publishedAt,
        requestedOnLog,
        recordedOnLog: recorded,
        recordedEventIds,
      });
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
    ...(kills ? { resumedAfterKillMs } : {}),
    ...(database ? { database } : {}),
    ...(hops ? { hops } : {}),
  };
}

/**
 * Where a send's time goes, hop by hop (p50/p95/p99 in ms over every send that has both ends):
 * timestamps from the driver (request published), the services' rows (`now()` of the transaction
 * that wrote them: planned, claimed, fenced, recorded, projected) and the broker (each record's
 * timestamp, set by the producing client when it sent the batch). One clock: everything runs on
 * this machine.
 */
async function hopLatencies(
  databaseUrl: string,
  run: string,
  log: {
    published: ReadonlyMap<string, number>;
    requestedOnLog: ReadonlyMap<string, number>;
    recordedOnLog: ReadonlyMap<string, number>;
    recordedEventIds: ReadonlyMap<string, string>;
  },
): Promise<Hop[]> {
  const client = new pg.Client({ connectionString: databaseUrl });
  await client.connect();
  try {
    const ms = async (sql: string): Promise<Map<string, number>> => {
      const { rows } = await client.query<{ id: string; at: number }>(sql);
      return new Map(rows.map((r) => [r.id, Number(r.at)]));
    };
    const epoch = (column: string) => `(extract(epoch FROM ${column}) * 1000)::float8`;
    const schema = (service: string) => `"${run}_${service}"`;
    const planned = await ms(
      `SELECT send_id::text AS id, ${epoch('planned_at')} AS at FROM ${schema('planner')}.request_sends`,
    );
    const sends = await client.query<{ id: string; claimed: number; fenced: number; recorded: number }>(
      `SELECT send_id::text AS id, ${epoch('claimed_at')} AS claimed, ${epoch('attempt_started_at')} AS fenced,
              ${epoch('updated_at')} AS recorded
       FROM ${schema('sender')}.sends WHERE status = 'sent'`,
    );
    const claimed = new Map(sends.rows.map((r) => [r.id, Number(r.claimed)]));
    const fenced = new Map(sends.rows.map((r) => [r.id, Number(r.fenced)]));
    const recordedInSender = new Map(sends.rows.map((r) => [r.id, Number(r.recorded)]));
    const livenessProjected = new Map<string, number>();
    for (const [eventId, at] of await ms(
      `SELECT event_id::text AS id, ${epoch('projected_at')} AS at
       FROM ${schema('liveness')}.conversation_events WHERE event_type = 'SendRecorded'`,
    )) {
      const sendId = log.recordedEventIds.get(eventId);
      if (sendId !== undefined) livenessProjected.set(sendId, at);
    }
    const statusProjected = await ms(
      `SELECT send_id::text AS id, ${epoch('updated_at')} AS at FROM ${schema('planner')}.send_outcomes`,
    );
    const hop = (name: string, from: ReadonlyMap<string, number>, to: ReadonlyMap<string, number>): Hop => {
      const samples: number[] = [];
      for (const [id, start] of from) {
        const end = to.get(id);
        if (end !== undefined) samples.push(Math.max(0, end - start));
      }
      return { hop: name, ...latencyOf(samples) };
    };
    return [
      hop('request published → planner transaction', log.published, planned),
      hop('planner transaction → SendRequested on the log (outbox relay)', planned, log.requestedOnLog),
      hop('SendRequested on the log → sender claim', log.requestedOnLog, claimed),
      hop('sender claim → fence', claimed, fenced),
      hop('fence → provider answered and recorded', fenced, recordedInSender),
      hop('recorded → SendRecorded on the log (outbox relay)', recordedInSender, log.recordedOnLog),
      hop('SendRecorded on the log → liveness projection', log.recordedOnLog, livenessProjected),
      hop('SendRecorded on the log → planner request status', log.recordedOnLog, statusProjected),
      hop('end to end: request published → SendRecorded on the log', log.published, log.recordedOnLog),
    ];
  } finally {
    await client.end();
  }
}

const round2 = (n: number) => Math.round(n * 100) / 100;

/**
 * Milliseconds from `since` to the first send claimed after it: a claim is made only by a consumer
 * that holds the partition, so after a SIGKILL of the only sender this is the failover (the group
 * waiting out the dead member's session, the rebalance, the restarted process's first fetch). -1 if
 * none within a minute (every request was already claimed when the kill came).
 */
async function firstClaimAfter(databaseUrl: string, sendsSchema: string, since: number): Promise<number> {
  const client = new pg.Client({ connectionString: databaseUrl });
  await client.connect();
  try {
    let first: number | undefined;
    await waitFor(
      async () => {
        const { rows } = await client.query<{ at: number | null }>(
          `SELECT (extract(epoch FROM min(claimed_at)) * 1000)::float8 AS at FROM ${sendsSchema}.sends
           WHERE claimed_at > to_timestamp($1 / 1000.0)`,
          [since],
        );
        first = rows[0]?.at ?? undefined;
        return first !== undefined;
      },
      { timeoutMs: 60_000, intervalMs: 100, description: 'a claim after the kill' },
    ).catch(() => undefined);
    return first === undefined ? -1 : Math.round(first - since);
  } finally {
    await client.end();
  }
}

/** The four services' statements per second when they have nothing to do (relay polls, sweeps, gauges). */
const IDLE_STATEMENTS_PER_SECOND = 50;

/** A service's `outreach_pg_statements_total` from its /metrics. */
async function statementsOf(url: string): Promise<number> {
  const text = await (await fetch(url)).text();
  const line = text.split('\n').find((l) => l.startsWith('outreach_pg_statements_total'));
  return Number(line?.split(' ').at(-1) ?? 0);
}

/** Row writes per send in the run's schemas (`<run>_<service>`), from pg_stat_user_tables. */
async function rowWrites(
  databaseUrl: string,
  run: string,
  sends: number,
): Promise<NonNullable<DatabaseCost['rowsPerSend']>> {
  const client = new pg.Client({ connectionString: databaseUrl });
  await client.connect();
  try {
    // Statistics reach the view within a second of each backend's last transaction.
    await new Promise((resolve) => setTimeout(resolve, 1_500));
    const { rows } = await client.query<{ t: string; ins: string; upd: string; hot: string; del: string }>(
      `SELECT substr(schemaname, length($1) + 2) || '.' || relname AS t, n_tup_ins AS ins, n_tup_upd AS upd,
              n_tup_hot_upd AS hot, n_tup_del AS del
       FROM pg_stat_user_tables WHERE starts_with(schemaname, $1 || '_')
       ORDER BY n_tup_ins + n_tup_upd + n_tup_del DESC`,
      [run],
    );
    return rows
      .map((r) => ({
        table: r.t,
        inserted: round2(Number(r.ins) / sends),
        updated: round2(Number(r.upd) / sends),
        hotUpdated: round2(Number(r.hot) / sends),
        deleted: round2(Number(r.del) / sends),
      }))
      .filter((r) => r.inserted + r.updated + r.deleted >= 0.01);
  } finally {
    await client.end();
  }
}

/** The server's commits in this database and WAL bytes so far. */
async function serverCounters(databaseUrl: string): Promise<{ commits: number; walBytes: number }> {
  const client = new pg.Client({ connectionString: databaseUrl });
  await client.connect();
  try {
    const { rows } = await client.query<{ commits: string; wal: string }>(
      `SELECT (SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()) AS commits,
              (SELECT wal_bytes FROM pg_stat_wal) AS wal`,
    );
    return { commits: Number(rows[0]?.commits ?? 0), walBytes: Number(rows[0]?.wal ?? 0) };
  } finally {
    await client.end();
  }
}
