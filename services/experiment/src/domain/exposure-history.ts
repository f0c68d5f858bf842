/**
 * Pre-platform variant history, one exposure per line: which candidate saw which variant of which
 * experiment, and when. An incident's own data goes through the same contamination rule as the
 * platform's sends (seed 000-3 step 1: count the candidates seen in more than one arm).
 *
 * Two formats, one record per line so every problem has a line number:
 *   CSV     a header row naming the columns, then one row per line (RFC 4180 quoting, no line
 *           breaks inside a field); columns in any order, unknown ones ignored
 *   NDJSON  one JSON object per line
 * Fields: candidate, experiment, variant, time, and optionally source (the system the history
 * came from). `time` is ISO 8601 with a date, a time and an offset (`2025-03-01T09:30:00Z`,
 * `2025-03-01 10:30:00+01:00`): a time without an offset means a different instant on every machine.
 *
 * The first arm each candidate saw becomes its sticky assignment (`firstArms`), so the platform
 * sends that arm from then on; the contamination count then covers history and sends alike.
 *
 * Keys get the live path's forms: the candidate id NFKC-folded and trimmed (case kept), and
 * refused when it holds an at-sign, as every ingress refuses ids that are addresses (the planner
 * passes the keyed hash, `address:<keyId>:<hash>`). Problems name the line and the field, never
 * the value: a refused value may be an address.
 */
import { idProblem, normalizeCandidateKey, uuidV5 } from '@outreach/contracts';

/** The longest line read; a longer one is refused unread (a field is at most 256 characters). */
export const MAX_LINE_BYTES = 4_096;

export type HistoryFormat = 'csv' | 'ndjson';

const FIELDS = ['candidate', 'experiment', 'variant', 'time', 'source'] as const;
type Field = (typeof FIELDS)[number];
const REQUIRED: readonly Field[] = ['candidate', 'experiment', 'variant', 'time'];

/** Column or key names, compared lower-case without `_`, `-` or spaces (`candidate_id` = `candidateId`). */
const ALIASES: Readonly<Record<string, Field>> = {
  candidate: 'candidate',
  candidateid: 'candidate',
  candidatekey: 'candidate',
  experiment: 'experiment',
  experimentid: 'experiment',
  variant: 'variant',
  arm: 'variant',
  time: 'time',
  timestamp: 'time',
  exposedat: 'time',
  sentat: 'time',
  source: 'source',
  origin: 'source',
};
const fieldOf = (name: string): Field | undefined =>
  Object.hasOwn(ALIASES, name.toLowerCase().replace(/[\s_-]/g, ''))
    ? ALIASES[name.toLowerCase().replace(/[\s_-]/g, '')]
    : undefined;

export interface HistoryRow {
  readonly line: number;
  /** Derived from the exposure itself, so the same line in two files (or twice in one) is one exposure. */
  readonly eventId: string;
  readonly candidateKey: string;
  readonly experimentId: string;
  readonly variant: string;
  readonly exposedAt: Date;
  readonly origin: string | null;
}

export type LineResult =
  | { readonly ok: true; readonly row: HistoryRow }
  | { readonly ok: false; readonly line: number; readonly problems: readonly string[] };

export interface CsvHeader {
  /** Column position of each field present. */
  readonly positions: Readonly<Partial<Record<Field, number>>>;
  readonly width: number;
  /** How many columns name no field (ignored). */
  readonly ignored: number;
}

/**
 * The fields of one CSV line: comma-separated, a field in double quotes may hold commas and `""`
 * for a quote. Undefined when a quote is unterminated or stray (not the whole field).
 */
export function csvFields(text: string): string[] | undefined {
  const fields: string[] = [];
  let i = 0;
  for (;;) {
    while (text[i] === ' ' || text[i] === '\t') i++;
    if (text[i] === '"') {
      let value = '';
      i++;
      for (;;) {
        const quote = text.indexOf('"', i);
        if (quote === -1) return undefined;
        value += text.slice(i, quote);
        if (text[quote + 1] === '"') {
          value += '"';
          i = quote + 2;
          continue;
        }
        i = quote + 1;
        break;
      }
      while (text[i] === ' ' || text[i] === '\t') i++;
      if (i < text.length && text[i] !== ',') return undefined;
      fields.push(value);
    } else {
      const comma = text.indexOf(',', i);
      const value = text.slice(i, comma === -1 ? text.length : comma);
      if (value.includes('"')) return undefined;
      fields.push(value.trim());
      i = comma === -1 ? text.length : comma;
    }
    if (i >= text.length) return fields;
    i++; // the comma
  }
}

export function csvHeader(
  text: string,
): { readonly ok: true; readonly header: CsvHeader } | { readonly ok: false; readonly problems: readonly string[] } {
  const names = csvFields(text);
  if (!names) return { ok: false, problems: ['the header row has an unterminated or stray quote'] };
  const positions: Partial<Record<Field, number>> = {};
  const problems: string[] = [];
  let ignored = 0;
  names.forEach((name, i) => {
    const field = fieldOf(name);
    if (!field) ignored++;
    else if (positions[field] !== undefined) problems.push(`the header names ${field} twice`);
    else positions[field] = i;
  });
  for (const field of REQUIRED) if (positions[field] === undefined) problems.push(`the header has no ${field} column`);
  return problems.length > 0
    ? { ok: false, problems }
    : { ok: true, header: { positions, width: names.length, ignored } };
}

const TIME =
  /^(\d{4})-(\d{2})-(\d{2})[T ](\d{2}):(\d{2})(?::(\d{2})(?:\.(\d{1,9}))?)?(?:(Z)|([+-])(\d{2})(?::?(\d{2}))?)$/i;

/** The instant of an ISO 8601 date-time with an offset, or undefined (no offset, or no such date). */
export function parseInstant(text: string): Date | undefined {
  const m = TIME.exec(text);
  if (!m) return undefined;
  const [year, month, day, hour, minute, second] = [m[1], m[2], m[3], m[4], m[5], m[6] ?? '0'].map(Number) as [
    number,
    number,
    number,
    number,
    number,
    number,
  ];
  const millis = Number((m[7] ?? '0').padEnd(3, '0').slice(0, 3));
  const local = Date.UTC(year, month - 1, day, hour, minute, second, millis);
  const check = new Date(local);
  // Date.UTC rolls 30 February over into March: a date that does not round-trip does not exist.
  if (
    check.getUTCFullYear() !== year ||
    check.getUTCMonth() !== month - 1 ||
    check.getUTCDate() !== day ||
    check.getUTCHours() !== hour ||
    check.getUTCMinutes() !== minute ||
    check.getUTCSeconds() !== second
  )
    return undefined;
  const offsetHours = Number(m[10] ?? '0');
  const offsetMinutes = Number(m[11] ?? '0');
  if (offsetHours > 23 || offsetMinutes > 59) return undefined;
  const offset = m[8] ? 0 : (m[9] === '-' ? -1 : 1) * (offsetHours * 60 + offsetMinutes) * 60_000;
  return new Date(local - offset);
}

/**
 * One line, validated, or the problems with it. `now` bounds `time` (history is in the past);
 * `header` is the CSV header row's (ignored for NDJSON).
 */
export function parseHistoryLine(
  format: HistoryFormat,
  text: string,
  line: number,
  context: { readonly now: Date; readonly header?: CsvHeader },
): LineResult {
  const refuse = (...problems: string[]): LineResult => ({ ok: false, line, problems });
  const raw: Partial<Record<Field, unknown>> = {};
  if (format === 'csv') {
    const header = context.header;
    if (!header) return refuse('no header row');
    const fields = csvFields(text);
    if (!fields) return refuse('has an unterminated or stray quote');
    if (fields.length !== header.width)
      return refuse(`has ${fields.length} fields where the header has ${header.width}`);
    for (const field of FIELDS) {
      const position = header.positions[field];
      if (position !== undefined) raw[field] = fields[position];
    }
  } else {
    let value: unknown;
    try {
      value = JSON.parse(text);
    } catch {
      return refuse('is not valid JSON');
    }
    if (typeof value !== 'object' || value === null || Array.isArray(value)) return refuse('is not a JSON object');
    const problems: string[] = [];
    for (const [key, v] of Object.entries(value)) {
      const field = fieldOf(key);
      if (!field) continue;
      if (Object.hasOwn(raw, field)) problems.push(`gives ${field} twice`);
      raw[field] = v;
    }
    if (problems.length > 0) return refuse(...problems);
  }

  const problems: string[] = [];
  const text_ = (field: Field, required: boolean): string | undefined => {
    const value = raw[field];
    if (value === undefined || value === null || value === '') {
      if (required) problems.push(`${field} is missing`);
      return undefined;
    }
    if (typeof value !== 'string') {
      problems.push(`${field} must be a string`);
      return undefined;
    }
    return value;
  };
  const candidate = text_('candidate', true);
  const experiment = text_('experiment', true);
  const variant = text_('variant', true);
  const time = text_('time', true);
  const source = text_('source', false);

  const candidateKey = candidate === undefined ? undefined : normalizeCandidateKey(candidate);
  const experimentId = experiment?.trim();
  const variantName = variant?.trim();
  const origin = source?.trim() || undefined;
  const exposedAt = time === undefined ? undefined : parseInstant(time.trim());
  for (const problem of [
    candidateKey === undefined ? undefined : idProblem('candidate', candidateKey),
    experimentId === undefined ? undefined : idProblem('experiment', experimentId),
    variantName === undefined ? undefined : idProblem('variant', variantName),
    origin === undefined ? undefined : idProblem('source', origin),
    time !== undefined && !exposedAt
      ? 'time is not an ISO 8601 date and time with an offset (2025-03-01T09:30:00Z)'
      : undefined,
    exposedAt && exposedAt.getTime() > context.now.getTime() ? 'time is in the future' : undefined,
  ])
    if (problem) problems.push(problem);
  if (problems.length > 0) return refuse(...problems);
  const row = {
    candidateKey: candidateKey as string,
    experimentId: experimentId as string,
    variant: variantName as string,
    exposedAt: exposedAt as Date,
  };
  return {
    ok: true,
    row: {
      line,
      ...row,
      eventId: uuidV5(
        'imported-exposure',
        row.experimentId,
        row.candidateKey,
        row.variant,
        row.exposedAt.toISOString(),
      ),
      origin: origin ?? null,
    },
  };
}

/**
 * What is wrong with a row given the platform's experiments (name → variant names): history of an
 * experiment the platform does not know, or of a variant it does not have, is a typo or belongs
 * elsewhere; define the experiment first (its arms may be added later, never removed).
 */
export function definitionProblem(
  row: Pick<HistoryRow, 'experimentId' | 'variant'>,
  experiments: ReadonlyMap<string, readonly string[]>,
): string | undefined {
  const variants = experiments.get(row.experimentId);
  if (!variants) return 'experiment names no experiment on the platform (create it first, e.g. with status stopped)';
  if (!variants.includes(row.variant)) return "variant is not one of the experiment's variants";
  return undefined;
}

/**
 * The arm each candidate saw first, per experiment: what an import seeds as the candidate's sticky
 * assignment, so the platform goes on sending it (seed 000-3 step 2 over pre-platform history).
 * History with several arms for a candidate (already contaminated) seeds the first one seen: its
 * first contact, and an arm it has seen, so sending it widens nothing. Ties at one instant go to
 * the lowest variant name (code-unit order), so a file gives one answer whatever its line order.
 */
export function firstArms(
  rows: Iterable<Pick<HistoryRow, 'experimentId' | 'candidateKey' | 'variant' | 'exposedAt'>>,
): Array<{
  readonly experimentId: string;
  readonly candidateKey: string;
  readonly variant: string;
  readonly seenAt: Date;
}> {
  const first = new Map<string, { experimentId: string; candidateKey: string; variant: string; seenAt: Date }>();
  for (const row of rows) {
    const key = `${row.experimentId}\u0000${row.candidateKey}`;
    const held = first.get(key);
    const time = row.exposedAt.getTime();
    if (!held || time < held.seenAt.getTime() || (time === held.seenAt.getTime() && row.variant < held.variant)) {
      first.set(key, {
        experimentId: row.experimentId,
        candidateKey: row.candidateKey,
        variant: row.variant,
        seenAt: row.exposedAt,
      });
    }
  }
  return [...first.values()];
}

/** An import's id: its content's hash, so the same file is the same import however it is named. */
export function importIdOf(contentSha256: string): string {
  return uuidV5('exposure-import', contentSha256);
}
