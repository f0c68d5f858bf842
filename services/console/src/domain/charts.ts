import { html, type Html } from './html.js';

/**
 * A share's 95% Wilson score interval: k of n, as fractions. Unlike k/n ± 1.96·se it stays inside
 * [0, 1] and is honest for small n. n = 0: the whole of [0, 1].
 */
export function wilson(k: number, n: number, z = 1.959964): { low: number; high: number } {
  if (n <= 0) return { low: 0, high: 1 };
  const p = k / n;
  const z2 = z * z;
  const centre = (p + z2 / (2 * n)) / (1 + z2 / n);
  const half = (z * Math.sqrt((p * (1 - p)) / n + z2 / (4 * n * n))) / (1 + z2 / n);
  return { low: Math.max(0, centre - half), high: Math.min(1, centre + half) };
}

export interface Bar {
  readonly label: string;
  /** The observed share, 0..1. */
  readonly value: number;
  /** Its interval, 0..1. */
  readonly low?: number;
  readonly high?: number;
  /** What was expected (a tick), 0..1. */
  readonly expected?: number;
}

/**
 * The end of an axis that shows every bar and interval: the next tenth above the largest (so a 3%
 * reply rate is not a sliver of a 0–100% axis), 100% at most; 100% when there is nothing to show.
 */
export function axisMax(bars: readonly Bar[]): number {
  const top = Math.max(0, ...bars.map((b) => Math.max(b.value, b.high ?? 0, b.expected ?? 0)));
  if (!(top > 0)) return 1;
  return Math.min(1, Math.ceil(top * 10 - 1e-9) / 10);
}

/**
 * A horizontal bar chart as inline SVG, drawn on the server: presentation attributes only (the CSP
 * refuses inline styles), every label through the escaping template. No chart library. The axis runs
 * from 0 to `max` (100% unless told; values beyond it are drawn at its end).
 */
export function barChart(bars: readonly Bar[], title: string, { max = 1 }: { readonly max?: number } = {}): Html {
  const width = 560;
  const labelWidth = 140;
  const plot = width - labelWidth - 60;
  const row = 28;
  const height = bars.length * row + 24;
  const end = max > 0 && max <= 1 ? max : 1;
  const x = (v: number) => labelWidth + Math.max(0, Math.min(1, v / end)) * plot;
  const axisEnd = `${Math.round(end * 1000) / 10}%`;
  const pct = (v: number) => `${(v * 100).toFixed(1)}%`;
  return html`<svg
    xmlns="http://www.w3.org/2000/svg"
    viewBox="0 0 ${width} ${height}"
    width="${width}"
    height="${height}"
    role="img"
    aria-label="${title}"
    class="chart"
  >
    <title>${title}</title>
    <line x1="${labelWidth}" y1="0" x2="${labelWidth}" y2="${height - 20}" stroke="#889" />
    ${bars.map((b, i) => {
      const y = i * row + 4;
      return html`<g data-bar="${b.label}">
        <text x="${labelWidth - 6}" y="${y + 15}" text-anchor="end" font-size="12">${b.label}</text>
        <rect x="${labelWidth}" y="${y}" width="${(x(b.value) - labelWidth).toFixed(1)}" height="20" fill="#5b7fbf" />
        ${
          b.low !== undefined && b.high !== undefined
            ? html`<line
                x1="${x(b.low).toFixed(1)}"
                y1="${y + 10}"
                x2="${x(b.high).toFixed(1)}"
                y2="${y + 10}"
                stroke="#222"
                stroke-width="2"
              />`
            : ''
        }
        ${
          b.expected !== undefined
            ? html`<line
                x1="${x(b.expected).toFixed(1)}"
                y1="${y - 2}"
                x2="${x(b.expected).toFixed(1)}"
                y2="${y + 22}"
                stroke="#c33"
                stroke-width="2"
                stroke-dasharray="3,2"
              />`
            : ''
        }
        <text x="${(x(Math.max(b.value, b.high ?? 0)) + 6).toFixed(1)}" y="${y + 15}" font-size="12"
          >${pct(b.value)}</text
        >
      </g>`;
    })}
    <text x="${labelWidth}" y="${height - 4}" font-size="11">0%</text>
    <text x="${labelWidth + plot}" y="${height - 4}" font-size="11" text-anchor="end">${axisEnd}</text>
  </svg>`;
}
