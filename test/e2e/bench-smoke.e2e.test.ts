/**
 * `npm run bench`, every section at tiny sizes, so the benchmark cannot rot unnoticed: it runs in the
 * wire format the services default to (the Confluent format whenever a registry runs, ADR 011),
 * finishes, and writes a report in which every section has its results. No figure is asserted (speed
 * belongs in the report, not in a test); what is asserted is that each system delivered every distinct
 * request once. A second test sends the bench SIGTERM mid-run: nothing it started outlives it.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { waitFor } from '@outreach/testkit';
import { afterAll, expect, inject, it } from 'vitest';
import type { BenchReport, SystemResult } from '../../scripts/bench/report.js';

const root = join(import.meta.dirname, '..', '..');
const out = mkdtempSync(join(tmpdir(), 'bench-smoke-'));
afterAll(() => rmSync(out, { recursive: true, force: true }));

function bench(args: readonly string[], portBase: number): { child: ChildProcess; output: () => string } {
  const child = spawn(
    process.execPath,
    [
      '--conditions=source',
      '--import',
      join(root, 'node_modules', 'tsx', 'dist', 'loader.mjs'),
      'scripts/bench.ts',
      '--port-base',
      String(portBase),
      ...args,
    ],
    {
      cwd: root,
      env: {
        PATH: process.env.PATH,
        HOME: process.env.HOME,
        KAFKA_BROKERS: inject('kafkaBrokers'),
        DATABASE_URL: inject('databaseUrl'),
        // The format test/wire-format.ts chose for this run, and its registry: the services' default.
        ...(process.env.SCHEMA_REGISTRY_URL ? { SCHEMA_REGISTRY_URL: process.env.SCHEMA_REGISTRY_URL } : {}),
        ...(process.env.EVENT_WIRE_FORMAT ? { EVENT_WIRE_FORMAT: process.env.EVENT_WIRE_FORMAT } : {}),
        ...(process.env.REDIS_URL ? { REDIS_URL: process.env.REDIS_URL } : {}),
      },
      stdio: ['ignore', 'pipe', 'pipe'],
    },
  );
  let output = '';
  child.stdout?.on('data', (chunk: Buffer) => (output += chunk.toString()));
  child.stderr?.on('data', (chunk: Buffer) => (output += chunk.toString()));
  return { child, output: () => output };
}

function exitOf(child: ChildProcess, timeoutMs: number, description: string) {
  let code: number | string | undefined;
  child.once('exit', (c, signal) => (code = c ?? signal ?? 'unknown'));
  return waitFor(() => code, { timeoutMs, intervalMs: 250, description });
}

const answers = (port: number) =>
  fetch(`http://127.0.0.1:${port}/health/live`).then(
    () => true,
    () => false,
  );

it('runs every section at tiny sizes in the default wire format and writes a report with each', async () => {
  const run = bench(
    [
      ...['--requests', '200', '--fault-requests', '200', '--kills', '1', '--scaling', '100,200'],
      ...['--profile-requests', '200', '--steady-rate', '200', '--steady-requests', '200'],
      ...['--check-rows', '2000', '--sweep-sizes', '100', '--load-seconds', '2', '--out', out],
      // The settings-experiment options reach our services (a wrong flag or setting fails their start).
      ...['--service-env=CONSUMER_FETCH_PARTITION_MAX_BYTES=262144', '--service-node-args=--max-semi-space-size=16'],
    ],
    18_880,
  );
  const code = await exitOf(run.child, 840_000, 'the bench to finish');
  expect(code, run.output().slice(-4_000)).toBe(0);
  const report = JSON.parse(readFileSync(join(out, 'report.json'), 'utf8')) as BenchReport;
  const systems = (results: readonly SystemResult[] | undefined) => (results ?? []).map((r) => r.system);
  expect(systems(report.main)).toEqual([
    'outreach (ours)',
    expect.stringMatching(/^ceiling/),
    expect.stringMatching(/^BullMQ/),
    expect.stringMatching(/^pg-boss/),
  ]);
  expect(report.steady).toHaveLength(3);
  expect(report.faults).toHaveLength(3);
  expect(report.scaling?.map((r) => r.distinct)).toEqual([100, 200]);
  for (const result of [...(report.main ?? []), ...(report.steady ?? []), ...(report.scaling ?? [])]) {
    expect(result.delivered, `${result.system}: delivered`).toBe(result.distinct);
    expect(result.duplicates, `${result.system}: duplicates`).toBe(0);
  }
  // Ours never delivers twice, killed or not (the peers may: that is what the section shows).
  const ours = report.faults?.find((r) => r.system === 'outreach (ours)');
  expect(ours?.kills).toBe(1);
  expect(ours?.duplicates).toBe(0);
  expect(report.check).toBeDefined();
  expect(report.experiment?.errors).toBe(0);
  expect(report.sweep).toHaveLength(1);
  expect(Object.keys(report.profile?.services ?? {}).sort()).toEqual(['experiment', 'liveness', 'planner', 'sender']);
  // Where the time goes, hop by hop, for the runs without kills; the failover after each kill.
  const oursMain = report.main?.find((r) => r.system === 'outreach (ours)');
  expect(oursMain?.hops?.map((h) => h.count)).toEqual(Array(9).fill(200));
  expect(ours?.resumedAfterKillMs).toHaveLength(1);
  expect(readFileSync(join(out, 'report.md'), 'utf8')).toMatch(/## Pipeline scaling/);
}, 900_000);

it('stops every service it started when it gets SIGTERM mid-run', async () => {
  const portBase = 18_480;
  const run = bench(['--only', 'pipeline', '--requests', '100000', '--out', join(out, 'sigterm')], portBase);
  // The pipeline's four services listen on portBase + 1..4 once they are up.
  const ports = [1, 2, 3, 4].map((i) => portBase + i);
  await waitFor(async () => (await Promise.all(ports.map(answers))).every(Boolean), {
    timeoutMs: 180_000,
    intervalMs: 500,
    description: `the bench's services to listen on ${ports.join(', ')}`,
  });
  await waitFor(() => /\d+ sends recorded/.test(run.output()), {
    timeoutMs: 120_000,
    intervalMs: 500,
    description: 'the bench to be mid-run',
  });
  run.child.kill('SIGTERM');
  expect(await exitOf(run.child, 30_000, 'the bench to exit after SIGTERM')).toBe(143);
  await waitFor(async () => !(await Promise.all(ports.map(answers))).some(Boolean), {
    timeoutMs: 10_000,
    intervalMs: 200,
    description: 'every service the bench started to be gone',
  });
}, 420_000);
