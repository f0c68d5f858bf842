import { html, type Html } from './html.js';

/**
 * The sender's outcome counters (`outreach_sender_sends_total{outcome}`) sampled over time, in a
 * bounded ring buffer: what the overview's chart of the last hour is drawn from. It is no copy of
 * any data: the console restarts with it empty, and Prometheus keeps the long history.
 */
export interface CounterSample {
  /** When it was read, ms since the epoch. */
  readonly at: number;
  /**
   * Which process answered (its `process_start_time_seconds`): counters of two processes are not
   * comparable, so a rate is taken between two samples of the same process only.
   */
  readonly process: string;
  readonly counts: Readonly<Record<string, number>>;
}

export interface RatePoint {
  /** The end of the interval, ms since the epoch. */
  readonly at: number;
  readonly seconds: number;
  /** Per outcome, per second over the interval. */
  readonly perSecond: Readonly<Record<string, number>>;
}

export class OutcomeSeries {
  private readonly samples: CounterSample[] = [];

  /** `capacity` samples at most: the oldest goes when a new one comes. */
  constructor(readonly capacity: number) {
    if (!Number.isInteger(capacity) || capacity < 2) throw new RangeError('capacity must be an integer >= 2');
  }

  add(sample: CounterSample): void {
    const last = this.samples.at(-1);
    if (last && sample.at <= last.at) return; // a clock step back: keep the order
    this.samples.push(sample);
    if (this.samples.length > this.capacity) this.samples.splice(0, this.samples.length - this.capacity);
  }

  get size(): number {
    return this.samples.length;
  }

  /**
   * The rate between each two consecutive samples of the same process whose counters did not go
   * down (a restart or another replica is a gap, never a negative or a jump), since `since`.
   */
  rates(since = 0): RatePoint[] {
    const points: RatePoint[] = [];
    for (let i = 1; i < this.samples.length; i += 1) {
      const before = this.samples[i - 1] as CounterSample;
      const now = this.samples[i] as CounterSample;
      if (now.at <= since || now.process !== before.process) continue;
      const seconds = (now.at - before.at) / 1000;
      const perSecond: Record<string, number> = {};
      let reset = false;
      for (const outcome of new Set([...Object.keys(before.counts), ...Object.keys(now.counts)])) {
        const delta = (now.counts[outcome] ?? 0) - (before.counts[outcome] ?? 0);
        if (delta < 0) reset = true;
        perSecond[outcome] = delta / seconds;
      }
      if (!reset) points.push({ at: now.at, seconds, perSecond });
    }
    return points;
  }
}

/** The outcomes in the order the chart draws and lists them; others after, by name. */
export const OUTCOME_ORDER = ['sent', 'failed', 'ambiguous', 'held', 'suppressed', 'skipped_duplicate'] as const;
const COLOURS: Record<string, string> = {
  sent: '#2f7d32',
  failed: '#c62828',
  ambiguous: '#ef6c00',
  held: '#5b7fbf',
  suppressed: '#7b1fa2',
  skipped_duplicate: '#6d6d6d',
};

export function outcomesOf(points: readonly RatePoint[]): string[] {
  const seen = new Set(points.flatMap((p) => Object.keys(p.perSecond)));
  const known = OUTCOME_ORDER.filter((o) => seen.has(o));
  return [...known, ...[...seen].filter((o) => !(OUTCOME_ORDER as readonly string[]).includes(o)).sort()];
}

/**
 * A line per outcome, per second, over [from, to] as inline SVG drawn on the server (presentation
 * attributes only: the CSP refuses inline styles; labels through the escaping template).
 */
export function rateChart(points: readonly RatePoint[], from: number, to: number, title: string): Html {
  const width = 640;
  const height = 220;
  const left = 48;
  const right = 130;
  const top = 10;
  const bottom = 24;
  const plotW = width - left - right;
  const plotH = height - top - bottom;
  const outcomes = outcomesOf(points);
  const max = Math.max(0, ...points.flatMap((p) => Object.values(p.perSecond)));
  const yMax = max <= 0 ? 1 : niceCeiling(max);
  const x = (at: number) => left + (to > from ? ((Math.min(Math.max(at, from), to) - from) / (to - from)) * plotW : 0);
  const y = (v: number) => top + plotH - (Math.max(0, v) / yMax) * plotH;
  const minutes = Math.round((to - from) / 60_000);
  return html`<svg
    xmlns="http://www.w3.org/2000/svg"
    viewBox="0 0 ${width} ${height}"
    width="${width}"
    height="${height}"
    role="img"
    aria-label="${title}"
    class="chart"
    data-testid="outcome-chart"
  >
    <title>${title}</title>
    <line x1="${left}" y1="${top}" x2="${left}" y2="${top + plotH}" stroke="#889" />
    <line x1="${left}" y1="${top + plotH}" x2="${left + plotW}" y2="${top + plotH}" stroke="#889" />
    <text x="${left - 4}" y="${top + 10}" text-anchor="end" font-size="11">${formatRate(yMax)}</text>
    <text x="${left - 4}" y="${top + plotH}" text-anchor="end" font-size="11">0</text>
    <text x="${left}" y="${height - 6}" font-size="11">−${minutes} min</text>
    <text x="${left + plotW}" y="${height - 6}" font-size="11" text-anchor="end">now</text>
    ${outcomes.map((outcome, i) => {
      const colour = COLOURS[outcome] ?? '#333';
      const line = points.map((p) => `${x(p.at).toFixed(1)},${y(p.perSecond[outcome] ?? 0).toFixed(1)}`).join(' ');
      return html`<g data-outcome="${outcome}">
        ${
          points.length === 1
            ? html`<circle
                cx="${x(points[0]?.at ?? to).toFixed(1)}"
                cy="${y(points[0]?.perSecond[outcome] ?? 0).toFixed(1)}"
                r="2"
                fill="${colour}"
              />`
            : html`<polyline points="${line}" fill="none" stroke="${colour}" stroke-width="1.5" />`
        }
        <rect x="${left + plotW + 10}" y="${top + i * 16}" width="10" height="10" fill="${colour}" />
        <text x="${left + plotW + 24}" y="${top + i * 16 + 9}" font-size="11">${outcome}</text>
      </g>`;
    })}
  </svg>`;
}

/** 1, 2 or 5 times a power of ten, at least `v`. */
export function niceCeiling(v: number): number {
  const power = 10 ** Math.floor(Math.log10(v));
  for (const step of [1, 2, 5, 10]) if (step * power >= v) return step * power;
  return 10 * power;
}

export function formatRate(v: number): string {
  return v >= 10 ? v.toFixed(0) : v >= 1 ? v.toFixed(1) : v.toFixed(2);
}
