/** The samples of a Prometheus text exposition: enough to read a service's gauges. */
export interface Sample {
  readonly name: string;
  readonly labels: Readonly<Record<string, string>>;
  readonly value: number;
}

const LINE = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)/;
const LABEL = /([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"/g;

export function parseSamples(text: string): Sample[] {
  const samples: Sample[] = [];
  for (const line of text.split('\n')) {
    if (line.startsWith('#')) continue;
    const match = LINE.exec(line);
    if (!match) continue;
    const labels: Record<string, string> = {};
    for (const label of (match[2] ?? '').matchAll(LABEL)) {
      labels[label[1] as string] = (label[2] as string).replace(/\\(.)/g, (_, c: string) => (c === 'n' ? '\n' : c));
    }
    const value = Number(match[3]);
    if (!Number.isNaN(value)) samples.push({ name: match[1] as string, labels, value });
  }
  return samples;
}

/** The sum of a metric's samples; undefined when the exposition has none. */
export function total(samples: readonly Sample[], name: string): number | undefined {
  const mine = samples.filter((s) => s.name === name);
  return mine.length === 0 ? undefined : mine.reduce((sum, s) => sum + s.value, 0);
}
