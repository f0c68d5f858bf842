/**
 * The CPU profile section: a pipeline run with `--cpu-prof` on the four services, their self
 * time summed by where the code lives (a package, our shared layer, our services, Node itself).
 */
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import type { BenchRequest } from './common.js';
import type { BenchEnv } from './harness.js';
import { pipeline } from './pipeline.js';
import type { ProfileResult, ProfileShare } from './report.js';

export async function profiledPipeline(env: BenchEnv, requests: readonly BenchRequest[]): Promise<ProfileResult> {
  const profileDir = join(env.work, 'profiles');
  const profiled = await pipeline(env, requests, { profileDir });
  return {
    requests: profiled.requests,
    sendsPerSecond: profiled.sendsPerSecond,
    services: Object.fromEntries(
      ['planner', 'sender', 'liveness', 'experiment'].map((service) => [
        service,
        summarizeProfile(join(profileDir, service)),
      ]),
    ),
  };
}

/** The part of a `.cpuprofile` node that says where it runs and how often it was sampled. */
interface ProfileNode {
  readonly id: number;
  readonly callFrame: CallFrame;
  readonly hitCount?: number;
}

interface CallFrame {
  readonly functionName: string;
  readonly url: string;
}

/** Self time of a --cpu-prof profile, summed by where the code lives. */
function summarizeProfile(dir: string): ProfileShare[] {
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

function categorize(frame: CallFrame): string {
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
