/**
 * Imports a provider's send history (domain/history.ts has the rules, adapters/history-repository.ts
 * the writes): the file is hashed first, so a file imported before is found by its content and
 * changes nothing; then it is read and written in one transaction, and refused as a whole (rolled
 * back, every offending line listed) when its step column contradicts `--step` or names a step its
 * campaign never had.
 */
import { createHash } from 'node:crypto';
import { createReadStream } from 'node:fs';
import { canonicalCampaignId, canonicalStep, type EmailHashKey } from '@outreach/contracts';
import { parse } from 'csv-parse';
import {
  ImportRefused,
  type HistoryDuplicate,
  type HistoryRepository,
  type ImportOptions,
  type ImportRecord,
} from '../adapters/history-repository.js';
import { historyLine, importIdOf, optionProblem, StepsSeen, type HistoryRow } from '../domain/history.js';

export interface BackfillOptions {
  readonly file: string;
  /** As given on the command line (made canonical here). */
  readonly step?: string;
  readonly campaign?: string;
  readonly allowNewSteps: boolean;
  readonly messageIdDomain: string;
  readonly batchSize: number;
  readonly hashKey: EmailHashKey;
  readonly onProgress?: (progress: { read: number; newSends: number; invalid: number }) => void;
  /**
   * The rebuild filter (ADR 014): of a batch's rows, those of an erased person (by the address's or
   * the candidate key's hash under the suppression key), skipped, never imported.
   */
  readonly erased?: (rows: readonly HistoryRow[]) => Promise<ReadonlySet<HistoryRow>>;
}

export type BackfillResult =
  | { readonly kind: 'refused'; readonly problems: readonly string[] }
  | {
      readonly kind: 'already_imported';
      readonly record: ImportRecord;
      /** Ambiguous sends its history settled on this run (sends that became ambiguous since). */
      readonly resolvedAmbiguous: number;
    }
  | {
      readonly kind: 'imported';
      readonly record: ImportRecord;
      readonly invalidCount: number;
      /** `line N: reason`, the first few. */
      readonly invalid: readonly string[];
      readonly duplicates: { readonly total: number; readonly first: readonly HistoryDuplicate[] };
      /** Ambiguous live sends attempted before the history's end that it does not show. */
      readonly unmatchedAmbiguous: number;
      /** Rows of erased people, skipped (ADR 014). */
      readonly erased: number;
    };

const SHOWN = 20;
/** An import this large changes the tables' statistics enough to refresh them at once (autovacuum would, later). */
const ANALYZE_AFTER_ROWS = 10_000;

async function sha256Of(file: string): Promise<string> {
  const hash = createHash('sha256');
  for await (const chunk of createReadStream(file)) hash.update(chunk as Buffer);
  return hash.digest('hex');
}

function lines(numbers: readonly number[], count: number): string {
  return `${count === 1 ? 'line' : 'lines'} ${numbers.join(', ')}${count > numbers.length ? ` (and ${count - numbers.length} more)` : ''}`;
}

function sameOptions(record: ImportOptions, options: ImportOptions): boolean {
  return (
    record.step === options.step &&
    record.campaignId === options.campaignId &&
    record.allowNewSteps === options.allowNewSteps
  );
}

export async function backfill(repository: HistoryRepository, options: BackfillOptions): Promise<BackfillResult> {
  const problems = [optionProblem('step', options.step), optionProblem('campaign', options.campaign)].filter(
    (p): p is string => p !== undefined,
  );
  if (problems.length > 0) return { kind: 'refused', problems };
  const step = options.step === undefined ? undefined : canonicalStep(options.step);
  const campaign = options.campaign === undefined ? undefined : canonicalCampaignId(options.campaign);
  const importOptions: ImportOptions = {
    step: step ?? null,
    campaignId: campaign ?? null,
    allowNewSteps: options.allowNewSteps,
  };

  const contentSha256 = await sha256Of(options.file);
  const importId = importIdOf(contentSha256);
  const again = async (record: ImportRecord): Promise<BackfillResult> => {
    if (!sameOptions(record, importOptions))
      return {
        kind: 'refused',
        problems: [
          `this file was imported at ${record.importedAt.toISOString()} (import ${record.importId}) with ` +
            `--step ${record.step ?? '(none)'} --campaign ${record.campaignId ?? '(none)'}` +
            `${record.allowNewSteps ? ' --allow-new-steps' : ''}: importing it again with other options would count its deliveries twice`,
        ],
      };
    return { kind: 'already_imported', record, resolvedAmbiguous: await repository.resolveAmbiguous(importId) };
  };
  const existing = await repository.findImport(contentSha256);
  if (existing) return again(existing);

  try {
    const result = await repository.run({ importId, contentSha256, ...importOptions }, async (writer) => {
      const steps = new StepsSeen(SHOWN);
      const invalid: string[] = [];
      const mismatched: number[] = [];
      let invalidCount = 0;
      let mismatchedCount = 0;
      let read = 0;
      let rowsImported = 0;
      let newSends = 0;
      let matchedLive = 0;
      let from: Date | null = null;
      let to: Date | null = null;
      let batch: HistoryRow[] = [];
      let erased = 0;
      const flush = async () => {
        if (batch.length === 0) return;
        const skip = options.erased ? await options.erased(batch) : new Set<HistoryRow>();
        erased += skip.size;
        const kept = skip.size === 0 ? batch : batch.filter((row) => !skip.has(row));
        const written = kept.length === 0 ? { newSends: 0, matchedLive: 0 } : await writer.insert(kept);
        newSends += written.newSends;
        matchedLive += written.matchedLive;
        batch = [];
        options.onProgress?.({ read, newSends, invalid: invalidCount });
      };
      const parser = createReadStream(options.file).pipe(
        parse({
          columns: (header: string[]) => header.map((h) => h.trim().toLowerCase()),
          skip_empty_lines: true,
          trim: true,
          bom: true,
          // Each record with the line it ended on: a refusal names lines an editor shows.
          info: true,
        }),
      );
      const lineOptions = {
        ...(step ? { step } : {}),
        ...(campaign ? { campaign } : {}),
        messageIdDomain: options.messageIdDomain,
      };
      type Parsed = { record: Record<string, string>; info: { lines: number } };
      for await (const { record, info } of parser as AsyncIterable<Parsed>) {
        read++;
        const line = historyLine(record, info.lines, lineOptions, options.hashKey);
        if (line.kind === 'invalid') {
          invalidCount++;
          if (invalid.length < SHOWN) invalid.push(`line ${line.line}: ${line.problems.join(', ')}`);
          continue;
        }
        if (line.kind === 'step_mismatch') {
          mismatchedCount++;
          if (mismatched.length < SHOWN) mismatched.push(line.line);
          continue;
        }
        const { row } = line;
        steps.add(row);
        rowsImported++;
        if (from === null || row.sentAt < from) from = row.sentAt;
        if (to === null || row.sentAt > to) to = row.sentAt;
        batch.push(row);
        if (batch.length >= options.batchSize) await flush();
      }
      await flush();

      const refusals: string[] = [];
      if (mismatchedCount > 0)
        refusals.push(
          `--step ${step}: the step column names another step on ${lines(mismatched, mismatchedCount)}; ` +
            'drop --step to import the steps the file names, or fix the file',
        );
      const known = await writer.knownSteps(steps.campaigns);
      for (const unknown of steps.unknownSteps(known, options.allowNewSteps))
        refusals.push(
          `campaign ${unknown.campaignId} never had step ${unknown.step} (${lines(unknown.lines, unknown.count)}); ` +
            'pass --allow-new-steps if it is a step the sender has not sent yet',
        );
      if (refusals.length > 0) throw new ImportRefused(refusals);

      const resolvedAmbiguous = await writer.resolveAmbiguous();
      const duplicates = await writer.duplicates(SHOWN);
      const unmatchedAmbiguous = to === null ? 0 : await writer.unmatchedAmbiguousBefore(to);
      const record = await writer.finish(
        { lines: read, rowsImported: rowsImported - erased, newSends, matchedLive, resolvedAmbiguous },
        { from, to },
      );
      return { kind: 'imported', record, invalidCount, invalid, duplicates, unmatchedAmbiguous, erased } as const;
    });
    if (result) {
      if (result.record.rowsImported >= ANALYZE_AFTER_ROWS) await repository.analyze();
      return result;
    }
  } catch (error) {
    if (error instanceof ImportRefused) return { kind: 'refused', problems: error.problems };
    throw error;
  }
  // Another run imported the same file meanwhile.
  const record = await repository.findImport(contentSha256);
  if (!record) throw new Error(`import ${importId} was claimed by another run, which did not commit it`);
  return again(record);
}
