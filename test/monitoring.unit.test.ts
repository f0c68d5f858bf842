/**
 * Metrics and alerts, checked where they are declared: the metric catalogue against Prometheus'
 * naming rules, the code that creates each metric, and docs/operations.md section 10; the alert rules
 * with promtool (`check rules`, then `test rules` over deploy/prometheus/tests, then again against
 * rules that never fire, so each alert's tests are shown able to fail); the PrometheusRule against
 * the rules file it is generated from; and the monitoring component against the service pods.
 */
import { spawnSync } from 'node:child_process';
import { cpSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, relative } from 'node:path';
import { METRICS, type MetricSpec } from '@outreach/shared';
import { parse as parseYaml, parseAllDocuments } from 'yaml';
import { afterAll, describe, expect, it } from 'vitest';
import { hasKubectl, renderBaseWithComponent } from './kustomize.js';
import { prometheusRuleFile, prometheusRuleYaml, rulesFile } from '../scripts/monitoring.js';

const root = join(import.meta.dirname, '..');
const testsDir = join(root, 'deploy', 'prometheus', 'tests');
const componentDir = join(root, 'deploy', 'kubernetes', 'components', 'monitoring');
const SERVICES = ['planner', 'sender', 'experiment', 'liveness'];
const catalogue = Object.entries(METRICS) as Array<[string, MetricSpec]>;

interface Rule {
  alert?: string;
  record?: string;
  expr: string;
  for?: string;
  labels?: Record<string, string>;
  annotations?: Record<string, string>;
}
interface RuleGroup {
  name: string;
  rules: Rule[];
}
interface PromtoolTest {
  name: string;
  alert_rule_test?: Array<{ eval_time: string; alertname: string; exp_alerts?: unknown[] }>;
}

const groups = (parseYaml(readFileSync(rulesFile, 'utf8')) as { groups: RuleGroup[] }).groups;
const alerts = groups.flatMap((g) => g.rules).filter((r): r is Rule & { alert: string } => r.alert !== undefined);
const testFiles = readdirSync(testsDir)
  .filter((f) => f.endsWith('.yml'))
  .map((f) => join(testsDir, f));

describe('the metric catalogue', () => {
  it("follows Prometheus' naming rules: one prefix, units as suffixes, _total on counters only", () => {
    for (const [name, spec] of catalogue) {
      expect(name, name).toMatch(/^outreach_[a-z][a-z0-9_]*[a-z0-9]$/);
      expect(name.endsWith('_total'), `${name}: counters and only counters end in _total`).toBe(
        spec.type === 'counter',
      );
      if (spec.type === 'histogram') expect(name, `${name}: a histogram names its unit`).toMatch(/_(seconds|bytes)$/);
      if (/(_age|_duration|_latency)/.test(name)) expect(name, `${name}: a time is in seconds`).toMatch(/_seconds$/);
      expect(name, `${name}: base units only`).not.toMatch(/_(milliseconds|ms|minutes|hours|kilobytes|mb)(_|$)/);
      expect(spec.help.length, `${name} has a help text`).toBeGreaterThan(10);
    }
  });

  it('labels are bounded: no reserved names, no ids that grow with the data, and a stated bound where data makes values', () => {
    const reserved = ['service', 'job', 'instance', 'le', 'quantile', 'pod', 'namespace'];
    const unbounded = ['candidate', 'email', 'address', 'conversation', 'request', 'send', 'event', 'url', 'path'];
    const fromData = ['campaign', 'experiment', 'partition'];
    for (const [name, spec] of catalogue) {
      for (const label of spec.labels) {
        expect(label, `${name}{${label}}`).toMatch(/^[a-z][a-z0-9_]*$/);
        expect(reserved, `${name}{${label}}: set by the registry or the scrape`).not.toContain(label);
        expect(
          unbounded.some((id) => label.startsWith(id)),
          `${name}{${label}}: one series per id`,
        ).toBe(false);
        if (fromData.includes(label)) expect(spec.bound, `${name}{${label}} needs a documented bound`).toBeTruthy();
      }
    }
  });

  it('every declared metric is created by the code, from its catalogue name', () => {
    const sources = [join(root, 'packages', 'shared', 'src'), ...SERVICES.map((s) => join(root, 'services', s, 'src'))]
      .flatMap((dir) => readdirSync(dir, { recursive: true, encoding: 'utf8' }).map((f) => join(dir, f)))
      .filter((f) => f.endsWith('.ts') && !f.includes('.test.') && !f.endsWith(join('metrics', 'catalog.ts')))
      .map((f) => readFileSync(f, 'utf8'))
      .join('\n');
    for (const [name] of catalogue) expect(sources.includes(`'${name}'`), `${name} is created somewhere`).toBe(true);
  });
});

/** Section 10 of the runbook, and its rows that start with a backticked name. */
function runbookSection(): string {
  const text = readFileSync(join(root, 'docs', 'operations.md'), 'utf8');
  const start = text.indexOf('\n## 10. Metrics and alerts\n');
  const end = text.indexOf('\n## ', start + 10);
  expect(start, 'docs/operations.md has "## 10. Metrics and alerts"').toBeGreaterThan(0);
  return text.slice(start, end);
}
function tableRows(section: string, heading: string): string[][] {
  const body = section.slice(section.indexOf(`\n### ${heading}\n`));
  const table = body.slice(0, body.indexOf('\n### ', 5) > 0 ? body.indexOf('\n### ', 5) : undefined);
  return table
    .split('\n')
    .filter((line) => line.startsWith('| `'))
    .map((line) =>
      line
        .slice(1, -1)
        .split(' | ')
        .map((cell) => cell.trim()),
    );
}
const ticked = (cell: string) => [...cell.matchAll(/`([^`]+)`/g)].map((m) => m[1]);

describe('docs/operations.md section 10', () => {
  it('lists every metric the services register, with its type, labels and origin, and nothing else', () => {
    const rows = tableRows(runbookSection(), 'Metrics');
    const documented = new Map(
      rows.map(([name, type, labels, from]) => [ticked(name ?? '')[0], { type, labels, from }]),
    );
    expect([...documented.keys()].sort()).toEqual(catalogue.map(([name]) => name).sort());
    for (const [name, spec] of catalogue) {
      const row = documented.get(name);
      expect(row?.type, `${name}: type`).toBe(spec.type);
      expect(ticked(row?.labels ?? ''), `${name}: labels`).toEqual([...spec.labels]);
      expect(row?.from, `${name}: from`).toBe(spec.owner === 'shared' ? 'every service' : spec.owner);
    }
    expect(runbookSection()).toMatch(/`process_\*`, `nodejs_\*`/);
  });

  it('says for every alert when it fires and what to do, and every runbook annotation points at an existing section', () => {
    const rows = tableRows(runbookSection(), 'Alerts');
    const documented = new Map(
      rows.map(([name, severity, when, todo]) => [ticked(name ?? '')[0], { severity, when, todo }]),
    );
    expect([...documented.keys()].sort()).toEqual(alerts.map((a) => a.alert).sort());
    const runbook = readFileSync(join(root, 'docs', 'operations.md'), 'utf8');
    for (const alert of alerts) {
      const row = documented.get(alert.alert);
      expect(row?.severity, `${alert.alert}: severity`).toBe(alert.labels?.severity);
      expect(row?.when?.length ?? 0, `${alert.alert}: when it fires`).toBeGreaterThan(20);
      expect(row?.todo?.length ?? 0, `${alert.alert}: what to do`).toBeGreaterThan(20);
      const pointer = alert.annotations?.runbook ?? '';
      expect(pointer, `${alert.alert} has a runbook annotation`).toMatch(/^docs\/operations\.md/);
      for (const [, n] of pointer.matchAll(/section (\d+a?)/g)) {
        expect(runbook, `${alert.alert}: section ${n}`).toContain(`\n## ${n}. `);
      }
      for (const [, title] of pointer.matchAll(/"([^"]+)"/g))
        expect(runbook, `${alert.alert}: "${title}"`).toContain(`\n## ${title}\n`);
      const named = /section 10, (\w+)/.exec(pointer)?.[1];
      if (named) expect(named).toBe(alert.alert);
      expect(alert.annotations?.summary, `${alert.alert} has a summary`).toBeTruthy();
    }
  });
});

describe('the alert rules', () => {
  it('name only declared metrics, group by service and never by job', () => {
    const declared = new Set(catalogue.map(([name]) => name));
    for (const rule of alerts) {
      const names = [...rule.expr.matchAll(/\b(outreach_[a-z0-9_]+)/g)].map((m) => m[1] as string);
      expect(names.length, `${rule.alert} reads a metric`).toBeGreaterThan(0);
      for (const name of names) {
        const base = name.replace(/_(bucket|count|sum)$/, '');
        expect(declared.has(name) || declared.has(base), `${rule.alert}: ${name} is declared`).toBe(true);
      }
      expect(rule.expr, rule.alert).not.toMatch(/\bjob\b/);
      const groupings = [...rule.expr.matchAll(/\bby \(([^)]*)\)/g)].map((m) => (m[1] ?? '').split(/,\s*/));
      for (const labels of groupings) expect(labels, `${rule.alert} groups by service`).toContain('service');
      if (groupings.length === 0) {
        // absent() keeps the labels of its equality matchers: one per service.
        for (const service of SERVICES) expect(rule.expr).toContain(`service="${service}"`);
      }
      expect(['critical', 'warning', 'info']).toContain(rule.labels?.severity);
    }
  });

  it('every alert has a promtool test where it fires and one where it stays silent', () => {
    const cases = testFiles.flatMap((file) =>
      ((parseYaml(readFileSync(file, 'utf8')) as { tests: PromtoolTest[] }).tests ?? []).flatMap(
        (test) => test.alert_rule_test ?? [],
      ),
    );
    for (const { alert } of alerts) {
      const own = cases.filter((c) => c.alertname === alert);
      expect(
        own.some((c) => (c.exp_alerts ?? []).length > 0),
        `${alert}: a case where it fires`,
      ).toBe(true);
      expect(
        own.some((c) => (c.exp_alerts ?? []).length === 0),
        `${alert}: a case where it does not`,
      ).toBe(true);
    }
  });

  describe('with promtool', () => {
    // Never skipped: without promtool every test below fails, saying how to get it.
    const found = spawnSync('promtool', ['--version'], { encoding: 'utf8' });
    const promtool = (...args: string[]) => {
      if (found.error || found.status !== 0) {
        throw new Error(
          "promtool is not installed: install Debian's `prometheus` package (apt-get install -y prometheus); .ci/run does",
        );
      }
      return spawnSync('promtool', args, { encoding: 'utf8', cwd: root });
    };
    let scratch: string | undefined;
    afterAll(() => {
      if (scratch) rmSync(scratch, { recursive: true, force: true });
    });

    it('promtool check rules accepts the rules file', () => {
      const result = promtool('check', 'rules', rulesFile);
      expect(result.status, `${result.stdout}${result.stderr}`).toBe(0);
      expect(result.stdout).toContain(`SUCCESS: ${groups.flatMap((g) => g.rules).length} rules found`);
    });

    it.each(testFiles.map((f) => [relative(root, f), f]))('promtool test rules %s passes', (_name, file) => {
      const result = promtool('test', 'rules', file);
      expect(result.status, `${result.stdout}${result.stderr}`).toBe(0);
    });

    it('the tests fail for every alert when its rule never fires (they can fail)', () => {
      const silenced = {
        groups: groups.map((g) => ({
          ...g,
          rules: g.rules.map((r) => ({ ...r, expr: 'vector(1) == 0' })),
        })),
      };
      const dir = (scratch = mkdtempSync(join(tmpdir(), 'outreach-rules-')));
      writeFileSync(join(dir, 'rules.yml'), JSON.stringify(silenced));
      cpSync(testsDir, join(dir, 'tests'), { recursive: true });
      const result = promtool('test', 'rules', ...readdirSync(join(dir, 'tests')).map((f) => join(dir, 'tests', f)));
      expect(result.status).not.toBe(0);
      const output = `${result.stdout}${result.stderr}`;
      for (const { alert } of alerts) expect(output, `${alert}'s tests notice it`).toContain(`alertname: ${alert},`);
    });
  });
});

describe('the Kubernetes monitoring component', () => {
  it('its PrometheusRule is what `npm run monitoring:gen` makes of deploy/prometheus/rules.yml', () => {
    expect(readFileSync(prometheusRuleFile, 'utf8')).toBe(prometheusRuleYaml());
    const rule = parseYaml(readFileSync(prometheusRuleFile, 'utf8')) as { kind: string; spec: { groups: unknown } };
    expect(rule.kind).toBe('PrometheusRule');
    expect(rule.spec.groups).toEqual(groups);
  });

  it('its PodMonitor scrapes /metrics on the http port of the four services and the console, and no Job', () => {
    const monitor = parseYaml(readFileSync(join(componentDir, 'podmonitor.yaml'), 'utf8')) as {
      kind: string;
      spec: {
        selector: {
          matchLabels: Record<string, string>;
          matchExpressions: Array<{ key: string; operator: string; values: string[] }>;
        };
        podMetricsEndpoints: Array<{ port: string; path: string }>;
      };
    };
    expect(monitor.kind).toBe('PodMonitor');
    const base = join(root, 'deploy', 'kubernetes', 'base');
    const pods = readdirSync(base)
      .filter((f) => f.endsWith('.yaml'))
      .flatMap((f) => parseAllDocuments(readFileSync(join(base, f), 'utf8')).map((d) => d.toJS()))
      .filter((o) => o?.kind === 'Deployment' || o?.kind === 'Job')
      .map((o) => ({
        kind: o.kind as string,
        // The base's kustomization adds part-of to every object; its template labels may carry it already.
        labels: { 'app.kubernetes.io/part-of': 'outreach', ...(o.spec.template.metadata.labels ?? {}) } as Record<
          string,
          string
        >,
        ports: (o.spec.template.spec.containers as Array<{ ports?: Array<{ name?: string }> }>).flatMap((c) =>
          (c.ports ?? []).map((p) => p.name),
        ),
      }));
    const selects = (labels: Record<string, string>) =>
      Object.entries(monitor.spec.selector.matchLabels).every(([k, v]) => labels[k] === v) &&
      monitor.spec.selector.matchExpressions.every(
        (e) => e.operator === 'In' && e.values.includes(labels[e.key] ?? ''),
      );
    const selected = pods.filter((p) => selects(p.labels));
    expect(selected.map((p) => p.labels['app.kubernetes.io/component']).sort()).toEqual(
      [...SERVICES, 'console'].sort(),
    );
    expect(selected.every((p) => p.kind === 'Deployment')).toBe(true);
    for (const endpoint of monitor.spec.podMetricsEndpoints) {
      expect(endpoint.path).toBe('/metrics');
      for (const pod of selected) expect(pod.ports).toContain(endpoint.port);
    }
  });

  it.skipIf(!hasKubectl)('renders into an overlay: both resources in its namespace, the rules intact', () => {
    const result = renderBaseWithComponent(componentDir);
    expect(result.status, result.stderr).toBe(0);
    const objects = parseAllDocuments(result.stdout).map((d) => d.toJS());
    const monitor = objects.find((o) => o.kind === 'PodMonitor');
    const rule = objects.find((o) => o.kind === 'PrometheusRule');
    expect(monitor?.metadata.namespace).toBe('outreach');
    expect(rule?.metadata.namespace).toBe('outreach');
    expect(rule?.spec.groups).toEqual(groups);
  });
});
