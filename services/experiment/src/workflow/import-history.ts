/**
 * Imports a file of pre-platform variant history (domain/exposure-history.ts) so the contamination
 * count runs on an incident's own data, and seeds each candidate's sticky assignment with the arm
 * it saw first, so the platform sends that arm and never the other (the Assignment decider's
 * SeedFromHistory: an assignment already stored stays, a candidate another experiment of the
 * exclusion group holds stays there). The whole file is read and checked before anything is
 * written: one bad line refuses the import, with every problem by line number, and nothing lands.
 * The import's id is the hash of the file's bytes, so running it again changes nothing.
 */
import { createHash } from 'node:crypto';
import { createReadStream } from 'node:fs';
import { decideAll } from '@outreach/shared';
import type { PoolClient } from 'pg';
import type { ContaminationCount, Experiment, ExperimentsRepository } from '../adapters/experiments-repository.js';
import { assignmentDecider, assignmentKeyOf, type AssignmentCommand } from '../domain/assignment.js';
import {
  csvHeader,
  definitionProblem,
  firstArms,
  importIdOf,
  MAX_LINE_BYTES,
  parseHistoryLine,
  type CsvHeader,
  type HistoryFormat,
  type HistoryRow,
} from '../domain/exposure-history.js';

export interface ImportHistoryOptions {
  readonly file: string;
  readonly format: HistoryFormat;
  readonly now: Date;
  /** More lines than this refuses the file (the rows are held in memory until the import). */
  readonly maxLines?: number;
}

export type ImportHistoryResult =
  | {
      readonly kind: 'refused';
      readonly lines: number;
      readonly invalidLines: number;
      /** `line N: reason`, in file order; names fields, never values. */
      readonly problems: readonly string[];
    }
  | {
      readonly kind: 'imported' | 'already-imported';
      readonly importId: string;
      readonly contentSha256: string;
      readonly importedAt: Date;
      readonly lines: number;
      /** Distinct exposures in the file. */
      readonly exposures: number;
      /** Lines that repeat an earlier line's exposure (same candidate, experiment, variant, time). */
      readonly duplicateLines: number;
      /** Exposures not already stored (0 when the file was imported before). */
      readonly newExposures: number;
      readonly newlyContaminated: number;
      /** Per experiment in the file: candidates seen in more than one arm, after the import. */
      readonly contamination: readonly ContaminationCount[];
      readonly ignoredColumns: number;
      /** What the import did to sticky assignments (all 0 when the file was imported before). */
      readonly assignments: SeedCounts;
    };

/** Per candidate and experiment of the file, what became of the arm its history saw first. */
export interface SeedCounts {
  /** Stored as the candidate's assignment: the platform sends this arm. */
  readonly seeded: number;
  /** Already assigned that arm (by the platform, or an earlier import). */
  readonly alreadyAssigned: number;
  /** Already assigned another arm: kept (assignments never change), and the candidate is contaminated. */
  readonly keptOtherArm: number;
  /** Held by another experiment of the exclusion group: not seeded. */
  readonly heldByAnotherExperiment: number;
}

const NO_SEEDS: SeedCounts = { seeded: 0, alreadyAssigned: 0, keptOtherArm: 0, heldByAnotherExperiment: 0 };

/** Seeds are decided and written this many candidates at a time (each batch: one read, one insert). */
const SEED_BATCH = 5_000;

/**
 * The sticky assignments of `rows`' first arms, in the import's transaction: per experiment (in id
 * order), the decider's SeedFromHistory over states loaded as for assigning (group memberships
 * claimed first), applied with their VariantAssigned events.
 */
async function seedFromHistory(
  repository: ExperimentsRepository,
  client: PoolClient,
  importId: string,
  rows: Iterable<HistoryRow>,
): Promise<SeedCounts> {
  const counts = { ...NO_SEEDS };
  const seeds = firstArms(rows).sort((a, b) =>
    a.experimentId < b.experimentId ? -1 : a.experimentId > b.experimentId ? 1 : 0,
  );
  const experiments = new Map<string, Experiment>();
  for (let start = 0; start < seeds.length;) {
    const experimentId = (seeds[start] as (typeof seeds)[number]).experimentId;
    let end = start;
    while (end < seeds.length && end - start < SEED_BATCH && seeds[end]?.experimentId === experimentId) end++;
    const batch = seeds.slice(start, end);
    start = end;
    let experiment = experiments.get(experimentId);
    if (!experiment) {
      // Checked before the transaction (definitionProblem); read again inside it.
      experiment = (await repository.find(experimentId, client)) as Experiment;
      experiments.set(experimentId, experiment);
    }
    const { states } = await repository.loadAssignments(
      client,
      experiment,
      batch.map((s) => s.candidateKey),
      'seed',
    );
    const commands = batch.map((s): AssignmentCommand => ({
      type: 'SeedFromHistory',
      experiment: experiment as Experiment,
      candidateKey: s.candidateKey,
      variant: s.variant,
      seenAt: s.seenAt.getTime(),
      importId,
      correlationId: `import:${importId}`,
    }));
    const results = await repository.applyAssignments(
      client,
      experiment,
      decideAll(assignmentDecider, assignmentKeyOf, states, commands),
    );
    const wanted = new Map(batch.map((s) => [s.candidateKey, s.variant]));
    for (const result of results) {
      if (!result.enrolled) counts.heldByAnotherExperiment++;
      else if (result.created) counts.seeded++;
      else if (result.variant === wanted.get(result.candidateKey)) counts.alreadyAssigned++;
      else counts.keptOtherArm++;
    }
  }
  return counts;
}

export const DEFAULT_MAX_LINES = 1_000_000;
const MAX_PROBLEMS = 100;

interface RawLine {
  readonly line: number;
  /** Undefined when the line is longer than MAX_LINE_BYTES: it was skipped, not buffered. */
  readonly bytes: Buffer | undefined;
}

/** The file's lines, each at most `maxBytes` long, while hashing every byte read. */
async function* linesOf(chunks: AsyncIterable<Buffer>, hash: ReturnType<typeof createHash>): AsyncGenerator<RawLine> {
  let parts: Buffer[] = [];
  let length = 0;
  let tooLong = false;
  let line = 0;
  let started = false;
  const take = (): RawLine => {
    line++;
    let bytes = tooLong ? undefined : Buffer.concat(parts, length);
    if (bytes && bytes[bytes.length - 1] === 0x0d) bytes = bytes.subarray(0, bytes.length - 1);
    parts = [];
    length = 0;
    tooLong = false;
    return { line, bytes };
  };
  for await (const chunk of chunks) {
    hash.update(chunk);
    started = true;
    let from = 0;
    for (;;) {
      const newline = chunk.indexOf(0x0a, from);
      const piece = chunk.subarray(from, newline === -1 ? chunk.length : newline);
      if (!tooLong) {
        if (length + piece.length > MAX_LINE_BYTES + 1)
          tooLong = true; // +1: a CR before the LF
        else {
          parts.push(piece);
          length += piece.length;
        }
      }
      if (newline === -1) break;
      yield take();
      from = newline + 1;
    }
  }
  if (started && (length > 0 || tooLong)) yield take();
}

const utf8 = new TextDecoder('utf-8', { fatal: true });

export async function importHistory(
  repository: ExperimentsRepository,
  options: ImportHistoryOptions,
): Promise<ImportHistoryResult> {
  const maxLines = options.maxLines ?? DEFAULT_MAX_LINES;
  const hash = createHash('sha256');
  const problems: string[] = [];
  let invalidLines = 0;
  const refuse = (line: number | undefined, reasons: readonly string[]) => {
    invalidLines++;
    for (const reason of reasons)
      if (problems.length < MAX_PROBLEMS) problems.push(line ? `line ${line}: ${reason}` : reason);
  };
  const rows = new Map<string, HistoryRow>();
  let duplicateLines = 0;
  let header: CsvHeader | undefined;
  let lines = 0;

  for await (const raw of linesOf(createReadStream(options.file), hash)) {
    lines = raw.line;
    if (lines > maxLines) {
      refuse(undefined, [`more than ${maxLines} lines: split the file (each part is its own import)`]);
      break;
    }
    if (!raw.bytes) {
      refuse(raw.line, [`is longer than ${MAX_LINE_BYTES} bytes`]);
      continue;
    }
    let text: string;
    try {
      text = utf8.decode(raw.bytes);
    } catch {
      refuse(raw.line, ['is not valid UTF-8']);
      continue;
    }
    if (raw.line === 1) text = text.replace(/^\uFEFF/, ''); // a spreadsheet's byte-order mark
    if (text.trim() === '') continue;
    if (options.format === 'csv' && !header) {
      const parsed = csvHeader(text);
      if (!parsed.ok) {
        refuse(raw.line, parsed.problems);
        break; // without a header no later line can be read
      }
      header = parsed.header;
      continue;
    }
    const result = parseHistoryLine(options.format, text, raw.line, {
      now: options.now,
      ...(header ? { header } : {}),
    });
    if (!result.ok) refuse(result.line, result.problems);
    else if (rows.has(result.row.eventId)) duplicateLines++;
    else rows.set(result.row.eventId, result.row);
  }

  // The platform's definitions: history must name an experiment and variant it has.
  const experimentIds = [...new Set([...rows.values()].map((r) => r.experimentId))].sort();
  const definitions = new Map<string, readonly string[]>();
  for (const id of experimentIds) {
    const experiment = await repository.find(id);
    if (experiment)
      definitions.set(
        id,
        experiment.variants.map((v) => v.name),
      );
  }
  for (const row of rows.values()) {
    const problem = definitionProblem(row, definitions);
    if (problem) refuse(row.line, [problem]);
  }
  if (invalidLines === 0 && rows.size === 0) refuse(undefined, ['the file holds no exposures']);
  if (invalidLines > 0) {
    problems.sort((a, b) => lineOf(a) - lineOf(b));
    return { kind: 'refused', lines, invalidLines, problems };
  }

  const contentSha256 = hash.digest('hex');
  const importId = importIdOf(contentSha256);
  const exposures = [...rows.values()];
  const outcome = await repository.importExposures({ importId, contentSha256, lines }, exposures, (client) =>
    seedFromHistory(repository, client, importId, exposures),
  );
  return {
    kind: outcome.kind,
    importId,
    contentSha256,
    importedAt: outcome.importedAt,
    lines,
    exposures: exposures.length,
    duplicateLines,
    newExposures: outcome.kind === 'imported' ? outcome.newExposures : 0,
    newlyContaminated: outcome.kind === 'imported' ? outcome.contaminations.length : 0,
    contamination: await repository.contaminationCounts(experimentIds),
    ignoredColumns: header?.ignored ?? 0,
    assignments: outcome.kind === 'imported' ? (outcome.seeded ?? NO_SEEDS) : NO_SEEDS,
  };
}

const lineOf = (problem: string) => Number(/^line (\d+):/.exec(problem)?.[1] ?? 0);
