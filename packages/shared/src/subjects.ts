/**
 * Data-subject requests (ADR 014): the suppression key, the keyed hashes made under it, and the
 * service-to-service protocol by which the planner asks each service for its part of a person's
 * data (export) or for its erasure. Every service answers the same two routes
 * (`POST /v1/subject-parts/export`, scope `read`; `POST /v1/subject-parts/erase`, scope `erase`);
 * addresses travel only in request bodies, never in a URL or a log line.
 */
import { createHmac, createSecretKey, type KeyObject } from 'node:crypto';
import { Type, type Static } from '@sinclair/typebox';
import { readKeyMaterial } from './email-hash-key.js';
import { readTextFile, type ReadFile } from './security/secrets.js';

/** Spread into the config schema of a service that holds the suppression key (the planner, the sender). */
export const SuppressionKeyConfigSchema = Type.Object({
  /**
   * A file holding the suppression key (a mounted Secret; `openssl rand -hex 32`): what an erased
   * address's suppression, and the record of an erasure, are kept as a keyed hash under. Never
   * rotated with the emailHash key: a new key would forget every erased person's objection.
   */
  SUPPRESSION_KEY_FILE: Type.String({ default: '' }),
  /** The key itself, for development and tests; exactly one of this and SUPPRESSION_KEY_FILE. */
  SUPPRESSION_KEY: Type.String({ default: '' }),
});
export type SuppressionKeyConfig = Static<typeof SuppressionKeyConfigSchema>;

/**
 * The suppression key, or undefined when none is configured (then erasure answers 503 naming the
 * variable, and the sender's gate reads the plain suppression list only). A bad one stops the start.
 */
export function loadSuppressionKey(
  config: SuppressionKeyConfig,
  readFile: ReadFile = readTextFile,
): KeyObject | undefined {
  const material = readKeyMaterial(
    { name: 'SUPPRESSION_KEY', file: config.SUPPRESSION_KEY_FILE, inline: config.SUPPRESSION_KEY },
    readFile,
  );
  return material === undefined ? undefined : createSecretKey(material);
}

export type SubjectHashKind = 'address' | 'candidate' | 'conversation';

/**
 * Hex HMAC-SHA256 of `<kind>:<value>` under the suppression key: an address's (its canonical
 * `emailNorm`), a candidate key's, a conversation id's. The kind keeps the three apart.
 */
export function subjectHash(key: KeyObject, kind: SubjectHashKind, value: string): string {
  return createHmac('sha256', key).update(`${kind}:${value}`, 'utf8').digest('hex');
}

/** What an erased key becomes in a row that keeps it for a guarantee: a pseudonym, never the value. */
export function erasedPseudonym(hash: string): string {
  return `erased:${hash}`;
}

const Hash = Type.String({ pattern: '^[0-9a-f]{64}$' });
/** A candidate key and its hash under the suppression key (the planner makes both). */
export const SubjectCandidate = Type.Object(
  { key: Type.String({ minLength: 1, maxLength: 1024 }), hash: Hash },
  { additionalProperties: false },
);
/** A canonical address and its hash (only the sender is sent addresses). */
export const SubjectAddress = Type.Object(
  { email: Type.String({ minLength: 3, maxLength: 320 }), hash: Hash },
  { additionalProperties: false },
);
/** How many keys of each kind one part request may name. */
export const MAX_SUBJECT_KEYS = 50;
/** Rows per table in one page of an export part. */
export const MAX_SUBJECT_PAGE = 500;

export const SubjectPartExportBody = Type.Object(
  {
    candidates: Type.Array(SubjectCandidate, { maxItems: MAX_SUBJECT_KEYS }),
    addresses: Type.Array(SubjectAddress, { maxItems: MAX_SUBJECT_KEYS }),
    limit: Type.Integer({ minimum: 1, maximum: MAX_SUBJECT_PAGE }),
    page: Type.Integer({ minimum: 0, maximum: 1_000_000 }),
  },
  { additionalProperties: false },
);
export type SubjectPartExportBody = Static<typeof SubjectPartExportBody>;

export const SubjectPartExportAnswer = Type.Object({
  /** Per table, the page's rows (each table read `limit` rows from `page * limit`). */
  tables: Type.Record(Type.String(), Type.Array(Type.Record(Type.String(), Type.Unknown()))),
  /** The next page, while any table filled this one. */
  next: Type.Union([Type.Integer({ minimum: 1 }), Type.Null()]),
});
export type SubjectPartExportAnswer = Static<typeof SubjectPartExportAnswer>;

export const SubjectPartEraseBody = Type.Object(
  {
    candidates: Type.Array(SubjectCandidate, { maxItems: MAX_SUBJECT_KEYS }),
    addresses: Type.Array(SubjectAddress, { maxItems: MAX_SUBJECT_KEYS }),
    /** The request's own hash (its candidate's or its address's): what a second erasure recognizes. */
    subject: Hash,
  },
  { additionalProperties: false },
);
export type SubjectPartEraseBody = Static<typeof SubjectPartEraseBody>;

export const ERASURE_STATUSES = ['erased', 'already_erased', 'not_found'] as const;
export type ErasureStatus = (typeof ERASURE_STATUSES)[number];

export const SubjectPartEraseAnswer = Type.Object({
  status: Type.Union(ERASURE_STATUSES.map((s) => Type.Literal(s))),
  /** Rows changed or deleted, per table. */
  rows: Type.Record(Type.String(), Type.Integer({ minimum: 0 })),
  /** Candidate keys found under the addresses (the sender's: by-address erasure reaches the others with them). */
  candidateKeys: Type.Array(Type.String(), { maxItems: MAX_SUBJECT_KEYS }),
});
export type SubjectPartEraseAnswer = Static<typeof SubjectPartEraseAnswer>;

/** The status of one service's erasure: what it changed, else whether an earlier erasure did. */
export function erasureStatus(changed: number, erasedBefore: boolean): ErasureStatus {
  return changed > 0 ? 'erased' : erasedBefore ? 'already_erased' : 'not_found';
}

/**
 * The `subject_erasures` table every service keeps (its own migrations): the hashes of every erasure
 * asked of it (the rebuild filter, ErasedSubjects, reads them), and whether one changed rows here
 * (`erased_rows`: a second erasure says `already_erased` rather than `not_found`), and when the latest
 * was (`erased_at`: the planner refuses a request made before it). Returns whether an
 * erasure of any of `hashes` changed rows before; records them all, with `changed`.
 */
export async function recordErasure(
  client: { query: (sql: string, params: unknown[]) => Promise<{ rows: unknown[] }> },
  hashes: readonly string[],
  changed: boolean,
): Promise<boolean> {
  const before = await client.query(
    'SELECT 1 FROM subject_erasures WHERE subject_hash = ANY($1::text[]) AND erased_rows LIMIT 1',
    [hashes],
  );
  await client.query(
    `INSERT INTO subject_erasures (subject_hash, erased_rows)
     SELECT h, $2::boolean FROM (SELECT DISTINCT unnest($1::text[]) AS h ORDER BY 1) d
     ON CONFLICT (subject_hash) DO UPDATE SET erased_rows = subject_erasures.erased_rows OR excluded.erased_rows,
                                             erased_at = greatest(subject_erasures.erased_at, now())`,
    [hashes, changed],
  );
  return before.rows.length > 0;
}

/**
 * The lock that orders an erasure against what writes a person's rows from the log (the planner's
 * intake, the liveness projector): each of those takes it shared for its transaction and then asks
 * `subject_erasures`; an erasure takes it exclusive in its own. Either the writer commits first and
 * the erasure sees its rows, or the erasure commits first and the writer's probe sees the erasure.
 * One lock per batch, never per row; erasures are rare, so writers seldom wait. Keyed by the schema,
 * so services sharing a database do not wait on each other's erasures.
 */
const SUBJECT_ERASURE_LOCK = 0x0e7a5e14; // an int4: the first half of a two-key advisory lock
type Queryable = { query: (sql: string, params?: unknown[]) => Promise<unknown> };
export async function lockAgainstErasure(client: Queryable): Promise<void> {
  await client.query('SELECT pg_advisory_xact_lock_shared($1::int, hashtext(current_schema()))', [
    SUBJECT_ERASURE_LOCK,
  ]);
}
export async function lockForErasure(client: Queryable): Promise<void> {
  await client.query('SELECT pg_advisory_xact_lock($1::int, hashtext(current_schema()))', [SUBJECT_ERASURE_LOCK]);
}

/** One table of a service's export part: a SELECT of the person's rows, in a stable order (parameters: text arrays). */
export interface SubjectTable {
  readonly name: string;
  /** Reads the parameters `params` (as exportTables is given them); no LIMIT (exportTables adds it). */
  readonly sql: string;
}

/**
 * One page of a service's export part: each table's rows `page * limit` to `page * limit + limit`,
 * and `next` while any table had more. Rows are read as JSON by PostgreSQL (`to_jsonb`), so what a
 * row holds is what the export shows.
 */
export async function exportTables(
  client: { query: (sql: string, params: unknown[]) => Promise<{ rows: Array<Record<string, unknown>> }> },
  tables: readonly SubjectTable[],
  params: readonly unknown[],
  limit: number,
  page: number,
): Promise<SubjectPartExportAnswer> {
  const out: Record<string, Array<Record<string, unknown>>> = {};
  let more = false;
  const n = params.length;
  // Every parameter named once more, typed: a table that reads only some of them would leave the
  // others without a type, which PostgreSQL refuses.
  const typed = params.map((_, i) => `cardinality($${i + 1}::text[]) >= 0`).join(' AND ');
  for (const table of tables) {
    const { rows } = await client.query(
      `SELECT to_jsonb(t) AS row FROM (${table.sql}) t WHERE ${typed || 'true'}
       LIMIT $${n + 1}::int OFFSET $${n + 2}::bigint`,
      [...params, limit + 1, page * limit],
    );
    if (rows.length > limit) more = true;
    out[table.name] = rows.slice(0, limit).map((r) => r.row as Record<string, unknown>);
  }
  return { tables: out, next: more ? page + 1 : null };
}

/**
 * The rebuild filter (ADR 014, "Rebuilds do not resurrect"): which of a batch's candidate keys belong
 * to an erased person, by their hashes under the suppression key in the service's live
 * `subject_erasures` (one keyed lookup per batch). A projection rebuilt from the log (the liveness
 * rebuild, the experiment replay, a live projector replaying after a reset) asks it and does not
 * bring the person back. Without a suppression key nothing is known erased (the service warns at start).
 */
export class ErasedSubjects {
  constructor(
    /** Where `subject_erasures` is read: the live schema's pool (a rebuild writes elsewhere). */
    readonly db: { query: (sql: string, params: unknown[]) => Promise<{ rows: unknown[] }> },
    private readonly key: KeyObject | undefined,
  ) {}

  get configured(): boolean {
    return this.key !== undefined;
  }

  /** Each erased key of `candidateKeys`, with the pseudonym the erasure left (`erased:<hash>`). */
  async candidates(
    candidateKeys: Iterable<string>,
    client: { query: (sql: string, params: unknown[]) => Promise<{ rows: unknown[] }> } = this.db,
  ): Promise<Map<string, string>> {
    const erased = new Map<string, string>();
    if (!this.key) return erased;
    const hashes = new Map<string, string>();
    for (const candidateKey of candidateKeys)
      if (!candidateKey.startsWith('erased:') && !hashes.has(candidateKey))
        hashes.set(candidateKey, subjectHash(this.key, 'candidate', candidateKey));
    if (hashes.size === 0) return erased;
    const { rows } = await client.query(
      'SELECT subject_hash FROM subject_erasures WHERE subject_hash = ANY($1::text[])',
      [[...hashes.values()]],
    );
    const found = new Set((rows as Array<{ subject_hash: string }>).map((r) => r.subject_hash));
    for (const [candidateKey, hash] of hashes) if (found.has(hash)) erased.set(candidateKey, erasedPseudonym(hash));
    return erased;
  }
}
