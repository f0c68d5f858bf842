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
 *   5. a CPU profile of the four services, summed by where the time goes.
 * Each scenario is a module in scripts/bench/; this file parses the arguments and runs the sections
 * in order. Writes reports/bench/report.{md,json} (or into --out). Figures are printed and recorded,
 * never asserted.
 *
 *   npm run bench [-- --requests 50000 --fault-requests 10000 --scaling 10000,50000,200000 --only ...]
 *   (npm test runs every section at tiny sizes, test/e2e/bench-smoke.e2e.test.ts, so none can rot)
 *   --only takes a comma-separated list of: pipeline, ceiling, bullmq, pgboss, steady, faults, scaling,
 *   check, experiment, sweep, profile
 */
import { mkdirSync, rmSync, writeFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { parseArgs } from 'node:util';
import { up } from './infra.js';
import { describeMachine } from './lib/machine.js';
import { root, shownPath } from './lib/paths.js';
import { bullmqPeer } from './bench/bullmq.js';
import { ceiling } from './bench/ceiling.js';
import { checkEndpoint } from './bench/check.js';
import { requestSet, say } from './bench/common.js';
import { experimentAssignments } from './bench/experiment.js';
import type { BenchEnv } from './bench/harness.js';
import { peerRun } from './bench/peers.js';
import { pgbossPeer } from './bench/pgboss.js';
import { pipeline } from './bench/pipeline.js';
import { profiledPipeline } from './bench/profile.js';
import { analysis, markdown, type BenchReport, type SweepResult, type SystemResult } from './bench/report.js';
import { livenessSweep } from './bench/sweep.js';

const allSections = 'pipeline,ceiling,bullmq,pgboss,steady,faults,scaling,check,experiment,sweep,profile';
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
    /** Worker SIGKILLs in the fault section, per system. */
    kills: { type: 'string', default: '3' },
    /** How long the timed HTTP load runs (check endpoint, experiment assignments) last; default theirs (20 s, 15 s). */
    'load-seconds': { type: 'string' },
    only: { type: 'string' },
    /** Node flags for our four services only (space-separated), e.g. `--service-node-args=--max-semi-space-size=32`. */
    'service-node-args': { type: 'string' },
    /** Settings for our four services only, e.g. `--service-env=CONSUMER_FETCH_MAX_BYTES=1048576,LOG_LEVEL=info`. */
    'service-env': { type: 'string' },
    'port-base': { type: 'string', default: '8280' },
    /** Where report.{md,json} go: a partial run (`--only`) can leave the committed report alone. */
    out: { type: 'string', default: join(root, 'reports', 'bench') },
  },
});
const sections = new Set((args.only ?? allSections).split(','));
const out = resolve(args.out);

// SIGTERM or Ctrl-C stops what the bench started: process.exit runs the exit hooks that kill every
// service and worker process it spawned (startProcess, Stack).
for (const [signal, code] of [
  ['SIGTERM', 143],
  ['SIGINT', 130],
] as const) {
  process.once(signal, () => {
    say(`${signal}: stopping the processes this run started`);
    process.exit(code);
  });
}

async function main(): Promise<void> {
  const work = join(root, '.infra', 'bench');
  rmSync(work, { recursive: true, force: true });
  mkdirSync(work, { recursive: true });
  const state = await up();
  // Public topics in the Confluent wire format when the stack runs a registry (ADR 011): the Stack
  // registers the run's subjects and hands the services its URL.
  if (state.schemaRegistryUrl) process.env.SCHEMA_REGISTRY_URL ??= state.schemaRegistryUrl;
  const env: BenchEnv = {
    kafkaBrokers: state.kafkaBrokers,
    databaseUrl: state.databaseUrl,
    ...(state.kafka.pid ? { kafkaPid: state.kafka.pid } : {}),
    work,
    portBase: Number(args['port-base']),
    ...(args['service-env']
      ? {
          serviceEnv: Object.fromEntries(
            args['service-env']
              .split(',')
              .map((pair) => [pair.slice(0, pair.indexOf('=')), pair.slice(pair.indexOf('=') + 1)]),
          ),
        }
      : {}),
    ...(args['service-node-args'] ? { serviceNodeArgs: args['service-node-args'].split(/\s+/).filter(Boolean) } : {}),
  };
  const n = Number(args.requests);
  const machine = await describeMachine(
    state.databaseUrl,
    `npm run bench${process.argv.slice(2).length ? ` -- ${process.argv.slice(2).join(' ')}` : ''}`,
  );
  const requests = requestSet(n);
  say(`${requests.length} requests (${n} distinct, ${requests.length - n} repeats) for every system`);
  const pace = Number(args['steady-rate']);
  const report: BenchReport = { machine, requests: requests.length, distinct: n };
  const write = () => {
    mkdirSync(out, { recursive: true });
    writeFileSync(join(out, 'report.json'), `${JSON.stringify(report, null, 2)}\n`);
    writeFileSync(join(out, 'report.md'), markdown(report, { steadyRate: pace }));
  };
  const step = async <T>(name: string, section: string, fn: () => Promise<T>): Promise<T | undefined> => {
    if (!sections.has(section)) return undefined;
    say(`${name} ...`);
    const started = Date.now();
    const result = await fn();
    say(`${name} done in ${((Date.now() - started) / 1000).toFixed(0)} s: ${JSON.stringify(result).slice(0, 300)}`);
    return result;
  };
  /** Runs one section's systems in turn, each result recorded as soon as it is in. */
  const steps = async (
    into: SystemResult[],
    section: string,
    runs: ReadonlyArray<readonly [string, () => Promise<SystemResult>]>,
  ) => {
    for (const [name, run] of runs) {
      const result = await step(name, section, run);
      if (result) into.push(result);
      write();
    }
  };

  const main: SystemResult[] = [];
  report.main = main;
  const ours = await step('our pipeline', 'pipeline', () => pipeline(env, requests));
  if (ours) main.push(ours);
  const ceil = await step('ceiling', 'ceiling', () => ceiling(env, requests));
  if (ceil) main.push(ceil);
  const bull = await step('BullMQ', 'bullmq', () => peerRun(env, bullmqPeer(), requests));
  if (bull) main.push(bull);
  const boss = await step('pg-boss', 'pgboss', () => peerRun(env, pgbossPeer(env.databaseUrl), requests));
  if (boss) main.push(boss);
  if (ours) report.analysis = analysis(ours, ceil);
  write();

  const steadyRequests = requestSet(Number(args['steady-requests']));
  report.steady = [];
  await steps(report.steady, 'steady', [
    [`our pipeline at ${pace} req/s`, () => pipeline(env, steadyRequests, { pace })],
    [`BullMQ at ${pace} req/s`, () => peerRun(env, bullmqPeer(), steadyRequests, { pace })],
    [`pg-boss at ${pace} req/s`, () => peerRun(env, pgbossPeer(env.databaseUrl), steadyRequests, { pace })],
  ]);

  // Paced, and with a provider that answers 50 ms after accepting (as an SMTP server does), so that
  // every system has sends in flight at each kill.
  const faultRequests = requestSet(Number(args['fault-requests']));
  const kills = Number(args.kills);
  const faulty = { kills, pace, providerDelayMs: 50 };
  report.faults = [];
  await steps(report.faults, 'faults', [
    [`our pipeline, sender SIGKILL ×${kills}`, () => pipeline(env, faultRequests, faulty)],
    [`BullMQ, worker SIGKILL ×${kills}`, () => peerRun(env, bullmqPeer(), faultRequests, faulty)],
    [`pg-boss, worker SIGKILL ×${kills}`, () => peerRun(env, pgbossPeer(env.databaseUrl), faultRequests, faulty)],
  ]);

  report.scaling = [];
  for (const size of args.scaling.split(',').map(Number)) {
    // The throughput run already measured the pipeline at its own size.
    const result =
      size === n && ours
        ? ours
        : await step(`our pipeline at ${size}`, 'scaling', () => pipeline(env, requestSet(size)));
    if (result) report.scaling.push(result);
    write();
  }

  const check = await step('check endpoint at 1k req/s', 'check', () =>
    checkEndpoint(env, Number(args['check-rows']), ...(args['load-seconds'] ? [Number(args['load-seconds'])] : [])),
  );
  if (check) report.check = check;
  write();
  const experiment = await step('experiment assignments', 'experiment', () =>
    experimentAssignments(env, ...(args['load-seconds'] ? [Number(args['load-seconds'])] : [])),
  );
  if (experiment) report.experiment = experiment;
  write();
  const sweeps: SweepResult[] = [];
  for (const open of args['sweep-sizes'].split(',').map(Number)) {
    const result = await step(`liveness sweep over ${open} open conversations`, 'sweep', () =>
      livenessSweep(env, open),
    );
    if (result) sweeps.push(result);
  }
  report.sweep = sweeps;
  write();
  const profile = await step('profiled pipeline run', 'profile', () =>
    profiledPipeline(env, requestSet(Number(args['profile-requests']))),
  );
  if (profile) report.profile = profile;
  write();
  process.stdout.write(`\n${markdown(report, { steadyRate: pace })}\n`);
  say(`${shownPath(out)}/report.md and report.json written`);
}

main().then(
  () => process.exit(0),
  (error: unknown) => {
    process.stderr.write(`[bench] ${error instanceof Error ? (error.stack ?? error.message) : String(error)}\n`);
    process.exit(1);
  },
);
