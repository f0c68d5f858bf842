/**
 * What the sender says it settled, from its /metrics, added up over the processes a scenario runs
 * (each SIGKILL starts the counters again at 0): `outreach_sender_settled_by_evidence_total` by
 * source and the status settled from, `outreach_sender_lookup_decisions_total` by status and
 * decision, and `outreach_sender_delivery_evidence_total` by source and outcome. Sampled every `intervalMs` and right before each kill; a process's last sample counts
 * for it, so what a killed process counted after its last sample is missing (the sent log's reasons
 * are the exact figure: run-scenario.ts gives both).
 */
import type { Stack } from '../lib/stack.js';

const COUNTERS = {
  outreach_sender_settled_by_evidence_total: (labels: Record<string, string>) =>
    `${labels.source ?? '?'} from ${labels.from ?? '?'}`,
  outreach_sender_lookup_decisions_total: (labels: Record<string, string>) =>
    `${labels.status ?? '?'} → ${labels.decision ?? '?'}`,
  outreach_sender_delivery_evidence_total: (labels: Record<string, string>) =>
    `${labels.source ?? '?'} ${labels.outcome ?? '?'}`,
} as const;
export type CounterName = keyof typeof COUNTERS;
export type Tallies = Record<CounterName, Record<string, number>>;

const empty = (): Tallies => ({
  outreach_sender_settled_by_evidence_total: {},
  outreach_sender_lookup_decisions_total: {},
  outreach_sender_delivery_evidence_total: {},
});

/** The counters' series in a Prometheus text exposition, each keyed by its labels in words. */
export function countersOf(text: string): Tallies {
  const tallies = empty();
  for (const line of text.split('\n')) {
    const match = /^([a-z_]+)\{([^}]*)\}\s+(\S+)/.exec(line);
    if (!match || !((match[1] as string) in COUNTERS)) continue;
    const name = match[1] as CounterName;
    const value = Number(match[3]);
    if (!Number.isFinite(value) || value === 0) continue;
    const labels: Record<string, string> = {};
    for (const [, key, v] of (match[2] as string).matchAll(/(\w+)="((?:[^"\\]|\\.)*)"/g))
      labels[key as string] = v as string;
    const key = COUNTERS[name](labels);
    tallies[name][key] = (tallies[name][key] ?? 0) + value;
  }
  return tallies;
}

/** Adds `b` into `a`. */
function add(a: Tallies, b: Tallies): void {
  for (const name of Object.keys(b) as CounterName[])
    for (const [key, value] of Object.entries(b[name])) a[name][key] = (a[name][key] ?? 0) + value;
}

export class SenderMetrics {
  /** The last sample of each sender process, by pid. */
  private readonly byProcess = new Map<number, Tallies>();
  private timer: NodeJS.Timeout | undefined;

  constructor(
    private readonly stack: Stack,
    private readonly intervalMs = 250,
  ) {}

  start(): void {
    const tick = () => {
      void this.sample().finally(() => {
        if (this.timer) this.timer = setTimeout(tick, this.intervalMs);
      });
    };
    this.timer = setTimeout(tick, this.intervalMs);
  }

  stop(): void {
    clearTimeout(this.timer);
    this.timer = undefined;
  }

  /** Samples the running sender (instance 0); a process that changed meanwhile is not counted. */
  async sample(): Promise<void> {
    const pid = this.pid();
    if (pid === undefined) return;
    const text = await fetch(this.stack.url('sender', '/metrics'), { signal: AbortSignal.timeout(2_000) })
      .then((r) => (r.ok ? r.text() : undefined))
      .catch(() => undefined);
    if (text === undefined || this.pid() !== pid) return;
    this.byProcess.set(pid, countersOf(text));
  }

  /** Every process's last sample, added up. */
  totals(): Tallies {
    const sum = empty();
    for (const tallies of this.byProcess.values()) add(sum, tallies);
    return sum;
  }

  private pid(): number | undefined {
    const child = this.stack.processes.get('sender')?.child;
    return child && child.exitCode === null && child.signalCode === null ? child.pid : undefined;
  }
}
