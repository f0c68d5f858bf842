/**
 * How a benchmark scenario runs, as opposed to what it measures (common.ts): the environment it is
 * handed, the names it gives its topics and schemas, the service stack, and how it feeds requests and
 * waits for them.
 */
import { bindSchemaRegistry, unbindSchemaRegistry } from '@outreach/shared';
import { waitFor } from '@outreach/testkit';
import { Stack, type Service } from '../lib/stack.js';
import { say, type BenchRequest } from './common.js';

/** The flags a TypeScript worker or CLI runs with, from source. */
export const tsNode = ['--conditions=source', '--import', 'tsx'];

export interface BenchInfra {
  readonly kafkaBrokers: string;
  readonly databaseUrl: string;
  /** The broker's process, when this machine runs it: its CPU and memory are reported too. */
  readonly kafkaPid?: number;
}

/** What every scenario is handed: the infrastructure, a scratch directory, and its services' first port. */
export interface BenchEnv extends BenchInfra {
  readonly work: string;
  readonly portBase: number;
  /** Extra Node flags for our four services (`--service-node-args`: GC and heap experiments), not the driver. */
  readonly serviceNodeArgs?: readonly string[];
  /** Extra environment for our four services (`--service-env=K=V,K=V`: settings experiments). */
  readonly serviceEnv?: Readonly<Record<string, string>>;
}

let runCounter = 0;
/** A name for one run's topics, schemas, queues and files, unique within the process and across runs. */
export function runId(label: string): string {
  return `bench${label}${Date.now().toString(36)}${runCounter++}`;
}

/** Waits with a progress line every 5 s. */
export async function until(
  description: string,
  done: () => Promise<boolean> | boolean,
  progress: () => string,
  timeoutMs: number,
  intervalMs = 250,
): Promise<void> {
  const ticker = setInterval(() => say(`  ${description}: ${progress()}`), 5_000);
  try {
    await waitFor(done, { timeoutMs, intervalMs, description });
  } finally {
    clearInterval(ticker);
  }
}

/**
 * Hands the requests to `send` in chunks: all at once (a burst, the throughput runs), or at `pace`
 * requests per second (the steady-rate latency runs). Records each key's first hand-over time.
 */
export async function feed(
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

/** A stack of service processes for one bench run, with its topics created. */
export async function benchStack(
  env: BenchEnv,
  run: string,
  serviceEnv?: (service: Service) => Record<string, string>,
): Promise<Stack> {
  const stack = new Stack({
    run,
    kafkaBrokers: env.kafkaBrokers,
    databaseUrl: env.databaseUrl,
    portBase: env.portBase,
    token: 'bench-token',
    smtpPort: 2525,
    ...(serviceEnv ? { env: serviceEnv } : {}),
  });
  await stack.createTopics();
  return stack;
}

/**
 * Puts this process's codec in the wire format of the stack's services (ADR 011), as a data team's
 * reader is: in the Confluent format, bound to the registry under the run's prefix, so the bench
 * publishes what a publisher would and decodes what the services write. Call it after the first
 * service started (the start registers the run's subjects).
 */
export async function bindBenchCodec(stack: Stack): Promise<void> {
  unbindSchemaRegistry();
  if (stack.eventWireFormat !== 'confluent' || !stack.registryUrl) return;
  const binding = await bindSchemaRegistry({
    EVENT_WIRE_FORMAT: 'confluent',
    SCHEMA_REGISTRY_URL: stack.registryUrl,
    SCHEMA_REGISTRY_AUTH: '',
    SCHEMA_REGISTRY_TIMEOUT_MS: 5_000,
    SCHEMA_REGISTRY_STARTUP_TIMEOUT_MS: 30_000,
    TOPIC_PREFIX: stack.prefix,
  });
  if (!binding || binding.currentIds.size === 0) throw new Error(`no public subject is bound under ${stack.prefix}`);
}
