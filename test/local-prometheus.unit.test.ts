/**
 * scripts/lib/prometheus.ts without starting Prometheus: the test-time rules differ from
 * deploy/prometheus/rules.yml in their `for:` durations only, and the generated prometheus.yml is one
 * `promtool check config` accepts, rules included. test/e2e/alerts.e2e.test.ts runs the real thing.
 */
import { spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parse as parseYaml } from 'yaml';
import { afterAll, describe, expect, it } from 'vitest';
import { durationMs, Prometheus, prometheusConfig, rulesFile, rulesWithShortFor } from '../scripts/lib/prometheus.js';

interface Rules {
  groups: Array<{ name: string; rules: Array<Record<string, unknown>> }>;
}
const source = readFileSync(rulesFile, 'utf8');
const scratch = mkdtempSync(join(tmpdir(), 'outreach-prometheus-'));
afterAll(() => rmSync(scratch, { recursive: true, force: true }));

describe('durationMs', () => {
  it("reads Prometheus' durations and refuses anything else", () => {
    expect(durationMs('15m')).toBe(900_000);
    expect(durationMs('2h')).toBe(7_200_000);
    expect(durationMs('1h30m')).toBe(5_400_000);
    expect(durationMs('250ms')).toBe(250);
    for (const bad of ['', '15', 'm', '15 m', '1.5h', '15m; rm -rf', '-5m'])
      expect(() => durationMs(bad), bad).toThrow();
  });
});

describe('rulesWithShortFor', () => {
  it('divides every `for:` of deploy/prometheus/rules.yml by the factor and changes nothing else', () => {
    const original = parseYaml(source) as Rules;
    const short = parseYaml(rulesWithShortFor(source, 300)) as Rules;
    const withFor = original.groups.flatMap((g) => g.rules).filter((r) => r.for !== undefined);
    expect(withFor.length).toBeGreaterThan(5);
    const strip = (rules: Rules) => rules.groups.map((g) => ({ ...g, rules: g.rules.map(({ for: _, ...r }) => r) }));
    expect(strip(short)).toEqual(strip(original));
    const shortRules = short.groups.flatMap((g) => g.rules);
    original.groups
      .flatMap((g) => g.rules)
      .forEach((rule, i) => {
        const shortened = shortRules[i]?.for;
        if (rule.for === undefined) expect(shortened, String(rule.alert)).toBeUndefined();
        else
          expect(durationMs(String(shortened)), String(rule.alert)).toBe(
            Math.round(durationMs(String(rule.for)) / 300),
          );
      });
    // Comments stay: the test-time file still says what each rule is for.
    expect(rulesWithShortFor(source, 300)).toContain('# Events recorded in the database but not on Kafka');
  });

  it('refuses rules it cannot shorten, and a factor below 1', () => {
    expect(() =>
      rulesWithShortFor('groups:\n  - name: g\n    rules:\n      - alert: A\n        expr: up == 0\n', 10),
    ).toThrow(/no `for:`/);
    expect(() => rulesWithShortFor('not: [rules', 10)).toThrow(/parse/);
    expect(() => rulesWithShortFor(source, 0.5)).toThrow(/factor/);
    expect(() =>
      rulesWithShortFor(
        'groups:\n  - name: g\n    rules:\n      - alert: A\n        expr: up\n        for: soon\n',
        10,
      ),
    ).toThrow(/duration/);
  });
});

describe('prometheusConfig', () => {
  it('scrapes each target with its service label, honouring the labels the services set, at the given interval', () => {
    const config = parseYaml(
      prometheusConfig(
        [
          { service: 'planner', address: '127.0.0.1:8081' },
          { service: 'sender', address: '127.0.0.1:8082' },
        ],
        '/x/rules.yml',
        2,
      ),
    ) as {
      global: Record<string, string>;
      rule_files: string[];
      scrape_configs: Array<{
        honor_labels: boolean;
        static_configs: Array<{ targets: string[]; labels: Record<string, string> }>;
      }>;
    };
    expect(config.global).toEqual({ scrape_interval: '2s', scrape_timeout: '2s', evaluation_interval: '2s' });
    expect(config.rule_files).toEqual(['/x/rules.yml']);
    expect(config.scrape_configs[0]?.honor_labels).toBe(true);
    expect(config.scrape_configs[0]?.static_configs).toEqual([
      { targets: ['127.0.0.1:8081'], labels: { service: 'planner' } },
      { targets: ['127.0.0.1:8082'], labels: { service: 'sender' } },
    ]);
  });

  const promtool = spawnSync('promtool', ['--version'], { encoding: 'utf8' });
  it('is accepted by `promtool check config`, with the shortened rules', () => {
    if (promtool.error) throw new Error("promtool is not installed: install Debian's `prometheus` package");
    const rules = join(scratch, 'rules.yml');
    writeFileSync(rules, rulesWithShortFor(source, 300));
    writeFileSync(
      join(scratch, 'prometheus.yml'),
      prometheusConfig([{ service: 'planner', address: '127.0.0.1:8081' }], rules),
    );
    const result = spawnSync('promtool', ['check', 'config', join(scratch, 'prometheus.yml')], { encoding: 'utf8' });
    expect(result.status, `${result.stdout}${result.stderr}`).toBe(0);
    expect(result.stdout).toMatch(/SUCCESS: \d+ rules found/);
  });
});

describe('Prometheus.start', () => {
  it('takes only a new or empty directory, since stop removes what is in it', async () => {
    const dir = join(scratch, 'taken');
    mkdirSync(dir);
    writeFileSync(join(dir, 'precious.txt'), 'keep me');
    await expect(Prometheus.start({ dir, targets: [], binary: '/nonexistent/prometheus' })).rejects.toThrow(
      /not empty/,
    );
    expect(existsSync(join(dir, 'precious.txt'))).toBe(true);
  });
});
