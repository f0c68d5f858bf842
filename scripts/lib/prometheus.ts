/**
 * A real Prometheus (Debian's `prometheus` package) scraping the services of a local stack and
 * evaluating the platform's alert rules: what `npm run demo` starts when the binary is on PATH, and
 * what test/e2e/alerts.e2e.test.ts watches alerts fire in.
 *
 * Each instance has its own directory (its generated prometheus.yml, the rules it loads, its TSDB),
 * listens on 127.0.0.1 on a free port, and is stopped, directory and all, with its runner.
 *
 * The rules are deploy/prometheus/rules.yml as they are. A test that cannot wait the production
 * `for:` durations (minutes) loads `rulesWithShortFor(...)` instead: the same file, parsed, with
 * every `for:` divided by a factor and nothing else changed, so there is no second set of rules.
 */
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { mkdirSync, readdirSync, readFileSync, rmdirSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { freePort, waitFor } from '@outreach/testkit';
import { isMap, isSeq, parseDocument, stringify } from 'yaml';
import { root } from './paths.js';

export const rulesFile = join(root, 'deploy', 'prometheus', 'rules.yml');

export interface ScrapeTarget {
  /** The `service` label of the target (the services also put it on every series they export). */
  readonly service: string;
  /** host:port serving /metrics. */
  readonly address: string;
}

export interface PrometheusOptions {
  /** Its own directory, new or empty: prometheus.yml, rules.yml and data/ go there; removed on stop. */
  readonly dir: string;
  readonly targets: readonly ScrapeTarget[];
  /** The rules' YAML (default: deploy/prometheus/rules.yml as it is). */
  readonly rules?: string;
  /** Scrape and rule evaluation interval, in seconds (default 2: a demo's minutes are short). */
  readonly intervalSeconds?: number;
  /** Default: a free port. */
  readonly port?: number;
  readonly readyTimeoutMs?: number;
  /** The binary (default `prometheus` on PATH). */
  readonly binary?: string;
}

/** Whether a Prometheus binary answers `--version` (Debian: `apt-get install prometheus`). */
export function prometheusAvailable(binary = 'prometheus'): boolean {
  const probe = spawnSync(binary, ['--version'], { encoding: 'utf8' });
  return !probe.error && probe.status === 0;
}

/** A Prometheus duration (`90s`, `15m`, `2h`, `1h30m`) in milliseconds. */
export function durationMs(text: string): number {
  const units: Record<string, number> = { ms: 1, s: 1_000, m: 60_000, h: 3_600_000, d: 86_400_000, w: 604_800_000 };
  const parts = [...text.matchAll(/(\d+)(ms|s|m|h|d|w)/g)];
  if (parts.length === 0 || parts.map((p) => p[0]).join('') !== text) throw new Error(`not a duration: ${text}`);
  return parts.reduce((ms, [, n, unit]) => ms + Number(n) * (units[unit as string] as number), 0);
}

/**
 * The rules file with every alert's `for:` divided by `factor` (rounded to whole milliseconds), for
 * a test that watches alerts fire in seconds instead of minutes. Everything else (expressions, their
 * windows, labels, annotations, comments) is the file's own. Throws if the file has no `for:` at all,
 * so a change of layout cannot silently leave the durations long.
 */
export function rulesWithShortFor(rules: string, factor: number): string {
  if (!(factor >= 1)) throw new Error(`factor must be at least 1, not ${factor}`);
  const doc = parseDocument(rules);
  if (doc.errors.length > 0) throw new Error(`the rules do not parse: ${doc.errors[0]?.message}`);
  const groups = isMap(doc.contents) ? doc.contents.get('groups', true) : undefined;
  if (!isSeq(groups)) throw new Error('the rules have no groups');
  let shortened = 0;
  for (const group of groups.items) {
    const groupRules = isMap(group) ? group.get('rules', true) : undefined;
    if (!isSeq(groupRules)) continue;
    for (const rule of groupRules.items) {
      if (!isMap(rule) || !rule.has('for')) continue;
      const ms = Math.max(1, Math.round(durationMs(String(rule.get('for'))) / factor));
      rule.set('for', `${ms}ms`);
      shortened++;
    }
  }
  if (shortened === 0) throw new Error('the rules have no `for:` to shorten');
  return doc.toString({ lineWidth: 0 });
}

/** The prometheus.yml of an instance: one job, one static target per service, labelled with it. */
export function prometheusConfig(targets: readonly ScrapeTarget[], rulesPath: string, intervalSeconds = 2): string {
  const interval = `${intervalSeconds}s`;
  return stringify({
    global: { scrape_interval: interval, scrape_timeout: interval, evaluation_interval: interval },
    rule_files: [rulesPath],
    scrape_configs: [
      {
        job_name: 'outreach',
        metrics_path: '/metrics',
        // The services label every series `service` themselves; equal values here, and theirs win.
        honor_labels: true,
        static_configs: targets.map((t) => ({ targets: [t.address], labels: { service: t.service } })),
      },
    ],
  });
}

/** One series or sample of an instant query's answer. */
export interface VectorSample {
  readonly metric: Record<string, string>;
  readonly value: [number, string];
}

export interface PrometheusAlert {
  readonly labels: Record<string, string>;
  readonly annotations: Record<string, string>;
  readonly state: 'pending' | 'firing';
  readonly activeAt: string;
  readonly value: string;
}

export class QueryError extends Error {
  override readonly name = 'QueryError';
}

export class Prometheus {
  readonly port: number;
  readonly url: string;
  private readonly child: ChildProcess;
  private readonly logLines: string[] = [];
  private exit: number | string | undefined;
  private readonly exitGuard = () => this.child.kill('SIGKILL');

  private constructor(
    private readonly dir: string,
    port: number,
    args: readonly string[],
    binary: string,
  ) {
    this.port = port;
    this.url = `http://127.0.0.1:${port}`;
    this.child = spawn(binary, args, { cwd: dir, stdio: ['ignore', 'pipe', 'pipe'] });
    for (const stream of [this.child.stdout, this.child.stderr]) {
      stream?.setEncoding('utf8');
      stream?.on('data', (chunk: string) => {
        this.logLines.push(...chunk.split('\n').filter(Boolean));
        this.logLines.splice(0, Math.max(0, this.logLines.length - 200));
      });
    }
    this.child.once('exit', (code, signal) => (this.exit = code ?? signal ?? 'unknown'));
    this.child.once('error', (error) => (this.exit = error.message));
    process.on('exit', this.exitGuard);
  }

  /** Writes its configuration and rules, starts it, and resolves once /-/ready answers 200. */
  static async start(options: PrometheusOptions): Promise<Prometheus> {
    const { dir } = options;
    mkdirSync(dir, { recursive: true });
    // Stop removes what start put there, so start takes only a directory of its own.
    if (readdirSync(dir).length > 0) throw new Error(`${dir} is not empty: give each Prometheus a new directory`);
    mkdirSync(join(dir, 'data'));
    const rulesPath = join(dir, 'rules.yml');
    writeFileSync(rulesPath, options.rules ?? readFileSync(rulesFile, 'utf8'));
    writeFileSync(
      join(dir, 'prometheus.yml'),
      prometheusConfig(options.targets, rulesPath, options.intervalSeconds ?? 2),
    );
    const port = options.port ?? (await freePort());
    const prometheus = new Prometheus(
      dir,
      port,
      [
        `--config.file=${join(dir, 'prometheus.yml')}`,
        `--storage.tsdb.path=${join(dir, 'data')}`,
        `--web.listen-address=127.0.0.1:${port}`,
        '--storage.tsdb.retention.time=1d',
        '--log.level=warn',
      ],
      options.binary ?? 'prometheus',
    );
    try {
      await waitFor(
        async () => {
          if (prometheus.exit !== undefined) {
            throw new Error(`prometheus exited (${prometheus.exit}):\n${prometheus.logs()}`);
          }
          return (await fetch(`${prometheus.url}/-/ready`)).ok;
        },
        {
          timeoutMs: options.readyTimeoutMs ?? 30_000,
          intervalMs: 100,
          description: `prometheus on ${port} to be ready`,
        },
      );
    } catch (error) {
      await prometheus.stop();
      throw error;
    }
    return prometheus;
  }

  /** Its last log lines (it logs to stderr), for a failure message. */
  logs(lines = 30): string {
    return this.logLines.slice(-lines).join('\n');
  }

  /** SIGTERM (SIGKILL after 10 s), then removes what it wrote, and its directory once empty. */
  async stop(): Promise<void> {
    process.off('exit', this.exitGuard);
    if (this.exit === undefined) {
      this.child.kill('SIGTERM');
      try {
        await waitFor(() => this.exit !== undefined, { timeoutMs: 10_000, description: 'prometheus to exit' });
      } catch {
        this.child.kill('SIGKILL');
        await waitFor(() => this.exit !== undefined, { timeoutMs: 5_000, description: 'prometheus to be killed' });
      }
    }
    for (const entry of ['data', 'prometheus.yml', 'rules.yml']) {
      rmSync(join(this.dir, entry), { recursive: true, force: true });
    }
    try {
      rmdirSync(this.dir);
    } catch {
      // Someone else's file in it: left alone.
    }
  }

  /** GET /api/v1/<path>; the `data` of a success, a QueryError with Prometheus' reason otherwise. */
  async api<T>(path: string, params: Record<string, string> = {}): Promise<T> {
    const response = await fetch(`${this.url}/api/v1/${path}?${new URLSearchParams(params)}`);
    const body = (await response.json()) as { status: string; data: T; errorType?: string; error?: string };
    if (body.status !== 'success')
      throw new QueryError(`${path} ${JSON.stringify(params)}: ${body.errorType}: ${body.error}`);
    return body.data;
  }

  /** An instant query that must evaluate to a vector (or a scalar, as one sample without labels). */
  async query(expr: string): Promise<VectorSample[]> {
    const data = await this.api<{ resultType: string; result: unknown }>('query', { query: expr });
    if (data.resultType === 'scalar') return [{ metric: {}, value: data.result as [number, string] }];
    if (data.resultType !== 'vector') throw new QueryError(`${expr}: a ${data.resultType}, not a vector`);
    return data.result as VectorSample[];
  }

  async alerts(): Promise<PrometheusAlert[]> {
    return (await this.api<{ alerts: PrometheusAlert[] }>('alerts')).alerts;
  }

  /** The active targets' health, by their `service` label. */
  async targetHealth(): Promise<Record<string, string>> {
    const { activeTargets } = await this.api<{
      activeTargets: Array<{ labels: Record<string, string>; health: string }>;
    }>('targets', { state: 'active' });
    return Object.fromEntries(activeTargets.map((t) => [t.labels.service ?? '', t.health]));
  }
}
