/**
 * Imports pre-platform variant history, so seed 000-3 step 1 (count the candidates that got both
 * arms) runs on an incident's own data, and prints that count per experiment; and seeds each
 * candidate's sticky assignment with the arm it saw first (step 2), so the platform sends that arm.
 *
 *   DATABASE_URL=... [DATABASE_SCHEMA=experiment] [TOPIC_PREFIX=] \
 *     node dist/cli/import-history.js --file history.csv [--format csv|ndjson] [--max-lines 1000000]
 *
 * Lines: candidate, experiment, variant, time[, source] (domain/exposure-history.ts has the rules).
 * All or nothing: any bad line refuses the file, listed by line number (exit 1). The same file
 * again changes nothing (exit 0). Contaminations found go out as VariantContaminated through the
 * service's outbox (its relay publishes them), as do the seeded assignments' VariantAssigned, hence
 * TOPIC_PREFIX.
 */
import { extname } from 'node:path';
import { parseArgs } from 'node:util';
import { createPool, topicName } from '@outreach/shared';
import { ExperimentsRepository } from '../adapters/experiments-repository.js';
import type { HistoryFormat } from '../domain/exposure-history.js';
import { DEFAULT_MAX_LINES, importHistory } from '../workflow/import-history.js';

const usage =
  'usage: DATABASE_URL=... import-history --file <history.csv|history.ndjson> [--format csv|ndjson] [--max-lines N]\n';
function fail(message: string): never {
  process.stderr.write(`import-history: ${message}\n${usage}`);
  process.exit(2);
}

const { values } = parseArgs({
  options: {
    file: { type: 'string' },
    format: { type: 'string' },
    'max-lines': { type: 'string' },
  },
});
if (!values.file) fail('--file is required');
const databaseUrl = process.env.DATABASE_URL ?? fail('DATABASE_URL is required');
const byExtension: Record<string, HistoryFormat> = { '.csv': 'csv', '.ndjson': 'ndjson', '.jsonl': 'ndjson' };
const format = (values.format ?? byExtension[extname(values.file).toLowerCase()]) as HistoryFormat | undefined;
if (format !== 'csv' && format !== 'ndjson') fail('--format csv|ndjson (or a .csv, .ndjson or .jsonl file)');
const maxLines = Number(values['max-lines'] ?? DEFAULT_MAX_LINES);
if (!Number.isSafeInteger(maxLines) || maxLines < 1) fail('--max-lines must be a positive integer');

const pool = createPool({
  connectionString: databaseUrl,
  applicationName: 'experiment-import-history',
  schema: process.env.DATABASE_SCHEMA ?? 'experiment',
  max: 2,
});
try {
  const repository = new ExperimentsRepository(pool, topicName('assignments', process.env.TOPIC_PREFIX ?? ''));
  const result = await importHistory(repository, { file: values.file, format, now: new Date(), maxLines });
  if (result.kind === 'refused') {
    console.log(`refused: ${result.invalidLines} invalid of ${result.lines} lines; nothing was imported`);
    for (const problem of result.problems) console.log(`  ${problem}`);
    if (result.problems.length < result.invalidLines) console.log('  (first problems only)');
    process.exitCode = 1;
  } else {
    console.log(
      result.kind === 'imported'
        ? `import ${result.importId}: ${result.lines} lines, ${result.exposures} exposures, ${result.newExposures} new, ` +
            `${result.duplicateLines} duplicate lines counted once, ${result.newlyContaminated} contaminations found or widened`
        : `import ${result.importId}: this file was imported at ${result.importedAt.toISOString()}; nothing changed`,
    );
    if (result.ignoredColumns > 0) console.log(`  ${result.ignoredColumns} unknown columns ignored`);
    const a = result.assignments;
    if (result.kind === 'imported')
      console.log(
        `assignments: ${a.seeded} seeded with the arm history saw first, ${a.alreadyAssigned} already assigned it, ` +
          `${a.keptOtherArm} kept on another arm (contaminated), ${a.heldByAnotherExperiment} held by another experiment of their exclusion group`,
      );
    for (const c of result.contamination)
      console.log(
        `experiment ${c.experimentId}: ${c.candidates} candidates seen in more than one arm (${c.withImportedHistory} with imported history)`,
      );
  }
} finally {
  await pool.end();
}
