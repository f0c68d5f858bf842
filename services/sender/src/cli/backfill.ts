/**
 * Imports a mail provider's send history into the sent log (seed 000-1 step 2, docs/seeds.md), so sends that happened
 * before this platform, or outside it, block re-sends too. It never sends anything.
 *
 *   node dist/cli/backfill.js --file history.csv [--step intro] [--campaign camp-1] [--allow-new-steps]
 *
 * CSV with a header row: recipient (or email), campaign (or campaign_id; else --campaign),
 * timestamp (or sent_at, ISO 8601), provider_message_id (or message_id); optional candidate_id and
 * step (else --step). The rules (domain/history.ts):
 * - Keys get the live path's canonical forms, so a history row blocks the live send it matches; each
 *   row lands in provider_history (duplicates included, for the report) and the first delivery of each
 *   (campaign, address, step) becomes a `sent` row of source `backfill`. Without a candidate_id the
 *   candidate key is `address:<emailHashKeyId>:<emailHash>`: it names the address without spelling it.
 * - A row whose Message-ID is one of ours (`<sendId@MESSAGE_ID_DOMAIN>`) is that live send's
 *   delivery: never counted twice, and an ambiguous send it names is recorded `sent` (its
 *   SendRecorded goes out through the outbox, which the running sender's relay publishes).
 * - `--step S` with a step column naming another step, or a step the campaign never had (unless
 *   `--allow-new-steps`), refuses the whole file, by line number (exit 1). Lines without an address
 *   or a date are skipped and listed.
 * - The import is named by the file's content: the same file again changes nothing (exit 0); with
 *   other options it is refused. All or nothing: one transaction.
 * - Deliveries the provider had not reported when it exported the history are not in it (the blind
 *   window, printed with the history's time range): import a later export to close it.
 * Env: DATABASE_URL, DATABASE_SCHEMA (default sender), TOPIC_PREFIX, MESSAGE_ID_DOMAIN (default
 * outreach.local), and the sender's emailHash key: EMAIL_HASH_KEY_FILE (or EMAIL_HASH_KEY) and
 * EMAIL_HASH_KEY_ID, and the suppression key (SUPPRESSION_KEY_FILE or SUPPRESSION_KEY): rows of a person
 * erased here (ADR 014) are skipped and counted, never imported. The last line printed is the result as JSON.
 */
import { parseArgs } from 'node:util';
import type { KeyObject } from 'node:crypto';
import { ConfigError, createPool, loadEmailHashKey, loadSuppressionKey, topicName } from '@outreach/shared';
import { type EmailHashKey } from '@outreach/contracts';
import { HistoryRepository } from '../adapters/history-repository.js';
import { SendsRepository } from '../adapters/sends-repository.js';
import { SubjectsRepository } from '../adapters/subjects-repository.js';
import { backfill } from '../workflow/backfill.js';
import { SendCommands } from '../workflow/send-commands.js';

const usage =
  'usage: DATABASE_URL=... backfill --file <history.csv> [--step <step>] [--campaign <id>] [--allow-new-steps] [--batch-size N]\n';

function fail(message: string): never {
  process.stderr.write(`backfill: ${message}\n${usage}`);
  process.exit(2);
}

const { values } = parseArgs({
  options: {
    file: { type: 'string' },
    step: { type: 'string' },
    campaign: { type: 'string' },
    'allow-new-steps': { type: 'boolean', default: false },
    'batch-size': { type: 'string' },
  },
});
if (!values.file) fail('--file <history.csv> is required');
const databaseUrl = process.env.DATABASE_URL ?? fail('DATABASE_URL is required');
const batchSize = Number(values['batch-size'] ?? 5_000);
if (!Number.isSafeInteger(batchSize) || batchSize < 1 || batchSize > 50_000) fail('--batch-size must be 1 to 50000');
const messageIdDomain = process.env.MESSAGE_ID_DOMAIN || 'outreach.local';
let hashKey: EmailHashKey;
let suppressionKey: KeyObject | undefined;
try {
  suppressionKey = loadSuppressionKey({
    SUPPRESSION_KEY_FILE: process.env.SUPPRESSION_KEY_FILE ?? '',
    SUPPRESSION_KEY: process.env.SUPPRESSION_KEY ?? '',
  });
  hashKey = loadEmailHashKey({
    EMAIL_HASH_KEY_FILE: process.env.EMAIL_HASH_KEY_FILE ?? '',
    EMAIL_HASH_KEY: process.env.EMAIL_HASH_KEY ?? '',
    EMAIL_HASH_KEY_ID: process.env.EMAIL_HASH_KEY_ID ?? '',
  });
} catch (error) {
  if (error instanceof ConfigError) fail(error.message);
  throw error;
}

const pool = createPool({
  connectionString: databaseUrl,
  applicationName: 'sender-backfill',
  schema: process.env.DATABASE_SCHEMA ?? 'sender',
  max: 2,
});
const started = Date.now();
try {
  const prefix = process.env.TOPIC_PREFIX ?? '';
  const sends = new SendsRepository(pool, topicName('sendRecorded', prefix), 60_000, hashKey);
  const subjects = new SubjectsRepository(pool, hashKey, suppressionKey, topicName('sendRecorded', prefix));
  const result = await backfill(new HistoryRepository(pool, new SendCommands(sends), hashKey), {
    erased: (rows) => subjects.erasedRows(rows),
    file: values.file,
    ...(values.step === undefined ? {} : { step: values.step }),
    ...(values.campaign === undefined ? {} : { campaign: values.campaign }),
    allowNewSteps: values['allow-new-steps'],
    messageIdDomain,
    batchSize,
    hashKey,
    onProgress: ({ read, newSends, invalid }) =>
      process.stderr.write(`backfill: ${read} rows read, ${newSends} new sent-log entries, ${invalid} invalid\n`),
  });
  const seconds = Math.round((Date.now() - started) / 100) / 10;
  switch (result.kind) {
    case 'refused':
      console.log('refused: nothing was imported');
      for (const problem of result.problems) console.log(`  ${problem}`);
      console.log(JSON.stringify({ result: 'refused', problems: result.problems.length, seconds }));
      process.exitCode = 1;
      break;
    case 'already_imported': {
      const { record } = result;
      console.log(
        `import ${record.importId}: this file was imported at ${record.importedAt.toISOString()}; nothing changed` +
          (result.resolvedAmbiguous > 0
            ? ` except ${result.resolvedAmbiguous} ambiguous sends it shows delivered, now sent`
            : ''),
      );
      console.log(JSON.stringify({ result: 'already_imported', importId: record.importId, seconds }));
      break;
    }
    case 'imported': {
      const { record, duplicates } = result;
      const imported = record.rowsImported;
      console.log(
        `import ${record.importId}: ${record.lines} rows, ${imported} imported, ${record.newSends} new sent-log entries, ${result.invalidCount} invalid, ${result.erased} of erased people skipped`,
      );
      for (const problem of result.invalid) console.log(`  invalid ${problem}`);
      console.log(
        `matched by Message-ID: ${record.matchedLive} rows are live sends' deliveries (counted once), ` +
          `${record.resolvedAmbiguous} ambiguous sends recorded sent`,
      );
      console.log(
        `duplicates in this history: ${duplicates.total} (campaign, step, address) with more than one delivery`,
      );
      for (const d of duplicates.first)
        console.log(`  ${d.campaignId} ${d.step} ${d.emailHash.slice(0, 16)}… delivered ${d.deliveries} times`);
      if (record.historyTo)
        console.log(
          `history covers ${record.historyFrom?.toISOString()} to ${record.historyTo.toISOString()}. Blind window: ` +
            'deliveries the provider had not reported by its export (its last minutes before the end) are not in it, ' +
            `and ${result.unmatchedAmbiguous} ambiguous sends attempted before its end are not in it; import a later export to close it`,
        );
      console.log(
        JSON.stringify({
          result: 'imported',
          importId: record.importId,
          rows: record.lines,
          imported,
          newSends: record.newSends,
          matchedLive: record.matchedLive,
          resolvedAmbiguous: record.resolvedAmbiguous,
          invalid: result.invalidCount,
          erased: result.erased,
          duplicates: duplicates.total,
          seconds,
        }),
      );
      break;
    }
    default: {
      const exhaustive: never = result;
      throw new Error(`unknown result ${JSON.stringify(exhaustive)}`);
    }
  }
} finally {
  await pool.end();
}
