/** One scenario's result (what reports/chaos/<config>.json holds per scenario) and the markdown table. */
import { machineMarkdown, type MachineDescription } from '../lib/machine.js';
import { CONCURRENCY, type ConfigName } from './common.js';

export interface Result {
  readonly scenario: string;
  readonly fault: string;
  readonly requests: number;
  readonly published: number;
  readonly delivered: number;
  readonly outcomes: Record<string, number>;
  readonly duplicates: number;
  readonly lost: number;
  readonly ambiguous: number;
  readonly ambiguousBound: number;
  /** For scenarios that SIGKILL the sender: how many times, and the ambiguous sends per kill. */
  readonly kills?: number;
  readonly ambiguousPerKill?: number;
  readonly mismatched: number;
  readonly seconds: number;
  readonly notes: readonly string[];
  readonly violations: readonly string[];
}

/** reports/chaos/<config>.json */
export interface ChaosReport {
  readonly config: ConfigName;
  readonly machine: MachineDescription;
  readonly results: readonly Result[];
}

/** reports/chaos/<config>.md */
export function markdown({ config, machine, results }: ChaosReport): string {
  const lines = [
    `# Reliability suite: ${config} configuration`,
    '',
    machineMarkdown(machine),
    `- ${results.reduce((n, r) => n + r.requests, 0)} requests in all, ${CONCURRENCY} concurrent sends per sender`,
    '',
    '| scenario | requests | published | delivered | outcomes | duplicates | lost | ambiguous (bound) | mismatched | seconds | result |',
    '|---|---|---|---|---|---|---|---|---|---|---|',
    ...results.map(
      (r) =>
        `| ${r.scenario} | ${r.requests} | ${r.published} | ${r.delivered} | ${Object.entries(r.outcomes)
          .map(([k, v]) => `${k} ${v}`)
          .join(
            ', ',
          )} | ${r.duplicates} | ${r.lost} | ${r.ambiguous} (≤ ${r.ambiguousBound}) | ${r.mismatched} | ${r.seconds} | ${
          r.violations.length === 0 ? 'pass' : `FAIL: ${r.violations.join('; ')}`
        } |`,
    ),
    '',
    '## Faults',
    '',
    ...results.map(
      (r) =>
        `- **${r.scenario}**: ${r.fault}.${r.notes.length > 0 ? ` ${r.notes.join('; ')}.` : ''}${
          r.kills ? ` Ambiguous per kill: ${r.ambiguousPerKill} (${r.ambiguous} after ${r.kills} kills).` : ''
        }`,
    ),
    '',
  ];
  return lines.join('\n');
}
