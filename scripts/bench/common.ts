/**
 * What every benchmark run shares: one request set (with the same duplicates for every system), the
 * delivery log the null providers append to, latency histograms, and per-process CPU and memory.
 */
import { randomUUID } from 'node:crypto';
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { normalizeCandidateKey, sendIdFor, type OutreachRequested } from '@outreach/contracts';
import * as hdr from 'hdr-histogram-js';
import { outreachRequest } from '../lib/stack.js';

export const CAMPAIGN = 'bench';

export interface BenchRequest {
  readonly event: OutreachRequested;
  /** The dedupe key a job queue would use: campaign:candidate:step. */
  readonly jobKey: string;
  readonly sendId: string;
}

/**
 * `distinct` requests, then 10% of them again (fresh event ids), each repeat placed about 1,000
 * positions after its original, so some arrive while the original is still queued or in flight.
 */
export function requestSet(distinct: number): BenchRequest[] {
  const originals: BenchRequest[] = Array.from({ length: distinct }, (_, i) => {
    const event = outreachRequest(
      { requestId: `bench-${i}`, campaignId: CAMPAIGN, candidateId: `cand-${i}`, email: `cand-${i}@example.com` },
      'bench',
    );
    return {
      event,
      jobKey: `${CAMPAIGN}:${event.candidateId}:${event.step}`,
      sendId: sendIdFor(CAMPAIGN, normalizeCandidateKey(event.candidateId), event.step),
    };
  });
  const all = [...originals];
  for (let i = 0; i < distinct; i += 10) {
    const original = originals[i] as BenchRequest;
    const repeat = { ...original, event: { ...original.event, eventId: randomUUID() } };
    all.splice(Math.min(all.length, i + Math.floor(i / 10) + 1_000), 0, repeat);
  }
  return all;
}

/** Deliveries per key from a null provider's log (`<key>\t<epoch ms>` lines). */
export function readDeliveryLog(path: string): Map<string, number[]> {
  const deliveries = new Map<string, number[]>();
  if (!existsSync(path)) return deliveries;
  for (const line of readFileSync(path, 'utf8').split('\n')) {
    const tab = line.indexOf('\t');
    if (tab < 0) continue;
    const key = line.slice(0, tab);
    const list = deliveries.get(key);
    if (list) list.push(Number(line.slice(tab + 1)));
    else deliveries.set(key, [Number(line.slice(tab + 1))]);
  }
  return deliveries;
}

/** Math.max over any number of values (spreading 200,000 arguments overflows the stack). */
export function maxOf(values: Iterable<number>): number {
  let max = -Infinity;
  for (const v of values) if (v > max) max = v;
  return max;
}

export function duplicateDeliveries(deliveries: ReadonlyMap<string, readonly number[]>): number {
  let extra = 0;
  for (const times of deliveries.values()) extra += times.length - 1;
  return extra;
}

export interface Latency {
  readonly p50: number;
  readonly p95: number;
  readonly p99: number;
  readonly max: number;
  readonly count: number;
}

export function latencyOf(samplesMs: Iterable<number>): Latency {
  const histogram = hdr.build({
    lowestDiscernibleValue: 1,
    highestTrackableValue: 3_600_000,
    numberOfSignificantValueDigits: 3,
  });
  for (const ms of samplesMs) histogram.recordValue(Math.max(1, Math.round(ms)));
  const result = {
    p50: histogram.getValueAtPercentile(50),
    p95: histogram.getValueAtPercentile(95),
    p99: histogram.getValueAtPercentile(99),
    max: histogram.maxValue,
    count: histogram.totalCount,
  };
  histogram.destroy();
  return result;
}

export interface ProcessUsage {
  readonly name: string;
  readonly cpuSeconds: number;
  readonly peakRssMiB: number;
}

const CLOCK_TICKS = 100;

function readCpuAndRss(pid: number): { cpu: number; hwm: number } | undefined {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    const cpu = (Number(fields[11]) + Number(fields[12])) / CLOCK_TICKS;
    const hwm = /VmHWM:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))?.[1];
    return { cpu, hwm: Number(hwm ?? 0) / 1024 };
  } catch {
    return undefined; // the process is gone
  }
}

/** PostgreSQL's server processes (postmaster and backends), found by their command name. */
export function postgresPids(): number[] {
  const pids: number[] = [];
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      if (readFileSync(`/proc/${entry}/comm`, 'utf8').trim() === 'postgres') pids.push(Number(entry));
    } catch {
      // gone
    }
  }
  return pids;
}

/**
 * Samples CPU time and peak RSS of named processes every 500 ms. A name may stand for several pids
 * over time (a restarted worker) or at once (PostgreSQL's backends): their CPU adds up, the peak RSS
 * is the largest one.
 */
export class UsageSampler {
  private readonly start = new Map<number, number>();
  private readonly last = new Map<number, { name: string; cpu: number; hwm: number }>();
  private readonly timer: NodeJS.Timeout;

  constructor(private readonly pids: () => ReadonlyArray<{ name: string; pid: number }>) {
    this.sample();
    this.timer = setInterval(() => this.sample(), 500);
  }

  private sample(): void {
    for (const { name, pid } of this.pids()) {
      const now = readCpuAndRss(pid);
      if (!now) continue;
      if (!this.start.has(pid)) this.start.set(pid, now.cpu);
      this.last.set(pid, { name, ...now });
    }
  }

  stop(): ProcessUsage[] {
    this.sample();
    clearInterval(this.timer);
    const byName = new Map<string, { cpu: number; rss: number }>();
    for (const [pid, { name, cpu, hwm }] of this.last) {
      const entry = byName.get(name) ?? { cpu: 0, rss: 0 };
      entry.cpu += cpu - (this.start.get(pid) ?? cpu);
      entry.rss = Math.max(entry.rss, hwm);
      byName.set(name, entry);
    }
    return [...byName].map(([name, { cpu, rss }]) => ({
      name,
      cpuSeconds: Math.round(cpu * 10) / 10,
      peakRssMiB: Math.round(rss),
    }));
  }
}

export function say(message: string): void {
  process.stdout.write(`[bench] ${message}\n`);
}
