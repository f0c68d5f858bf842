/**
 * `npm run chaos`: the reliability suite. Each scenario starts from a clean state (its own topics,
 * schemas and SMTP sink), runs the planner and the sender as processes, drives requests through the
 * public ingress (the `outreach.requested` topic, and the planner's HTTP endpoint), injects one fault
 * into real processes, and then checks the SMTP sink's deliveries against the sender's sent log:
 *
 *   duplicates  emails delivered more than once for one send or one campaign+address+step: must be 0
 *   lost        requests without exactly one terminal outcome in the sent log: must be 0
 *   ambiguous   sends whose provider call may or may not have happened: at most the sends in flight
 *               at the faults (concurrency × processes hit); per kill where the sender is SIGKILLed;
 *               none where the provider pushes delivery evidence for every message it takes
 *   evidence    where it does: no report of its refused, no forged one trusted
 *   mismatched  `sent` rows with no delivery, or deliveries recorded as failed, suppressed or not at all: 0
 *
 *   npm run chaos                       the full configuration (3,000 requests × 12 scenarios)
 *   npm run chaos -- --config short     a few hundred per scenario (part of `npm test`)
 *   npm run chaos -- --only kafka-restart,postgres-restart
 *   npm run chaos -- --out /tmp/chaos   the reports elsewhere (a partial run leaves the committed ones)
 *   npm run chaos -- --parallel 2       two scenarios at a time (`npm test` does: they mostly wait on
 *                                       session timeouts and restarts); the default runs one at a time,
 *                                       so the committed full report times each scenario alone
 *
 * The scenarios are in scripts/chaos/scenarios.ts, one run in run-scenario.ts, the verdict in
 * checks.ts. It writes reports/chaos/<config>.json and .md, prints the table, and exits 1 on any
 * violation.
 */
import { existsSync, mkdirSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { parseArgs } from 'node:util';
import { up } from './infra.js';
import { describeMachine } from './lib/machine.js';
import { root, shownPath } from './lib/paths.js';
import { configNamed, configs, say } from './chaos/common.js';
import { markdown, type ChaosReport, type Result } from './chaos/report.js';
import { runScenario } from './chaos/run-scenario.js';
import { scenarios } from './chaos/scenarios.js';

const { values: args } = parseArgs({
  options: {
    config: { type: 'string', default: process.env.CHAOS_CONFIG ?? 'full' },
    only: { type: 'string' },
    'port-base': { type: 'string', default: process.env.CHAOS_PORT_BASE ?? '8180' },
    parallel: { type: 'string', default: '1' },
    out: { type: 'string', default: join(root, 'reports', 'chaos') },
  },
});
const configName = configNamed(args.config);
const config = configs[configName];
const out = resolve(args.out);
const parallel = Number(args.parallel);
if (!Number.isInteger(parallel) || parallel < 1 || parallel > 4) throw new Error('--parallel must be 1, 2, 3 or 4');
/** Scenarios running side by side get port ranges this far apart (a stack uses portBase + 1 … + 30). */
const PORT_STRIDE = 100;

async function main(): Promise<number> {
  const only = args.only?.split(',').map((s) => s.trim());
  const chosen = scenarios.filter((s) => !only || only.includes(s.name));
  if (only && chosen.length !== only.length) {
    throw new Error(`unknown scenario in --only; the scenarios are ${scenarios.map((s) => s.name).join(', ')}`);
  }
  const state = await up();
  // Public topics in the Confluent wire format when the stack runs a registry (ADR 011): the Stack
  // registers the run's subjects and hands the services its URL.
  if (state.schemaRegistryUrl) process.env.SCHEMA_REGISTRY_URL ??= state.schemaRegistryUrl;
  const flags = [
    ...(configName === 'full' ? [] : [`--config ${configName}`]),
    ...(only ? [`--only ${only.join(',')}`] : []),
    ...(parallel > 1 ? [`--parallel ${parallel}`] : []),
  ];
  const command = `npm run chaos${flags.length > 0 ? ` -- ${flags.join(' ')}` : ''}`;
  const machine = await describeMachine(state.databaseUrl, command);
  say(
    `${configName} configuration: ${chosen.length} scenarios × ${config.requests} requests${parallel > 1 ? `, ${parallel} at a time` : ''}`,
  );
  // A pool of `parallel` lanes, each taking the next scenario; the report keeps the declared order.
  const results: Result[] = new Array<Result>(chosen.length);
  let next = 0;
  const lane = async (index: number): Promise<void> => {
    for (let i = next++; i < chosen.length; i = next++) {
      const scenario = chosen[i]!;
      say(`${scenario.name}: ${scenario.fault}`);
      const portBase = Number(args['port-base']) + PORT_STRIDE * index;
      const result = await runScenario(scenario, state, { config, portBase }).catch((error: unknown) => {
        next = chosen.length; // no lane starts another scenario after a crash
        throw error;
      });
      results[i] = result;
      say(
        `${scenario.name}: ${result.violations.length === 0 ? 'pass' : `FAIL (${result.violations.join('; ')})`} in ${result.seconds} s`,
      );
    }
  };
  // Every lane finishes (and cleans up after its scenario) before a failure of another is reported.
  const lanes = await Promise.allSettled(
    Array.from({ length: Math.min(parallel, chosen.length) }, (_, index) => lane(index)),
  );
  const crashed = lanes.find((l): l is PromiseRejectedResult => l.status === 'rejected');
  if (crashed) throw crashed.reason;
  const report: ChaosReport = { config: configName, machine, results };
  const text = markdown(report);
  mkdirSync(out, { recursive: true });
  writeFileSync(join(out, `${configName}.md`), text);
  writeFileSync(join(out, `${configName}.json`), `${JSON.stringify(report, null, 2)}\n`);
  process.stdout.write(`\n${text}\n`);
  const failed = results.filter((r) => r.violations.length > 0);
  say(
    failed.length === 0
      ? `every scenario passed; reports in ${shownPath(out)}/${configName}.{md,json}`
      : `${failed.length} scenario(s) violated a guarantee: ${failed.map((r) => r.scenario).join(', ')}`,
  );
  return failed.length === 0 ? 0 : 1;
}

// Leftovers of an interrupted run (its own brokers' and databases' directories) go first.
const chaosDir = join(root, '.infra', 'chaos');
if (existsSync(chaosDir) && readdirSync(chaosDir).length > 0) rmSync(chaosDir, { recursive: true, force: true });

process.once('SIGINT', () => process.exit(130));
main().then(
  (code) => process.exit(code),
  (error: unknown) => {
    process.stderr.write(`[chaos] ${error instanceof Error ? (error.stack ?? error.message) : String(error)}\n`);
    process.exit(1);
  },
);
