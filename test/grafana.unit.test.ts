/**
 * The Grafana dashboard deploy/grafana/outreach.json without a Grafana: its shape, the metrics its
 * queries name (declared ones only), that every metric an alert reads is on it, and the ConfigMap the
 * grafana-dashboard component makes of it. test/e2e/alerts.e2e.test.ts runs its queries in a live
 * Prometheus.
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { METRICS } from '@outreach/shared';
import { parse as parseYaml, parseAllDocuments } from 'yaml';
import { describe, expect, it } from 'vitest';
import { rulesFile } from '../scripts/lib/prometheus.js';
import { hasKubectl, renderBaseWithComponent } from './kustomize.js';
import { allPanels, dashboardFile, dashboardQueries, metricNames, readDashboard, substitute } from './grafana.js';

const root = join(import.meta.dirname, '..');
const dashboard = readDashboard();
const panels = allPanels(dashboard);
const queryPanels = panels.filter((p) => p.type !== 'row' && p.type !== 'text');

/** A name the services export: declared in the catalogue (a histogram's series too) or prom-client's defaults. */
function declared(name: string): boolean {
  if (name.startsWith('process_') || name.startsWith('nodejs_')) return true;
  if (Object.hasOwn(METRICS, name)) return true;
  const base = name.replace(/_(bucket|sum|count)$/, '');
  return base !== name && Object.hasOwn(METRICS, base) && METRICS[base as keyof typeof METRICS].type === 'histogram';
}

describe('metricNames', () => {
  it('finds the selected metrics, not functions, aggregations, labels, keywords, strings or durations', () => {
    expect(
      metricNames(
        'histogram_quantile(0.99, sum by (service, le) (rate(a_seconds_bucket{route!~"/health/.*|up"}[5m]))) / on (service) group_left b_total offset 1h > bool 1e+3 and c',
      ).sort(),
    ).toEqual(['a_seconds_bucket', 'b_total', 'c']);
    expect(metricNames('topk(10, max by (partition) (lag{x="y"}))')).toEqual(['lag']);
    expect(() => metricNames('{__name__=~"outreach_.*"}')).toThrow(/__name__/);
  });

  it("substitutes Grafana's variables, and refuses one it does not know", () => {
    expect(substitute('rate(x{service=~"$service"}[$__rate_interval]) ${__range}')).toBe(
      'rate(x{service=~".+"}[1m]) 10m',
    );
    expect(() => substitute('x{pod="$pod"}')).toThrow(/\$pod/);
  });
});

describe('deploy/grafana/outreach.json', () => {
  it('is a dashboard with unique panel ids, a data source variable and panels on a 24-column grid that do not overlap', () => {
    expect(dashboard.uid).toMatch(/^[a-z0-9-]{1,40}$/);
    const ids = panels.map((p) => p.id);
    expect(new Set(ids).size).toBe(ids.length);
    const variables = dashboard.templating.list;
    expect(variables.find((v) => v.name === 'datasource')).toMatchObject({ type: 'datasource', query: 'prometheus' });
    expect(variables.find((v) => v.name === 'service')).toMatchObject({ type: 'query', allValue: '.+' });
    for (const p of queryPanels) {
      expect(p.datasource?.uid, p.title).toBe('${datasource}');
      expect(p.targets?.length, `${p.title} has queries`).toBeGreaterThan(0);
      const refIds = (p.targets ?? []).map((t) => t.refId);
      expect(new Set(refIds).size, `${p.title}: refIds`).toBe(refIds.length);
    }
    const cells = new Set<string>();
    for (const { title, gridPos } of dashboard.panels) {
      expect(gridPos.x + gridPos.w, title).toBeLessThanOrEqual(24);
      for (let x = gridPos.x; x < gridPos.x + gridPos.w; x++) {
        for (let y = gridPos.y; y < gridPos.y + gridPos.h; y++) {
          expect(cells.has(`${x},${y}`), `${title} overlaps at ${x},${y}`).toBe(false);
          cells.add(`${x},${y}`);
        }
      }
    }
  });

  it('has rows for throughput, latency, outcomes, consumer lag, the outbox, stalls and experiments', () => {
    const rows = panels.filter((p) => p.type === 'row').map((p) => p.title);
    expect(rows).toEqual(
      expect.arrayContaining(['Throughput', 'Latency', 'Outcomes', 'Consumer lag', 'Outbox', 'Stalls', 'Experiments']),
    );
  });

  it('names only metrics the services declare, in every query', () => {
    const queries = dashboardQueries(dashboard);
    for (const { panel, refId, expr } of queries) {
      const names = metricNames(expr);
      expect(names.length, `${panel} ${refId} reads a metric`).toBeGreaterThan(0);
      for (const name of names) expect(declared(name), `${panel} ${refId}: ${name} is declared`).toBe(true);
    }
  });

  it('shows every metric an alert rule reads', () => {
    const shown = new Set(dashboardQueries(dashboard).flatMap((q) => metricNames(q.expr)));
    const rules = (
      parseYaml(readFileSync(rulesFile, 'utf8')) as { groups: Array<{ rules: Array<{ alert: string; expr: string }> }> }
    ).groups.flatMap((g) => g.rules);
    for (const rule of rules) {
      for (const name of metricNames(rule.expr)) {
        expect(shown.has(name), `${rule.alert} reads ${name}`).toBe(true);
      }
    }
  });

  it.skipIf(!hasKubectl)(
    "the grafana-dashboard component renders it, unchanged, as a ConfigMap Grafana's sidecar loads, in the overlay's namespace",
    () => {
      const result = renderBaseWithComponent(join(root, 'deploy', 'kubernetes', 'components', 'grafana-dashboard'));
      expect(result.status, result.stderr).toBe(0);
      const maps = parseAllDocuments(result.stdout)
        .map((d) => d.toJS())
        .filter((o) => o?.kind === 'ConfigMap' && o.metadata.labels?.grafana_dashboard === '1');
      expect(maps).toHaveLength(1);
      expect(maps[0].metadata).toMatchObject({ name: 'outreach-grafana-dashboard', namespace: 'outreach' });
      expect(maps[0].data['outreach.json']).toBe(readFileSync(dashboardFile, 'utf8'));
    },
  );
});
