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
  /**
   * Where sends in doubt are settled by delivery evidence: the sender's `settled_by_evidence` counter
   * by source and the status settled from (added up over its processes; a SIGKILL loses what its
   * process counted since the last sample), and the sends whose row says so (the exact figure).
   */
  readonly settledByEvidence?: Record<string, number>;
  readonly settledByEvidenceInLog?: number;
  /** The sender's `delivery_evidence` counter by source and outcome (settled, kept, unknown_send). */
  readonly deliveryEvidence?: Record<string, number>;
  /**
   * With a lookup: the sender's `lookup_decisions` counter by status and decision, the same way.
   * Under PROVIDER_LOOKUP=evidence a `sent` decision is stored evidence found by the reconciler.
   */
  readonly lookupDecisions?: Record<string, number>;
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
    '| scenario | requests | published | delivered | outcomes | duplicates | lost | ambiguous (bound) | settled by evidence | mismatched | seconds | result |',
    '|---|---|---|---|---|---|---|---|---|---|---|---|',
    ...results.map(
      (r) =>
        `| ${r.scenario} | ${r.requests} | ${r.published} | ${r.delivered} | ${Object.entries(r.outcomes)
          .map(([k, v]) => `${k} ${v}`)
          .join(
            ', ',
          )} | ${r.duplicates} | ${r.lost} | ${r.ambiguous} (≤ ${r.ambiguousBound}) | ${settledCell(r)} | ${r.mismatched} | ${r.seconds} | ${
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
        }${r.deliveryEvidence ? ` Delivery evidence taken (/metrics): ${counts(r.deliveryEvidence)}.` : ''}${
          r.settledByEvidence ? ` Settled by evidence (/metrics): ${counts(r.settledByEvidence)}.` : ''
        }${r.lookupDecisions ? ` Lookup decisions (/metrics): ${counts(r.lookupDecisions)}.` : ''}`,
    ),
    '',
  ];
  return lines.join('\n');
}

const counts = (tally: Record<string, number>): string =>
  Object.keys(tally).length === 0
    ? 'none'
    : Object.entries(tally)
        .sort(([a], [b]) => a.localeCompare(b))
        .map(([k, v]) => `${k} ${v}`)
        .join(', ');

const total = (tally: Record<string, number> | undefined, only: (key: string) => boolean = () => true): number =>
  Object.entries(tally ?? {}).reduce((n, [k, v]) => n + (only(k) ? v : 0), 0);

/**
 * `4 + 6 found by the lookup (log 4)`: sends settled by SettleByEvidence (at intake, when a send
 * became ambiguous, or by the sweep) and sends the evidence lookup found, both from /metrics, then
 * the sent log's rows whose reason says SettleByEvidence settled them.
 */
function settledCell(r: Result): string {
  if (r.settledByEvidenceInLog === undefined) return '–';
  const found = total(r.lookupDecisions, (k) => k.endsWith('→ sent'));
  return `${total(r.settledByEvidence)} + ${found} found by the lookup (log ${r.settledByEvidenceInLog})`;
}
