/**
 * Reading deploy/grafana/outreach.json for its tests: every panel's queries with Grafana's variables
 * substituted, and the metric names a PromQL expression reads. The unit test checks the names
 * against the metric catalogue; the alerts e2e runs each query in a live Prometheus and checks the
 * names against what the running services expose.
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';

export const dashboardFile = join(import.meta.dirname, '..', 'deploy', 'grafana', 'outreach.json');

export interface Panel {
  id: number;
  type: string;
  title: string;
  gridPos: { h: number; w: number; x: number; y: number };
  datasource?: { type: string; uid: string };
  targets?: Array<{ refId: string; expr: string; instant?: boolean; datasource?: { uid: string } }>;
  panels?: Panel[];
}

export interface Dashboard {
  uid: string;
  title: string;
  panels: Panel[];
  templating: { list: Array<{ name: string; type: string; query?: unknown; allValue?: string }> };
}

export function readDashboard(): Dashboard {
  return JSON.parse(readFileSync(dashboardFile, 'utf8')) as Dashboard;
}

/** Every panel, those inside collapsed rows included. */
export function allPanels(dashboard: Dashboard): Panel[] {
  return dashboard.panels.flatMap((p) => [p, ...(p.panels ?? [])]);
}

/**
 * What Grafana puts in place of its variables when every service is selected: `$service` is the
 * variable's allValue, the intervals are those of a 1-hour view at the default resolution.
 */
export const VARIABLES: Record<string, string> = {
  service: '.+',
  __rate_interval: '1m',
  __interval: '15s',
  __range: '10m',
};

export function substitute(expr: string, variables: Record<string, string> = VARIABLES): string {
  return expr.replace(/\$\{(\w+)\}|\$(\w+)/g, (whole, braced: string | undefined, bare: string | undefined) => {
    const value = variables[braced ?? bare ?? ''];
    if (value === undefined) throw new Error(`${expr}: unknown variable ${whole}`);
    return value;
  });
}

export interface Query {
  readonly panel: string;
  readonly refId: string;
  readonly expr: string;
}

/** Each target of each panel, variables substituted. */
export function dashboardQueries(dashboard: Dashboard): Query[] {
  return allPanels(dashboard).flatMap((panel) =>
    (panel.targets ?? []).map((t) => ({ panel: panel.title, refId: t.refId, expr: substitute(t.expr) })),
  );
}

const KEYWORDS = new Set([
  'and',
  'or',
  'unless',
  'bool',
  'offset',
  'by',
  'without',
  'on',
  'ignoring',
  'group_left',
  'group_right',
  'inf',
  'nan',
]);

/**
 * The metric names a PromQL expression selects: identifiers that are neither functions nor
 * aggregations (followed by `(`), keywords, label names (inside `{}` or a `by`/`on` list) nor
 * strings. `{__name__="..."}` selectors are refused: a dashboard names its metrics.
 */
export function metricNames(expr: string): string[] {
  if (expr.includes('__name__')) throw new Error(`${expr}: selects metrics by __name__`);
  const bare = expr
    .replace(/"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|`[^`]*`/g, '""')
    .replace(/\{[^}]*\}/g, ' ')
    .replace(/\[[^\]]*\]/g, ' ')
    .replace(/\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)/gi, ' ');
  const names = new Set<string>();
  for (const match of bare.matchAll(/[a-zA-Z_:][a-zA-Z0-9_:]*/g)) {
    const name = match[0];
    const before = bare[(match.index ?? 0) - 1] ?? ' ';
    if (/[0-9.]/.test(before)) continue; // a number's exponent or a duration's unit
    if (KEYWORDS.has(name.toLowerCase())) continue;
    if (/^\s*\(/.test(bare.slice((match.index ?? 0) + name.length))) continue;
    names.add(name);
  }
  return [...names];
}
