/**
 * Imports a mail provider's send history into the sent log (seed step 2), so sends that happened
 * before this platform, or outside it, block re-sends too. It never sends anything.
 *
 *   node dist/cli/backfill.js --file history.csv [--step intro] [--campaign camp-1]
 *
 * CSV with a header row: recipient (or email), campaign (or campaign_id; else --campaign),
 * timestamp (or sent_at, ISO 8601), provider_message_id; optional candidate_id and step (else --step).
 * Campaign, step, candidate and address get the canonical forms the live path gives them
 * (packages/shared/src/domain/keys.ts), so a history row blocks the live send it matches. Each row
 * lands in provider_history (duplicates included, for the report); the first row of each
 * (campaign, address, step) also becomes a `sent` row in `sends` with source `backfill`. Without a
 * candidate_id the candidate key is `address:<emailHashKeyId>:<emailHash>`: it names the address
 * without spelling it (the key shows in the API and the reports); a candidate_id that is an address
 * gets the same key, as on the live path (candidateKeyFor). A campaign or step holding an at-sign is
 * an invalid row, as at every other ingress.
 * Env: DATABASE_URL, DATABASE_SCHEMA (default sender), and the sender's emailHash key:
 * EMAIL_HASH_KEY_FILE (or EMAIL_HASH_KEY) and EMAIL_HASH_KEY_ID.
 */
import { createReadStream } from 'node:fs';
import { randomUUID } from 'node:crypto';
import { parseArgs } from 'node:util';
import {
  addressCandidateKey,
  canonicalAddress,
  canonicalCampaignId,
  canonicalStep,
  candidateKeyFor,
  ConfigError,
  createPool,
  emailHash,
  idProblem,
  loadEmailHashKey,
  sendIdFor,
  type EmailHashKey,
} from '@outreach/shared';
import { parse } from 'csv-parse';

interface Row {
  line: number;
  campaignId: string;
  emailNorm: string;
  emailHash: string;
  email: string;
  step: string;
  candidateKey: string | null;
  providerMessageId: string | null;
  sentAt: Date;
}

function fail(message: string): never {
  process.stderr.write(`backfill: ${message}\n`);
  process.exit(2);
}

const { values } = parseArgs({
  options: {
    file: { type: 'string' },
    step: { type: 'string' },
    campaign: { type: 'string' },
    'batch-size': { type: 'string' },
  },
});
if (!values.file) fail('--file <history.csv> is required');
const databaseUrl = process.env.DATABASE_URL ?? fail('DATABASE_URL is required');
const schema = process.env.DATABASE_SCHEMA ?? 'sender';
const batchSize = Number(values['batch-size'] ?? 500);
const pool = createPool({ connectionString: databaseUrl, applicationName: 'sender-backfill', schema, max: 2 });
const importId = randomUUID();
let hashKey: EmailHashKey;
try {
  hashKey = loadEmailHashKey({
    EMAIL_HASH_KEY_FILE: process.env.EMAIL_HASH_KEY_FILE ?? '',
    EMAIL_HASH_KEY: process.env.EMAIL_HASH_KEY ?? '',
    EMAIL_HASH_KEY_ID: process.env.EMAIL_HASH_KEY_ID ?? '',
  });
} catch (error) {
  if (error instanceof ConfigError) fail(error.message);
  throw error;
}

const pick = (record: Record<string, string>, ...names: string[]) => {
  for (const name of names) if (record[name]?.trim()) return record[name].trim();
  return undefined;
};

let total = 0;
let newSends = 0;
const invalid: string[] = [];
let batch: Row[] = [];

async function flush(): Promise<void> {
  if (batch.length === 0) return;
  const rows = batch;
  batch = [];
  const client = await pool.connect();
  try {
    await client.query('BEGIN');
    await client.query(
      `INSERT INTO provider_history (import_id, line, campaign_id, email_norm, email_hash, step, candidate_key, provider_message_id, sent_at,
                                     email_hash_key_id)
       SELECT $1, *, $10 FROM unnest($2::int[], $3::text[], $4::text[], $5::text[], $6::text[], $7::text[], $8::text[], $9::timestamptz[])
       ON CONFLICT (import_id, line) DO NOTHING`,
      [
        importId,
        rows.map((r) => r.line),
        rows.map((r) => r.campaignId),
        rows.map((r) => r.emailNorm),
        rows.map((r) => r.emailHash),
        rows.map((r) => r.step),
        rows.map((r) => r.candidateKey),
        rows.map((r) => r.providerMessageId),
        rows.map((r) => r.sentAt),
        hashKey.id,
      ],
    );
    // No candidate id: the address stands in, by its keyed hash (never `email:<address>`).
    const keys = rows.map((r) => r.candidateKey ?? addressCandidateKey(r.emailNorm, hashKey));
    const inserted = await client.query(
      `INSERT INTO sends (send_id, campaign_id, candidate_id, candidate_key, email, email_norm, email_hash, step, subject, body,
                          request_id, correlation_id, source, status, provider_message_id, sent_at, claimed_at, attempts, reason,
                          email_hash_key_id)
       SELECT q.send_id, q.campaign_id, q.candidate_key, q.candidate_key, q.email, q.email_norm, q.email_hash, q.step, '', '',
              'backfill:' || $1::text || ':' || q.line, $1::text, 'backfill', 'sent', q.provider_message_id, q.sent_at, q.sent_at, 1,
              'imported from provider history', $12::text
       FROM unnest($2::uuid[], $3::text[], $4::text[], $5::text[], $6::text[], $7::text[], $8::text[], $9::text[], $10::timestamptz[], $11::int[])
            AS q(send_id, campaign_id, candidate_key, email, email_norm, email_hash, step, provider_message_id, sent_at, line)
       ON CONFLICT DO NOTHING`,
      [
        importId,
        rows.map((r, i) => sendIdFor(r.campaignId, keys[i] as string, r.step)),
        rows.map((r) => r.campaignId),
        keys,
        rows.map((r) => r.email),
        rows.map((r) => r.emailNorm),
        rows.map((r) => r.emailHash),
        rows.map((r) => r.step),
        rows.map((r) => r.providerMessageId),
        rows.map((r) => r.sentAt),
        rows.map((r) => r.line),
        hashKey.id,
      ],
    );
    await client.query('COMMIT');
    newSends += inserted.rowCount ?? 0;
  } catch (error) {
    await client.query('ROLLBACK').catch(() => undefined);
    throw error;
  } finally {
    client.release();
  }
  process.stderr.write(`backfill: ${total} rows read, ${newSends} new sent-log entries, ${invalid.length} invalid\n`);
}

const parser = createReadStream(values.file).pipe(
  parse({
    columns: (header: string[]) => header.map((h) => h.trim().toLowerCase()),
    skip_empty_lines: true,
    trim: true,
  }),
);
let line = 1;
for await (const record of parser as AsyncIterable<Record<string, string>>) {
  line++;
  total++;
  const email = pick(record, 'recipient', 'email', 'to');
  const address = email ? canonicalAddress(email) : null;
  const rawCampaign = pick(record, 'campaign', 'campaign_id') ?? values.campaign;
  const campaignId = rawCampaign ? canonicalCampaignId(rawCampaign) : undefined;
  const rawStep = pick(record, 'step') ?? values.step;
  const step = rawStep ? canonicalStep(rawStep) : undefined;
  const timestamp = pick(record, 'timestamp', 'sent_at', 'date');
  const sentAt = timestamp ? new Date(timestamp) : undefined;
  const problems = [
    !address ? 'recipient is not an address' : undefined,
    !campaignId ? 'no campaign (column or --campaign)' : idProblem('campaign', campaignId),
    !step ? 'no step (column or --step)' : idProblem('step', step),
    !sentAt || Number.isNaN(sentAt.getTime()) ? 'timestamp is missing or not a date' : undefined,
  ].filter(Boolean);
  if (problems.length > 0) {
    invalid.push(`line ${line}: ${problems.join(', ')}`);
    continue;
  }
  const candidate = pick(record, 'candidate_id', 'candidate');
  const candidateKey = candidate ? candidateKeyFor(candidate, hashKey) : '';
  const { address: canonical, norm } = address as NonNullable<typeof address>;
  batch.push({
    line,
    campaignId: campaignId as string,
    email: canonical,
    emailNorm: norm,
    emailHash: emailHash(norm, hashKey),
    step: step as string,
    candidateKey: candidateKey === '' ? null : candidateKey,
    providerMessageId: pick(record, 'provider_message_id', 'message_id') ?? null,
    sentAt: sentAt as Date,
  });
  if (batch.length >= batchSize) await flush();
}
await flush();

const duplicates = await pool.query<{ campaign_id: string; step: string; email_hash: string; n: number }>(
  `SELECT campaign_id, step, min(email_hash) AS email_hash, count(*)::int AS n FROM provider_history WHERE import_id = $1
   GROUP BY campaign_id, step, email_norm HAVING count(*) > 1 ORDER BY n DESC, campaign_id, step`,
  [importId],
);
await pool.end();

console.log(
  `import ${importId}: ${total} rows, ${total - invalid.length} imported, ${newSends} new sent-log entries, ${invalid.length} invalid`,
);
for (const problem of invalid.slice(0, 20)) console.log(`  invalid ${problem}`);
console.log(
  `duplicates in this history: ${duplicates.rows.length} (campaign, step, address) with more than one delivery`,
);
for (const d of duplicates.rows.slice(0, 20))
  console.log(`  ${d.campaign_id} ${d.step} ${d.email_hash.slice(0, 16)}… delivered ${d.n} times`);
