/**
 * A job-queue peer on the same request set and null provider as our pipeline: two worker processes,
 * each job keyed by campaign:candidate:step, optionally with workers SIGKILLed mid-run. Duplicates are
 * counted from the delivery log the workers' null provider appends to, as for ours.
 */
import { join } from 'node:path';
import { waitFor, type RunningProcess } from '@outreach/testkit';
import { duplicateDeliveries, latencyOf, maxOf, readDeliveryLog, UsageSampler, type BenchRequest } from './common.js';
import { feed, runId, until, type BenchEnv } from './harness.js';
import type { SystemResult } from './report.js';

export interface Peer {
  readonly name: string;
  /** The peer's store (Redis, PostgreSQL): its CPU and memory count as the peer's. */
  readonly backend: { readonly name: string; pids(): number[] };
  setUp(): Promise<void>;
  enqueue(chunk: readonly BenchRequest[]): Promise<void>;
  worker(deliveryLog: string, delayMs: number): RunningProcess;
  /** Nothing waiting, active or due for a retry. */
  idle(): Promise<boolean>;
  tearDown(): Promise<void>;
}

export interface PeerOptions {
  /** Worker SIGKILLs, each at the next quarter of the deliveries, the worker replaced each time. */
  readonly kills?: number;
  /** Requests per second; all at once when absent. */
  readonly pace?: number;
  /** How long the null provider takes to answer after accepting a message. */
  readonly providerDelayMs?: number;
}

export async function peerRun(
  env: BenchEnv,
  peer: Peer,
  requests: readonly BenchRequest[],
  options: PeerOptions = {},
): Promise<SystemResult> {
  const delayMs = options.providerDelayMs ?? 0;
  const deliveryLog = join(env.work, `${runId('peer')}.deliveries`);
  await peer.setUp();
  const workers: RunningProcess[] = [peer.worker(deliveryLog, delayMs), peer.worker(deliveryLog, delayMs)];
  const allWorkers = [...workers];
  await waitFor(() => workers.every((w) => w.stdoutLines.some((l) => l.includes('running'))), {
    timeoutMs: 60_000,
    description: `${peer.name} workers to start`,
  });
  const sampler = new UsageSampler(() => [
    ...allWorkers.map((w) => ({ name: 'workers', pid: w.child.pid ?? 0 })),
    ...peer.backend.pids().map((pid) => ({ name: peer.backend.name, pid })),
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
