/**
 * The benchmark report: its shape (what reports/bench/report.json holds, filled in section by section
 * as the run goes) and its markdown rendering (report.md).
 */
import { cpus } from 'node:os';
import { machineMarkdown, type MachineDescription } from '../lib/machine.js';
import type { Latency, ProcessUsage } from './common.js';

/** One system through one request set: ours, the ceiling, or a peer. */
export interface SystemResult {
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
  /** Ours, per kill: ms from the sender's SIGKILL to the first claim after it (-1: none came). */
  readonly resumedAfterKillMs?: readonly number[];
  readonly note?: string;
  /** What the run cost the database, per distinct send (ours only: the services count their statements). */
  readonly database?: DatabaseCost;
  /** Where a send's time went, hop by hop (ours only, runs without kills). */
  readonly hops?: readonly Hop[];
}

/** One hop of the pipeline: latency percentiles over the sends that have both of its timestamps. */
export interface Hop extends Latency {
  readonly hop: string;
}

/** PostgreSQL's work per send over one run: statements by service, and the server's commits and WAL. */
export interface DatabaseCost {
  /** `outreach_pg_statements_total` of each service over the run, per send. */
  readonly statementsPerSend: Readonly<Record<string, number>>;
  /** Commits in the database (pg_stat_database.xact_commit) per send: every client's, the bench's included. */
  readonly transactionsPerSend: number;
  /** WAL bytes written by the server (pg_stat_wal.wal_bytes) per send. */
  readonly walBytesPerSend: number;
  /** Row writes per send, by `schema.table` of the run (pg_stat_user_tables), the busiest first. */
  readonly rowsPerSend?: ReadonlyArray<{
    readonly table: string;
    readonly inserted: number;
    readonly updated: number;
    readonly hotUpdated: number;
    readonly deleted: number;
  }>;
}

/** The sender's check endpoint at a fixed request rate over a seeded sent log. */
export interface CheckResult {
  readonly rows: number;
  readonly targetRate: number;
  readonly achievedRate: number;
  readonly p50: number;
  readonly p99: number;
  readonly max: number;
  readonly errors: number;
  /** How long the sender's backfill command took to seed the sent log (not part of the measure). */
  readonly seedSeconds?: number;
}

/** Experiment assignments over HTTP, one candidate per call and in batches. */
export interface ExperimentResult {
  readonly singlePerSecond: number;
  readonly singleP99Ms: number;
  readonly batchSize: number;
  readonly batchedPerSecond: number;
  readonly batchP99Ms: number;
  readonly errors: number;
}

/** One liveness sweep size: the first sweep finds the due conversations, the next ones find none. */
export interface SweepResult {
  readonly open: number;
  readonly seedSeconds: number;
  readonly flagged: number;
  readonly sweepWithDueMs: number;
  readonly idleSweepMedianMs: number;
}

export interface ProfileShare {
  readonly category: string;
  /** Percent of the process's self time. */
  readonly share: number;
}

export interface ProfileResult {
  readonly requests: number;
  readonly sendsPerSecond: number;
  /** Self time by where the code lives, per service (all four, profiled in the same run). */
  readonly services: Readonly<Record<string, readonly ProfileShare[]>>;
}

/** reports/bench/report.json. A section that did not run (`--only`) is absent or empty. */
export interface BenchReport {
  readonly machine: MachineDescription;
  /** The throughput runs' request set: distinct requests plus their repeats. */
  readonly requests: number;
  readonly distinct: number;
  main?: SystemResult[];
  analysis?: string;
  steady?: SystemResult[];
  faults?: SystemResult[];
  scaling?: SystemResult[];
  check?: CheckResult;
  experiment?: ExperimentResult;
  sweep?: SweepResult[];
  profile?: ProfileResult;
}

/** What the markdown says that the JSON does not hold. */
export interface MarkdownOptions {
  /** Requests per second of the steady-rate and fault runs. */
  readonly steadyRate: number;
}

/** What bounds our pipeline: CPU per send, by process, against the machine's cores. */
export function analysis(ours: SystemResult, ceil?: SystemResult): string {
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

/** CPU microseconds per send of our processes (the services and PostgreSQL; not the driver or the broker). */
function cpuMicrosPerSend(r: SystemResult): number {
  return r.usage
    .filter((u) => u.name !== 'kafka broker')
    .reduce((sum, u) => sum + (u.cpuSeconds / r.distinct) * 1e6, 0);
}

/** The largest peak RSS of one of our services, in the main run and the scaling runs. */
function peakRss(ours: SystemResult | undefined, scaling: readonly SystemResult[]): string {
  const runs = [...(ours ? [ours] : []), ...scaling.filter((r) => r.system.startsWith('outreach'))];
  const services = runs.flatMap((r) =>
    r.usage
      .filter((u) => !u.name.startsWith('postgres') && u.name !== 'kafka broker')
      .map((u) => ({ ...u, requests: r.requests })),
  );
  const top = [...services].sort((a, b) => b.peakRssMiB - a.peakRssMiB)[0];
  return top ? `${top.peakRssMiB} MiB (${top.name}, ${top.requests} requests)` : 'n/a';
}

function usageText(usage: readonly ProcessUsage[]): string {
  return usage.map((u) => `${u.name} ${u.cpuSeconds} s / ${u.peakRssMiB} MiB`).join('; ');
}

function cpuPerSend(r: SystemResult): string {
  return r.usage
    .filter((u) => u.cpuSeconds > 0)
    .map((u) => `${u.name} ${Math.round((u.cpuSeconds / r.distinct) * 1e6)}`)
    .join(', ');
}

const systemHeader =
  '| system | requests | sends/s | seconds | latency p50 / p95 / p99 (ms) | delivered | duplicate deliveries | CPU seconds / peak RSS per process |\n|---|---|---|---|---|---|---|---|';

function systemRow(r: SystemResult): string {
  return `| ${r.system}${r.note ? ` (${r.note})` : ''} | ${r.requests} (${r.distinct} distinct) | ${r.sendsPerSecond} | ${r.seconds} | ${r.latencyMs.p50} / ${r.latencyMs.p95} / ${r.latencyMs.p99} | ${r.delivered} | ${r.duplicates} | ${usageText(r.usage)} |`;
}

export function markdown(report: BenchReport, options: MarkdownOptions): string {
  const { main = [], steady = [], faults = [], scaling = [] } = report;
  const ours = main.find((r) => r.system.startsWith('outreach'));
  const ceil = main.find((r) => r.system.startsWith('ceiling'));
  const peers = main.filter((r) => !r.system.startsWith('outreach') && !r.system.startsWith('ceiling'));
  const pgboss = peers.find((r) => r.system.startsWith('pg-boss'));
  const steadyOurs = steady.find((r) => r.system.startsWith('outreach'));
  const ratio = (a?: SystemResult, b?: SystemResult) =>
    a && b ? (a.sendsPerSecond / b.sendsPerSecond).toFixed(2) : 'n/a';
  const lines = [
    '# Benchmarks',
    '',
    machineMarkdown(report.machine),
    '- Everything runs on this one machine at once: the services or workers, Kafka, PostgreSQL, Redis and the',
    '  benchmark driver itself (which publishes the requests and reads the results), so they share its 2 cores.',
    '',
    '## Targets and where we stand',
    '',
    '| target (issue #29) | result |',
    '|---|---|',
    `| CPU per send, all our processes ≤ 350 µs | ${ours ? `${Math.round(cpuMicrosPerSend(ours))} µs` : 'n/a'} |`,
    `| sends/s ≥ 0.25× the ceiling of the same run | ${ratio(ours, ceil)}× (ours ${ours?.sendsPerSecond ?? 'n/a'}, ceiling ${ceil?.sendsPerSecond ?? 'n/a'} sends/s) |`,
    `| sends/s ≥ 2× pg-boss | ${ratio(ours, pgboss)}× (${peers.map((p) => `${p.system} ${p.sendsPerSecond}/s, ours ${ratio(ours, p)}×`).join('; ') || 'n/a'}) |`,
    `| steady ${options.steadyRate} requests/s held, p50 < 50 ms, p99 < 250 ms | ${steadyOurs ? `${steadyOurs.sendsPerSecond}/s delivered; p50 ${steadyOurs.latencyMs.p50} ms, p99 ${steadyOurs.latencyMs.p99} ms` : 'n/a'} |`,
    `| partitions resumed ≤ 10 s after a sender SIGKILL | ${resumed(faults)} |`,
    `| peak RSS per service < 200 MB | ${peakRss(ours, scaling)} |`,
    `| 0 duplicates under the kills | ${faults.map((f) => `${f.system}: ${f.duplicates}`).join('; ') || 'n/a'} |`,
    '',
    report.analysis ?? '',
    '',
    '## Side by side: throughput (every request published at once), same request set (10% repeats), null provider',
    '',
    'Latency here is queueing: every request is handed over at the start, so p50 is about half the drain time.',
    '',
    systemHeader,
    ...main.map(systemRow),
    '',
    'CPU microseconds per send, by process: ' + main.map((r) => `**${r.system}**: ${cpuPerSend(r)}`).join('; ') + '.',
    '',
    ...main.filter((r) => r.database).map((r) => databaseLine(r)),
    ...main.filter((r) => r.hops).map((r) => hopTable(r, 'every request published at once: queueing dominates')),
    `## Latency at a steady ${options.steadyRate} requests/s`,
    '',
    systemHeader,
    ...steady.map(systemRow),
    '',
    ...steady.filter((r) => r.hops).map((r) => hopTable(r, `a steady ${options.steadyRate} requests/s`)),
    `## Worker SIGKILL ×3 mid-run, at ${options.steadyRate} requests/s, provider answering 50 ms after accepting (sender for ours; one of two workers for the peers; restarted each time)`,
    '',
    'A delivery the provider accepted but whose answer was lost to the kill: the peers run the job again once their',
    'lock (BullMQ, 30 s) or expiry (pg-boss, 15 s) lapses, and the candidate gets a second email; ours records the send',
    'as `ambiguous` and never repeats it (an operator resolves it, docs/operations.md section 5). Our run is longer: a',
    "killed sender's partitions wait for its Kafka session (8 s) to time out, and its in-flight sends for their lease.",
    '',
    systemHeader,
    ...faults.map(systemRow),
    '',
    '## Pipeline scaling',
    '',
    systemHeader,
    ...scaling.map(systemRow),
    '',
  ];
  const { check, experiment, sweep, profile } = report;
  if (check)
    lines.push(
      '## Check before compose (`GET /v1/sends/check`, autocannon)',
      '',
      `${check.rows.toLocaleString('en')} rows in the sent log${check.seedSeconds === undefined ? '' : ` (seeded through the sender's backfill command in ${check.seedSeconds} s)`}; target ${check.targetRate} req/s, achieved ${check.achievedRate} req/s; latency p50 ${check.p50} ms, p99 ${check.p99} ms, max ${check.max} ms; ${check.errors} errors.`,
      '',
    );
  if (experiment)
    lines.push(
      '## Experiment assignment (HTTP, autocannon)',
      '',
      `Single (\`PUT /v1/experiments/:id/assignments/:candidateId\`, new candidates): ${experiment.singlePerSecond} assignments/s, p99 ${experiment.singleP99Ms} ms. Batched (\`POST /v1/experiments/:id/assignments\`, ${experiment.batchSize} per call): ${experiment.batchedPerSecond} assignments/s, p99 ${experiment.batchP99Ms} ms per call. ${experiment.errors} errors.`,
      '',
    );
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
  if (profile) {
    const names = Object.keys(profile.services);
    const shares = Object.values(profile.services);
    lines.push(
      `## Profile (\`--cpu-prof\` of the four services, ${profile.requests} requests, ${profile.sendsPerSecond} sends/s while profiled)`,
      '',
      `| where the self time goes | ${names.map((n) => `${n} %`).join(' | ')} |`,
      `|---|${names.map(() => '---').join('|')}|`,
      ...[...new Set(shares.flatMap((list) => list.map((c) => c.category)))].map(
        (category) =>
          `| ${category} | ${shares.map((list) => list.find((c) => c.category === category)?.share ?? 0).join(' | ')} |`,
      ),
      '',
    );
  }
  return lines.join('\n');
}

/** The failover after each of our sender's kills: the first claim after it. */
function resumed(faults: readonly SystemResult[]): string {
  const times = faults.flatMap((f) => f.resumedAfterKillMs ?? []);
  if (times.length === 0) return 'n/a';
  const shown = times.map((ms) => (ms < 0 ? 'no claim within 60 s' : `${(ms / 1000).toFixed(1)} s`));
  return `${shown.join(', ')} (from the SIGKILL to the restarted sender's first claim; session 8 s, heartbeats 1 s)`;
}

/** Where a send's time went, hop by hop, as a table for the report. */
export function hopTable(r: SystemResult, what: string): string {
  if (!r.hops?.length) return '';
  return [
    `Per hop, **${r.system}** (${what}); ms, over the sends with both timestamps:`,
    '',
    '| hop | p50 | p95 | p99 | max | sends |',
    '|---|---|---|---|---|---|',
    ...r.hops.map((h) => `| ${h.hop} | ${h.p50} | ${h.p95} | ${h.p99} | ${h.max} | ${h.count} |`),
    '',
  ].join('\n');
}

/** The database's work per send of one run, as a sentence for the report. */
export function databaseLine(r: SystemResult): string {
  const cost = r.database;
  if (!cost) return '';
  const statements = Object.entries(cost.statementsPerSend);
  const total = statements.reduce((sum, [, n]) => sum + n, 0);
  return (
    `PostgreSQL per send, **${r.system}**: ${total.toFixed(1)} statements ` +
    `(${statements.map(([service, n]) => `${service} ${n.toFixed(1)}`).join(', ')}), ` +
    `${cost.transactionsPerSend.toFixed(2)} commits, ${Math.round(cost.walBytesPerSend)} bytes of WAL.\n` +
    (cost.rowsPerSend?.length
      ? [
          '',
          '| table (service.table) | inserted / send | updated / send (of which HOT) | deleted / send |',
          '|---|---|---|---|',
          ...cost.rowsPerSend.map(
            (t) =>
              `| ${t.table} | ${t.inserted.toFixed(2)} | ${t.updated.toFixed(2)} (${t.hotUpdated.toFixed(2)}) | ${t.deleted.toFixed(2)} |`,
          ),
          '',
        ].join('\n')
      : '')
  );
}
