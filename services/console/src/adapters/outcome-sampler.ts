import { OutcomeSeries } from '../domain/outcome-series.js';
import { parseSamples, type Sample } from './prometheus-text.js';
import type { Services } from './services.js';

/** The sender's outcome counters by outcome, and which process answered; undefined without them. */
export function outcomeCounters(
  samples: readonly Sample[],
): { process: string; counts: Record<string, number> } | undefined {
  const counts: Record<string, number> = {};
  let any = false;
  for (const s of samples) {
    if (s.name !== 'outreach_sender_sends_total' || !s.labels.outcome) continue;
    counts[s.labels.outcome] = (counts[s.labels.outcome] ?? 0) + s.value;
    any = true;
  }
  const start = samples.find((s) => s.name === 'process_start_time_seconds');
  // A sender that has recorded nothing yet exports the counter without samples: zero, not unknown.
  if (!any && !samples.some((s) => s.name === 'outreach_build_info')) return undefined;
  return { process: start ? String(start.value) : 'unknown', counts };
}

/**
 * Reads the sender's /metrics every `intervalMs` into a ring buffer holding `windowMs` of samples
 * (the overview's sends per second and outcomes over time). In-process and bounded: it restarts
 * empty; Prometheus is where the long history is. A failed read is a gap in the chart.
 */
export class OutcomeSampler {
  readonly series: OutcomeSeries;
  private timer: NodeJS.Timeout | undefined;
  private running: Promise<void> | undefined;
  /** The last read's failure, shown under the chart; undefined after a good read. */
  lastError: string | undefined;

  constructor(
    private readonly services: Pick<Services, 'open'>,
    readonly intervalMs: number,
    readonly windowMs: number,
    private readonly now: () => number = Date.now,
  ) {
    this.series = new OutcomeSeries(Math.ceil(windowMs / intervalMs) + 1);
  }

  start(): void {
    if (this.timer) return;
    void this.sampleOnce();
    this.timer = setInterval(() => void this.sampleOnce(), this.intervalMs);
    this.timer.unref();
  }

  async stop(): Promise<void> {
    if (this.timer) clearInterval(this.timer);
    this.timer = undefined;
    await this.running;
  }

  /** One read (never two at once: a slow sender skips a tick rather than piling reads up). */
  sampleOnce(): Promise<void> {
    if (this.running) return this.running;
    this.running = (async () => {
      try {
        const answer = await this.services.open('sender', '/metrics');
        if (answer.status !== 200 || typeof answer.body !== 'string') {
          this.lastError = answer.status === 0 ? answer.message : `the sender's /metrics answered ${answer.status}`;
          return;
        }
        const counters = outcomeCounters(parseSamples(answer.body));
        if (!counters) {
          this.lastError = "the sender's /metrics has no outcome counters";
          return;
        }
        this.series.add({ at: this.now(), ...counters });
        this.lastError = undefined;
      } finally {
        this.running = undefined;
      }
    })();
    return this.running;
  }
}
