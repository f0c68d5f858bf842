/**
 * The liveness sweep over `open` open conversations, `DUE` of them past their deadline: the first
 * sweep flags those, the next 20 find nothing to flag (the steady state). The tables are the liveness
 * service's, so the bench goes through its documented commands (services/liveness/src/cli/seed.ts and
 * sweep.ts), run as processes in a schema of the bench's own, and never touches the tables itself.
 */
import { execFile } from 'node:child_process';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { root } from '../lib/paths.js';
import { dropRunData } from '../lib/stack.js';
import { runId, tsNode, type BenchEnv } from './harness.js';
import type { SweepResult } from './report.js';

const DUE = 100;
const IDLE_SWEEPS = 20;
/** The graces the liveness service applies to what a sweep flags: the same short minute for every kind. */
const GRACE_MS = '60000';

interface Seeded {
  readonly seeded: number;
  readonly due: number;
  readonly seconds: number;
}

interface Swept {
  readonly flagged: number;
  readonly sweepsMs: readonly number[];
}

export async function livenessSweep(env: BenchEnv, open: number): Promise<SweepResult> {
  const schema = runId('sweep');
  const cliEnv: NodeJS.ProcessEnv = {
    PATH: process.env.PATH,
    KAFKA_BROKERS: env.kafkaBrokers,
    DATABASE_URL: env.databaseUrl,
    DATABASE_SCHEMA: schema,
    TOPIC_PREFIX: `${schema}.`,
    GRACE_INBOUND_MS: GRACE_MS,
    GRACE_OUTBOUND_MS: GRACE_MS,
    GRACE_OVERDUE_MS: GRACE_MS,
    LOG_LEVEL: 'warn',
  };
  try {
    const seeded = parse<Seeded>(
      await liveness('seed', ['--open', String(open), '--due', String(DUE), '--campaign', 'bench'], cliEnv),
      ['seeded', 'due', 'seconds'],
    );
    if (seeded.seeded !== open)
      throw new Error(`liveness seed: asked for ${open} conversations, seeded ${seeded.seeded}`);
    const swept = parse<Swept>(
      await liveness('sweep', ['--repeat', String(1 + IDLE_SWEEPS), '--limit', '1000'], cliEnv),
      ['flagged'],
    );
    if (!Array.isArray(swept.sweepsMs) || swept.sweepsMs.length !== 1 + IDLE_SWEEPS) {
      throw new Error(`liveness sweep: expected ${1 + IDLE_SWEEPS} timings, got ${JSON.stringify(swept.sweepsMs)}`);
    }
    const [withDueMs = 0, ...idle] = swept.sweepsMs;
    idle.sort((a, b) => a - b);
    return {
      open,
      seedSeconds: Math.round(seeded.seconds * 10) / 10,
      flagged: swept.flagged,
      sweepWithDueMs: Math.round(withDueMs * 10) / 10,
      idleSweepMedianMs: Math.round((idle[IDLE_SWEEPS / 2] ?? 0) * 100) / 100,
    };
  } finally {
    await dropRunData(env, `${schema}.`, [schema]);
  }
}

/** Runs one of the liveness service's CLI commands from source; resolves with its stdout. */
async function liveness(command: 'seed' | 'sweep', args: readonly string[], env: NodeJS.ProcessEnv): Promise<string> {
  const script = join(root, 'services', 'liveness', 'src', 'cli', `${command}.ts`);
  const { stdout } = await promisify(execFile)(process.execPath, [...tsNode, script, ...args], {
    cwd: root,
    env,
    maxBuffer: 16 * 1024 * 1024,
  });
  return stdout;
}

/** The command's result: its last output line, a JSON object with (at least) these numeric fields. */
function parse<T>(stdout: string, numeric: ReadonlyArray<keyof T & string>): T {
  const last = stdout.trim().split('\n').at(-1) ?? '';
  let value: unknown;
  try {
    value = JSON.parse(last);
  } catch {
    throw new Error(`liveness CLI printed no JSON result: ${JSON.stringify(stdout.slice(-500))}`);
  }
  const record = value as Record<string, unknown>;
  const missing = numeric.filter((key) => typeof record[key] !== 'number');
  if (missing.length > 0) throw new Error(`liveness CLI result lacks ${missing.join(', ')}: ${last}`);
  return value as T;
}
