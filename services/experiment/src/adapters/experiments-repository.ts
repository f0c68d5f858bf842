/**
 * The experiment service's SQL. The rules of assigning (stickiness, status, exclusion groups, the
 * variant, the VariantAssigned event) are the Assignment decider's (domain/assignment.ts): this file
 * loads its states and applies its events, set-based. Sticky assignment is `INSERT … ON CONFLICT DO NOTHING` on
 * `PRIMARY KEY (experiment_id, candidate_key)` followed by a read: racing first calls compute the
 * same bucket anyway, and whichever row landed first is the one everybody returns from then on.
 *
 * Every set of weights is a numbered period (`weight_periods`), written in the transaction that
 * sets the weights, and each assignment stores the period whose weights computed it: the report
 * tests each period against its own weights, whatever the clocks of concurrent requests said.
 */
import { enqueueEvents, withTransaction, type Decided, type Queryable } from '@outreach/shared';
import { type VariantContaminated } from '@outreach/contracts';
import type { Pool, PoolClient } from 'pg';
import {
  assignmentDecider,
  assignmentKey,
  claimsMembership,
  contaminationEvent,
  type AssigningExperiment,
  type AssignmentCommand,
  type AssignmentEvent,
  type AssignmentKey,
  type AssignmentState,
  type ExperimentStatus,
  type Variant,
} from '../domain/assignment.js';
import { contaminatedSql } from './contamination-sql.js';

export type { ExperimentStatus };

/** The first four unnest arrays of an exposure_events INSERT: event id, experiment, candidate, variant. */
const exposureKeyColumns = (
  rows: readonly { eventId: string; experimentId: string; candidateKey: string; variant: string }[],
) => [
  rows.map((e) => e.eventId),
  rows.map((e) => e.experimentId),
  rows.map((e) => e.candidateKey),
  rows.map((e) => e.variant),
];

/**
 * A stored experiment: what assigning reads (its `weightsPeriod` read with `variants` in one
 * statement, and stored on each assignment), and when it was created and last changed.
 */
export interface Experiment extends AssigningExperiment {
  readonly createdAt: Date;
  readonly updatedAt: Date;
}

/** Imported pre-platform history: one exposure, already validated (domain/exposure-history.ts). */
export interface ImportedExposure {
  readonly eventId: string;
  readonly experimentId: string;
  readonly candidateKey: string;
  readonly variant: string;
  readonly exposedAt: Date;
  readonly origin: string | null;
}

export type ImportOutcome =
  | {
      readonly kind: 'imported';
      readonly importedAt: Date;
      readonly newExposures: number;
      readonly contaminations: readonly VariantContaminated[];
    }
  | { readonly kind: 'already-imported'; readonly importedAt: Date };

export interface ContaminationCount {
  readonly experimentId: string;
  /** Candidates seen in more than one arm (assigned or exposed, platform or imported). */
  readonly candidates: number;
  /** Of those, candidates with at least one imported exposure. */
  readonly withImportedHistory: number;
}

interface ContaminationRow {
  experimentId: string;
  candidateKey: string;
  assigned: string | null;
  exposed: string[];
  detectedAt: Date;
}

/** The most contaminated candidates a report lists; `contamination.candidates` counts them all. */
const REPORT_CONTAMINATED_LIMIT = 1_000;

export type Assignment =
  | {
      readonly enrolled: true;
      readonly experimentId: string;
      readonly candidateKey: string;
      readonly variant: string;
      readonly assignedAt: Date;
      readonly created: boolean;
    }
  | { readonly enrolled: false; readonly experimentId: string; readonly candidateKey: string; readonly reason: string };

/** An enrolled candidate's assignment, from its variant and the epoch milliseconds it was assigned at. */
const enrolledAssignment = (
  experimentId: string,
  candidateKey: string,
  { variant, assignedAt }: { readonly variant: string; readonly assignedAt: number },
  created: boolean,
): Assignment => ({ enrolled: true, experimentId, candidateKey, variant, assignedAt: new Date(assignedAt), created });

export interface Exposure {
  readonly eventId: string;
  readonly experimentId: string;
  readonly candidateKey: string;
  readonly variant: string;
  readonly sendId: string;
  readonly campaignId: string;
  readonly recordedAt: Date;
  readonly correlationId: string;
}

/** A candidate's reply (MessageReceived), attributed to variants at report time. */
export interface Reply {
  readonly eventId: string;
  readonly candidateKey: string;
  readonly campaignId: string;
  readonly conversationId: string;
  readonly occurredAt: Date;
}

/**
 * An exposure's candidate replied: a reply in the exposure's campaign (any campaign, for an exposure
 * stored before exposures kept theirs) at or after the exposure was recorded.
 */
const REPLIED = `EXISTS (SELECT 1 FROM reply_events r WHERE r.candidate_key = x.candidate_key
  AND (x.campaign_id IS NULL OR r.campaign_id = x.campaign_id) AND r.occurred_at >= x.recorded_at)`;

export class ExperimentsRepository {
  constructor(
    private readonly pool: Pool,
    private readonly assignmentsTopic: string,
  ) {}

  async create(experiment: Omit<Experiment, 'createdAt' | 'updatedAt' | 'weightsPeriod'>): Promise<boolean> {
    return withTransaction(this.pool, async (client) => {
      const inserted = await client.query(
        `INSERT INTO experiments (experiment_id, salt, status, exclusion_group) VALUES ($1, $2, $3, $4)
         ON CONFLICT (experiment_id) DO NOTHING`,
        [experiment.experimentId, experiment.salt, experiment.status, experiment.exclusionGroup],
      );
      if (inserted.rowCount === 0) return false;
      await this.writeVariants(client, experiment.experimentId, experiment.variants);
      await this.recordWeights(client, experiment.experimentId);
      return true;
    });
  }

  private async writeVariants(client: Queryable, experimentId: string, variants: readonly Variant[]): Promise<void> {
    await client.query(
      `INSERT INTO variants (experiment_id, name, weight, position)
       SELECT $1, * FROM unnest($2::text[], $3::int[], $4::int[])
       ON CONFLICT (experiment_id, name) DO UPDATE SET weight = excluded.weight, position = excluded.position`,
      [experimentId, variants.map((v) => v.name), variants.map((v) => v.weight), variants.map((_, i) => i)],
    );
  }

  /**
   * Opens a new weights period when the variants' weights (or order) differ from the last one's.
   * Callers hold the experiment's row lock, so concurrent changes number their periods in turn.
   */
  private async recordWeights(client: Queryable, experimentId: string): Promise<void> {
    await client.query(
      `WITH current AS (
         SELECT jsonb_agg(jsonb_build_object('name', name, 'weight', weight) ORDER BY position, name) AS weights
         FROM variants WHERE experiment_id = $1
       ), last AS (
         SELECT period, weights FROM weight_periods WHERE experiment_id = $1 ORDER BY period DESC LIMIT 1
       )
       INSERT INTO weight_periods (experiment_id, period, weights)
       SELECT $1, coalesce((SELECT period FROM last), 0) + 1, current.weights FROM current
       WHERE current.weights IS DISTINCT FROM (SELECT weights FROM last)`,
      [experimentId],
    );
  }

  /** Changes weights (for future assignments only) and/or status. Variants can be added, never removed. */
  async update(
    experimentId: string,
    change: { variants?: readonly Variant[]; status?: ExperimentStatus },
    within?: PoolClient,
  ): Promise<void> {
    const run = async (client: PoolClient) => {
      // The row lock orders concurrent changes: each reads the periods the one before it wrote. NO KEY:
      // assignments' foreign-key checks (KEY SHARE) go on meanwhile.
      await client.query('SELECT 1 FROM experiments WHERE experiment_id = $1 FOR NO KEY UPDATE', [experimentId]);
      if (change.status) {
        await client.query('UPDATE experiments SET status = $2, updated_at = now() WHERE experiment_id = $1', [
          experimentId,
          change.status,
        ]);
      }
      if (change.variants) {
        await this.writeVariants(client, experimentId, change.variants);
        await this.recordWeights(client, experimentId);
        await client.query('UPDATE experiments SET updated_at = now() WHERE experiment_id = $1', [experimentId]);
      }
    };
    await (within ? run(within) : withTransaction(this.pool, run));
  }

  /** One statement, so the variants and their period come from one snapshot (a PATCH writes both). */
  async find(experimentId: string, client: Queryable = this.pool): Promise<Experiment | undefined> {
    const { rows } = await client.query<Experiment>(
      `SELECT e.experiment_id AS "experimentId", e.salt, e.status, e.exclusion_group AS "exclusionGroup",
              e.created_at AS "createdAt", e.updated_at AS "updatedAt",
              (SELECT coalesce(jsonb_agg(jsonb_build_object('name', v.name, 'weight', v.weight) ORDER BY v.position, v.name), '[]')
               FROM variants v WHERE v.experiment_id = e.experiment_id) AS variants,
              (SELECT max(p.period) FROM weight_periods p WHERE p.experiment_id = e.experiment_id) AS "weightsPeriod"
       FROM experiments e WHERE e.experiment_id = $1`,
      [experimentId],
    );
    return rows[0];
  }

  /** Stored assignments only (GET never creates). */
  async assignments(experimentId: string, candidateKeys: readonly string[], client: Queryable = this.pool) {
    const { rows } = await client.query<{ candidateKey: string; variant: string; assignedAt: Date }>(
      `SELECT candidate_key AS "candidateKey", variant, assigned_at AS "assignedAt" FROM assignments
       WHERE experiment_id = $1 AND candidate_key = ANY($2::text[])`,
      [experimentId, candidateKeys],
    );
    return new Map(rows.map((r) => [r.candidateKey, r]));
  }

  /** A transaction on this repository's pool (the command seam's unit of work). */
  transaction<T>(work: (client: PoolClient) => Promise<T>): Promise<T> {
    return withTransaction(this.pool, work);
  }

  /** One statement reads every candidate's assignment and group holder (and the transaction's time). */
  async loadAssignments(
    client: PoolClient,
    experiment: Experiment,
    keys: readonly string[],
    purpose: 'assign' | 'seed' = 'assign',
  ): Promise<{ at: number; states: Map<AssignmentKey, AssignmentState> }> {
    const { experimentId, exclusionGroup } = experiment;
    // Each table is read by its primary key and the batch's keys (`= ANY`); the transaction's time
    // comes once, on a row of its own (a timestamp per row would cost a parse per candidate).
    const { rows } = await client.query<{
      candidateKey: string | null;
      variant: string | null;
      assignedAt: Date | null;
      groupHolder: string | null;
      now: Date | null;
    }>(
      `WITH a AS (
         SELECT candidate_key, variant, assigned_at FROM assignments
         WHERE experiment_id = $1 AND candidate_key = ANY($2::text[])
       )
       SELECT candidate_key AS "candidateKey", variant, assigned_at AS "assignedAt", NULL AS "groupHolder",
              NULL::timestamptz AS now
       FROM a
       UNION ALL
       SELECT candidate_key, NULL, NULL, experiment_id, NULL FROM group_memberships
       WHERE exclusion_group = $3 AND candidate_key = ANY($2::text[])
         AND candidate_key NOT IN (SELECT candidate_key FROM a)
       UNION ALL SELECT NULL, NULL, NULL, NULL, now()`,
      [experimentId, keys, exclusionGroup],
    );
    let at = 0;
    // Absent: nothing stored (no assignment, nobody holds the candidate), the decider's initial state.
    const states = new Map<AssignmentKey, AssignmentState>();
    const stateOf = (candidateKey: string) =>
      states.get(assignmentKey(experimentId, candidateKey)) ?? assignmentDecider.initialState;
    const hold = (candidateKey: string, groupHolder: string) =>
      states.set(assignmentKey(experimentId, candidateKey), { ...stateOf(candidateKey), groupHolder });
    for (const row of rows) {
      if (row.candidateKey === null) at = (row.now as Date).getTime();
      else
        states.set(assignmentKey(experimentId, row.candidateKey), {
          ...assignmentDecider.initialState,
          assigned:
            row.variant === null ? null : { variant: row.variant, assignedAt: (row.assignedAt as Date).getTime() },
          groupHolder: row.groupHolder,
        });
    }

    // In one order whatever the batch's, so two experiments of a group claiming the same candidates wait
    // for each other instead of deadlocking.
    const toClaim = keys.filter((key) => claimsMembership(experiment, stateOf(key), purpose)).sort();
    if (toClaim.length > 0 && exclusionGroup !== null) {
      // Waits for a racing claimer of the same candidate; the holder is then read afresh.
      const claimed = await client.query<{ candidateKey: string }>(
        `INSERT INTO group_memberships (exclusion_group, candidate_key, experiment_id)
         SELECT $1, unnest($2::text[]), $3 ON CONFLICT (exclusion_group, candidate_key) DO NOTHING
         RETURNING candidate_key AS "candidateKey"`,
        [exclusionGroup, toClaim, experimentId],
      );
      const ours = new Set(claimed.rows.map((r) => r.candidateKey));
      for (const key of ours) hold(key, experimentId);
      const lost = toClaim.filter((key) => !ours.has(key));
      if (lost.length > 0) {
        const holders = await client.query<{ candidateKey: string; experimentId: string }>(
          `SELECT candidate_key AS "candidateKey", experiment_id AS "experimentId" FROM group_memberships
           WHERE exclusion_group = $1 AND candidate_key = ANY($2::text[])`,
          [exclusionGroup, lost],
        );
        for (const row of holders.rows) hold(row.candidateKey, row.experimentId);
      }
    }
    return { at, states };
  }

  /**
   * Writes the decided assignments (one INSERT for the batch; ON CONFLICT DO NOTHING: a row a racing
   * transaction landed first is the truth, read back and returned as not created) and the
   * VariantAssigned events of the rows that landed. A seeded assignment keeps the time its history
   * gives and the import that seeded it; a drawn one is assigned at the transaction's time.
   */
  async applyAssignments(
    client: PoolClient,
    experiment: Experiment,
    decided: readonly Decided<AssignmentCommand, AssignmentState, AssignmentEvent>[],
  ): Promise<Assignment[]> {
    const { experimentId } = experiment;
    const results: Assignment[] = [];
    const assigned: Array<AssignmentEvent & { type: 'VariantAssigned' }> = [];
    for (const { command, before, events } of decided) {
      const { candidateKey } = command;
      for (const event of events) {
        if (event.type === 'NotEnrolled')
          results.push({ enrolled: false, experimentId, candidateKey, reason: event.reason });
        if (event.type === 'VariantAssigned') assigned.push(event);
      }
      if (events.length === 0 && before.assigned !== null) {
        results.push(enrolledAssignment(experimentId, candidateKey, before.assigned, false));
      }
    }
    if (assigned.length === 0) return results;

    const inserted = await client.query<{ candidateKey: string }>(
      `INSERT INTO assignments (experiment_id, candidate_key, variant, bucket, period, assigned_at, import_id)
       SELECT $1, k, v, b, p, coalesce(at, now()), i
       FROM unnest($2::text[], $3::text[], $4::float8[], $5::int[], $6::timestamptz[], $7::uuid[]) AS t(k, v, b, p, at, i)
       ON CONFLICT (experiment_id, candidate_key) DO NOTHING
       RETURNING candidate_key AS "candidateKey"`,
      [
        experimentId,
        assigned.map((a) => a.event.candidateKey),
        assigned.map((a) => a.event.variant),
        assigned.map((a) => a.bucket),
        assigned.map((a) => a.period),
        assigned.map((a) => (a.importId === null ? null : new Date(a.event.assignedAt))),
        assigned.map((a) => a.importId),
      ],
    );
    const created = new Set(inserted.rows.map((r) => r.candidateKey));
    const landed = assigned.filter((a) => created.has(a.event.candidateKey));
    const racedKeys = assigned.filter((a) => !created.has(a.event.candidateKey)).map((a) => a.event.candidateKey);
    // Rows a racing transaction inserted first: read them back, they are the truth.
    const raced = racedKeys.length === 0 ? new Map() : await this.assignments(experimentId, racedKeys, client);
    for (const { event } of landed) results.push(enrolledAssignment(experimentId, event.candidateKey, event, true));
    for (const row of raced.values()) results.push({ enrolled: true, experimentId, ...row, created: false });
    await enqueueEvents(
      client,
      landed.map(({ event }) => ({ topic: this.assignmentsTopic, event })),
    );
    return results;
  }

  /**
   * Records exposures (idempotent by event id) and returns the contaminations they created or
   * widened, with their VariantContaminated events already in the outbox.
   */
  async recordExposures(exposures: readonly Exposure[]): Promise<VariantContaminated[]> {
    if (exposures.length === 0) return [];
    return withTransaction(this.pool, async (client) => {
      const inserted = await client.query<{ experimentId: string; candidateKey: string }>(
        `INSERT INTO exposure_events (event_id, experiment_id, candidate_key, variant, send_id, recorded_at, campaign_id)
         SELECT * FROM unnest($1::uuid[], $2::text[], $3::text[], $4::text[], $5::uuid[], $6::timestamptz[], $7::text[])
         ON CONFLICT (event_id) DO NOTHING
         RETURNING experiment_id AS "experimentId", candidate_key AS "candidateKey"`,
        [
          ...exposureKeyColumns(exposures),
          exposures.map((e) => e.sendId),
          exposures.map((e) => e.recordedAt),
          exposures.map((e) => e.campaignId),
        ],
      );
      const rows = await this.detectContaminations(client, inserted.rows);
      const events = rows.map((row) => {
        const cause = exposures.find((e) => e.experimentId === row.experimentId && e.candidateKey === row.candidateKey);
        return contaminationOf(row, cause?.correlationId ?? row.candidateKey, cause?.eventId ?? null);
      });
      await enqueueEvents(
        client,
        events.map((event) => ({ topic: this.assignmentsTopic, event })),
      );
      return events;
    });
  }

  /**
   * The one contamination rule, for every way an exposure arrives: a candidate whose assigned and
   * exposed variants (platform sends and imported history alike) are not all one is contaminated.
   * Set-based SQL whose condition is generated from the domain's rule (domain/assignment.ts
   * `contaminationRules`, adapters/contamination-sql.ts); new or widened findings only.
   * Upserts the touched candidates' findings and returns the ones that are new or widened.
   */
  private async detectContaminations(
    client: Queryable,
    touched: ReadonlyArray<{ experimentId: string; candidateKey: string }>,
  ): Promise<ContaminationRow[]> {
    if (touched.length === 0) return [];
    const { rows } = await client.query<ContaminationRow>(
      `WITH touched AS (SELECT DISTINCT * FROM unnest($1::text[], $2::text[]) AS t(experiment_id, candidate_key)),
       seen AS (
         SELECT t.experiment_id, t.candidate_key, a.variant AS assigned,
                array_agg(DISTINCT e.variant ORDER BY e.variant) AS exposed
         FROM touched t
         JOIN exposure_events e USING (experiment_id, candidate_key)
         LEFT JOIN assignments a USING (experiment_id, candidate_key)
         GROUP BY t.experiment_id, t.candidate_key, a.variant
       )
       INSERT INTO contaminations (experiment_id, candidate_key, assigned_variant, exposed_variants)
       SELECT experiment_id, candidate_key, assigned, exposed FROM seen
       WHERE ${contaminatedSql({ assigned: 'assigned', exposed: 'exposed' })}
       ORDER BY experiment_id, candidate_key
       ON CONFLICT (experiment_id, candidate_key) DO UPDATE SET exposed_variants = excluded.exposed_variants, detected_at = now()
         WHERE contaminations.exposed_variants IS DISTINCT FROM excluded.exposed_variants
       RETURNING experiment_id AS "experimentId", candidate_key AS "candidateKey", assigned_variant AS assigned,
                 exposed_variants AS exposed, detected_at AS "detectedAt"`,
      [touched.map((r) => r.experimentId), touched.map((r) => r.candidateKey)],
    );
    return rows;
  }

  /** Records replies, idempotent by event id. */
  async recordReplies(replies: readonly Reply[]): Promise<void> {
    if (replies.length === 0) return;
    await this.pool.query(
      `INSERT INTO reply_events (event_id, candidate_key, campaign_id, conversation_id, occurred_at)
       SELECT * FROM unnest($1::uuid[], $2::text[], $3::text[], $4::text[], $5::timestamptz[])
       ON CONFLICT (event_id) DO NOTHING`,
      [
        replies.map((r) => r.eventId),
        replies.map((r) => r.candidateKey),
        replies.map((r) => r.campaignId),
        replies.map((r) => r.conversationId),
        replies.map((r) => r.occurredAt),
      ],
    );
  }

  /**
   * Imports pre-platform exposures in one transaction: all of the file or none of it. The import
   * row (keyed by the file's content) goes first, so a second run of the same file, even a
   * concurrent one, finds it and writes nothing; exposures already present (the same line in
   * another file) are skipped by their content-derived event ids. `seed` runs next, in the same
   * transaction (the sticky assignments history gives, workflow/import-history.ts), and the
   * contamination rule last, so it judges the exposures against those assignments.
   */
  async importExposures<S>(
    file: { importId: string; contentSha256: string; lines: number },
    exposures: readonly ImportedExposure[],
    seed: (client: PoolClient) => Promise<S>,
  ): Promise<ImportOutcome & { readonly seeded?: S }> {
    return withTransaction(this.pool, async (client) => {
      const claimed = await client.query<{ importedAt: Date }>(
        `INSERT INTO exposure_imports (import_id, content_sha256, lines, exposures, new_exposures) VALUES ($1, $2, $3, $4, 0)
         ON CONFLICT DO NOTHING RETURNING imported_at AS "importedAt"`,
        [file.importId, file.contentSha256, file.lines, exposures.length],
      );
      const importedAt = claimed.rows[0]?.importedAt;
      if (!importedAt) {
        const earlier = await client.query<{ importedAt: Date }>(
          'SELECT imported_at AS "importedAt" FROM exposure_imports WHERE content_sha256 = $1',
          [file.contentSha256],
        );
        return { kind: 'already-imported', importedAt: earlier.rows[0]?.importedAt as Date };
      }
      const touched: Array<{ experimentId: string; candidateKey: string }> = [];
      for (let start = 0; start < exposures.length; start += 5_000) {
        const batch = exposures.slice(start, start + 5_000);
        const inserted = await client.query<{ experimentId: string; candidateKey: string }>(
          `INSERT INTO exposure_events (event_id, experiment_id, candidate_key, variant, recorded_at, source, import_id, origin)
           SELECT id, x, c, v, t, 'import', $7, o FROM unnest($1::uuid[], $2::text[], $3::text[], $4::text[], $5::timestamptz[], $6::text[])
             AS u(id, x, c, v, t, o)
           ON CONFLICT (event_id) DO NOTHING
           RETURNING experiment_id AS "experimentId", candidate_key AS "candidateKey"`,
          [...exposureKeyColumns(batch), batch.map((e) => e.exposedAt), batch.map((e) => e.origin), file.importId],
        );
        touched.push(...inserted.rows);
      }
      await client.query('UPDATE exposure_imports SET new_exposures = $2 WHERE import_id = $1', [
        file.importId,
        touched.length,
      ]);
      const seeded = await seed(client);
      const correlationId = `import:${file.importId}`;
      const events = (await this.detectContaminations(client, touched)).map((row) =>
        contaminationOf(row, correlationId, null),
      );
      await enqueueEvents(
        client,
        events.map((event) => ({ topic: this.assignmentsTopic, event })),
      );
      return { kind: 'imported', importedAt, newExposures: touched.length, contaminations: events, seeded };
    });
  }

  /** Seed 000-3 step 1 per experiment: how many candidates were seen in more than one arm. */
  async contaminationCounts(experimentIds: readonly string[]): Promise<ContaminationCount[]> {
    const { rows } = await this.pool.query<ContaminationCount>(
      `SELECT x.experiment_id AS "experimentId", count(c.candidate_key)::int AS candidates,
              count(c.candidate_key) FILTER (WHERE EXISTS (
                SELECT 1 FROM exposure_events e
                WHERE e.experiment_id = c.experiment_id AND e.candidate_key = c.candidate_key AND e.source = 'import'
              ))::int AS "withImportedHistory"
       FROM unnest($1::text[]) AS x(experiment_id)
       LEFT JOIN contaminations c ON c.experiment_id = x.experiment_id
       GROUP BY x.experiment_id ORDER BY x.experiment_id`,
      [experimentIds],
    );
    return rows;
  }

  /**
   * Counts per variant, contaminated candidates excluded from assignment and exposure metrics, and
   * the assignments per weights period. Assignments seeded from imported history are not drawn by
   * the weights: they stay out of `assigned` and the periods (their candidates count under
   * `importedCandidates`), and in `assignedTotal`. An assignment without a stored period (written before
   * periods were) belongs to the last period in force at its assigned_at. `repliedCandidates`: of a
   * variant's exposed candidates (platform sends, contaminated excluded), those with a reply in the
   * campaign of an exposure, at or after it; a rate over `exposedCandidates`.
   */
  async report(experimentId: string): Promise<{
    variants: Array<{
      variant: string;
      assigned: number;
      exposedCandidates: number;
      exposures: number;
      importedCandidates: number;
      importedExposures: number;
      repliedCandidates: number;
    }>;
    assignedTotal: number;
    periods: Array<{
      period: number;
      effectiveFrom: Date;
      weights: Variant[] | null;
      observed: Record<string, number>;
    }>;
    contamination: ContaminationCount;
    contaminated: Array<{
      candidateKey: string;
      assignedVariant: string | null;
      exposedVariants: string[];
      detectedAt: Date;
    }>;
  }> {
    const clean = `NOT EXISTS (SELECT 1 FROM contaminations c WHERE c.experiment_id = $1 AND c.candidate_key = x.candidate_key)`;
    const [byPeriod, exposed, periods, contaminated, all, [contamination], replied] = await Promise.all([
      this.pool.query<{ period: number; variant: string; n: number }>(
        `SELECT coalesce(x.period,
                         (SELECT max(p.period) FROM weight_periods p WHERE p.experiment_id = $1 AND p.effective_from <= x.assigned_at),
                         (SELECT min(p.period) FROM weight_periods p WHERE p.experiment_id = $1)) AS period,
                x.variant, count(*)::int AS n
         FROM assignments x WHERE x.experiment_id = $1 AND x.import_id IS NULL AND ${clean}
         GROUP BY 1, 2`,
        [experimentId],
      ),
      this.pool.query<{ variant: string; source: 'send' | 'import'; candidates: number; exposures: number }>(
        `SELECT x.variant, x.source, count(DISTINCT x.candidate_key)::int AS candidates, count(*)::int AS exposures
         FROM exposure_events x WHERE x.experiment_id = $1 AND ${clean}
         GROUP BY 1, 2`,
        [experimentId],
      ),
      this.pool.query<{ period: number; effectiveFrom: Date; weights: Variant[] | null }>(
        `SELECT period, effective_from AS "effectiveFrom", weights FROM weight_periods WHERE experiment_id = $1 ORDER BY period`,
        [experimentId],
      ),
      this.pool.query<{
        candidateKey: string;
        assignedVariant: string | null;
        exposedVariants: string[];
        detectedAt: Date;
      }>(
        `SELECT candidate_key AS "candidateKey", assigned_variant AS "assignedVariant", exposed_variants AS "exposedVariants",
                detected_at AS "detectedAt"
         FROM contaminations WHERE experiment_id = $1 ORDER BY detected_at, candidate_key LIMIT ${REPORT_CONTAMINATED_LIMIT}`,
        [experimentId],
      ),
      this.pool.query<{ n: number }>('SELECT count(*)::int AS n FROM assignments WHERE experiment_id = $1', [
        experimentId,
      ]),
      this.contaminationCounts([experimentId]),
      this.pool.query<{ variant: string; candidates: number }>(
        `SELECT x.variant, count(DISTINCT x.candidate_key)::int AS candidates
         FROM exposure_events x WHERE x.experiment_id = $1 AND x.source = 'send' AND ${clean} AND ${REPLIED}
         GROUP BY 1`,
        [experimentId],
      ),
    ]);
    const assignedOf = (variant: string) => sum(byPeriod.rows.filter((r) => r.variant === variant).map((r) => r.n));
    const exposedOf = (variant: string, source: 'send' | 'import') =>
      exposed.rows.find((r) => r.variant === variant && r.source === source);
    const names = new Set([...byPeriod.rows.map((r) => r.variant), ...exposed.rows.map((r) => r.variant)]);
    return {
      variants: [...names].sort().map((variant) => ({
        variant,
        assigned: assignedOf(variant),
        exposedCandidates: exposedOf(variant, 'send')?.candidates ?? 0,
        exposures: exposedOf(variant, 'send')?.exposures ?? 0,
        importedCandidates: exposedOf(variant, 'import')?.candidates ?? 0,
        importedExposures: exposedOf(variant, 'import')?.exposures ?? 0,
        repliedCandidates: replied.rows.find((r) => r.variant === variant)?.candidates ?? 0,
      })),
      assignedTotal: all.rows[0]?.n ?? 0,
      periods: periods.rows.map((p) => ({
        ...p,
        observed: Object.fromEntries(byPeriod.rows.filter((r) => r.period === p.period).map((r) => [r.variant, r.n])),
      })),
      contamination: contamination ?? { experimentId, candidates: 0, withImportedHistory: 0 },
      contaminated: contaminated.rows,
    };
  }

  /**
   * Exposure counts per (experiment, variant): what a replay must reproduce. Only exposures from
   * SendRecorded: imported history is not in the log.
   */
  async exposureCounts(): Promise<
    Array<{ experimentId: string; variant: string; exposures: number; candidates: number }>
  > {
    const { rows } = await this.pool.query<{
      experimentId: string;
      variant: string;
      exposures: number;
      candidates: number;
    }>(
      `SELECT experiment_id AS "experimentId", variant, count(*)::int AS exposures, count(DISTINCT candidate_key)::int AS candidates
       FROM exposure_events WHERE source = 'send' GROUP BY experiment_id, variant ORDER BY 1, 2`,
    );
    return rows;
  }

  /**
   * Replying candidates per (experiment, variant), as the report counts them (contaminated ones too):
   * what a replay of both topics must reproduce.
   */
  async replyCounts(): Promise<Array<{ experimentId: string; variant: string; candidates: number }>> {
    const { rows } = await this.pool.query<{ experimentId: string; variant: string; candidates: number }>(
      `SELECT x.experiment_id AS "experimentId", x.variant, count(DISTINCT x.candidate_key)::int AS candidates
       FROM exposure_events x WHERE x.source = 'send' AND ${REPLIED} GROUP BY 1, 2 ORDER BY 1, 2`,
    );
    return rows;
  }

  /** A transaction that is always rolled back: the dry run's scratch scope. */
  async scratch<T>(work: (client: PoolClient) => Promise<T>): Promise<T> {
    const client = await this.pool.connect();
    try {
      await client.query('BEGIN');
      return await work(client);
    } finally {
      await client.query('ROLLBACK').catch(() => undefined);
      client.release();
    }
  }
}

const sum = (values: readonly number[]) => values.reduce((a, b) => a + b, 0);

function contaminationOf(
  row: ContaminationRow,
  correlationId: string,
  causationId: string | null,
): VariantContaminated {
  return contaminationEvent({ ...row, detectedAt: row.detectedAt.getTime(), correlationId, causationId });
}
