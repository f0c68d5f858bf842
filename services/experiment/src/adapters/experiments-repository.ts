/**
 * The experiment service's SQL. Sticky assignment is `INSERT … ON CONFLICT DO NOTHING` on
 * `PRIMARY KEY (experiment_id, candidate_key)` followed by a read: racing first calls compute the
 * same bucket anyway, and whichever row landed first is the one everybody returns from then on.
 */
import {
  enqueueEvents,
  uuidV5,
  withTransaction,
  type OutgoingEvent,
  type Queryable,
  type VariantAssigned,
  type VariantContaminated,
} from '@outreach/shared';
import type { Pool, PoolClient } from 'pg';
import { bucketOf, variantForBucket, type Variant } from '../domain/assignment.js';

export type ExperimentStatus = 'active' | 'paused' | 'stopped';

export interface Experiment {
  readonly experimentId: string;
  readonly salt: string;
  readonly status: ExperimentStatus;
  readonly exclusionGroup: string | null;
  readonly variants: readonly Variant[];
  readonly createdAt: Date;
  readonly updatedAt: Date;
}

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

export interface Exposure {
  readonly eventId: string;
  readonly experimentId: string;
  readonly candidateKey: string;
  readonly variant: string;
  readonly sendId: string;
  readonly recordedAt: Date;
  readonly correlationId: string;
}

export class ExperimentsRepository {
  constructor(
    private readonly pool: Pool,
    private readonly assignmentsTopic: string,
  ) {}

  async create(experiment: Omit<Experiment, 'createdAt' | 'updatedAt'>): Promise<boolean> {
    return withTransaction(this.pool, async (client) => {
      const inserted = await client.query(
        `INSERT INTO experiments (experiment_id, salt, status, exclusion_group) VALUES ($1, $2, $3, $4)
         ON CONFLICT (experiment_id) DO NOTHING`,
        [experiment.experimentId, experiment.salt, experiment.status, experiment.exclusionGroup],
      );
      if (inserted.rowCount === 0) return false;
      await this.writeVariants(client, experiment.experimentId, experiment.variants);
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

  /** Changes weights (for future assignments only) and/or status. Variants can be added, never removed. */
  async update(
    experimentId: string,
    change: { variants?: readonly Variant[]; status?: ExperimentStatus },
    within?: PoolClient,
  ): Promise<void> {
    const run = async (client: PoolClient) => {
      if (change.status) {
        await client.query('UPDATE experiments SET status = $2, updated_at = now() WHERE experiment_id = $1', [
          experimentId,
          change.status,
        ]);
      }
      if (change.variants) {
        await this.writeVariants(client, experimentId, change.variants);
        await client.query('UPDATE experiments SET updated_at = now() WHERE experiment_id = $1', [experimentId]);
      }
    };
    await (within ? run(within) : withTransaction(this.pool, run));
  }

  async find(experimentId: string, client: Queryable = this.pool): Promise<Experiment | undefined> {
    const { rows } = await client.query<Omit<Experiment, 'variants'>>(
      `SELECT experiment_id AS "experimentId", salt, status, exclusion_group AS "exclusionGroup",
              created_at AS "createdAt", updated_at AS "updatedAt"
       FROM experiments WHERE experiment_id = $1`,
      [experimentId],
    );
    const experiment = rows[0];
    if (!experiment) return undefined;
    const variants = await client.query<Variant>(
      'SELECT name, weight FROM variants WHERE experiment_id = $1 ORDER BY position, name',
      [experimentId],
    );
    return { ...experiment, variants: variants.rows };
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

  /**
   * Returns each candidate's assignment, creating the missing ones (active experiments only) in one
   * transaction with their VariantAssigned events in the outbox. `client` lets the dry run work
   * inside a transaction it rolls back.
   */
  async assign(
    experiment: Experiment,
    candidateKeys: readonly string[],
    correlationId: string,
    client?: PoolClient,
  ): Promise<Assignment[]> {
    const run = (c: PoolClient) => this.assignWith(c, experiment, [...new Set(candidateKeys)], correlationId);
    const byKey = new Map(
      (await (client ? run(client) : withTransaction(this.pool, run))).map((a) => [a.candidateKey, a]),
    );
    return candidateKeys.map((key) => byKey.get(key) as Assignment);
  }

  private async assignWith(
    client: PoolClient,
    experiment: Experiment,
    keys: readonly string[],
    correlationId: string,
  ): Promise<Assignment[]> {
    const { experimentId } = experiment;
    const existing = await this.assignments(experimentId, keys, client);
    const missing = keys.filter((key) => !existing.has(key));
    const results: Assignment[] = [...existing.values()].map((row) => ({
      enrolled: true,
      experimentId,
      ...row,
      created: false,
    }));
    if (missing.length === 0) return results;
    if (experiment.status !== 'active') {
      return [
        ...results,
        ...missing.map((candidateKey) => ({
          enrolled: false as const,
          experimentId,
          candidateKey,
          reason: `experiment is ${experiment.status}`,
        })),
      ];
    }

    let eligible = missing;
    if (experiment.exclusionGroup) {
      await client.query(
        `INSERT INTO group_memberships (exclusion_group, candidate_key, experiment_id)
         SELECT $1, unnest($2::text[]), $3 ON CONFLICT (exclusion_group, candidate_key) DO NOTHING`,
        [experiment.exclusionGroup, missing, experimentId],
      );
      const members = await client.query<{ candidateKey: string; experimentId: string }>(
        `SELECT candidate_key AS "candidateKey", experiment_id AS "experimentId" FROM group_memberships
         WHERE exclusion_group = $1 AND candidate_key = ANY($2::text[])`,
        [experiment.exclusionGroup, missing],
      );
      const elsewhere = new Map(
        members.rows.filter((m) => m.experimentId !== experimentId).map((m) => [m.candidateKey, m.experimentId]),
      );
      eligible = missing.filter((key) => !elsewhere.has(key));
      for (const [candidateKey, other] of elsewhere) {
        results.push({
          enrolled: false,
          experimentId,
          candidateKey,
          reason: `not enrolled: candidate is in experiment ${other} of exclusion group ${experiment.exclusionGroup}`,
        });
      }
    }

    const buckets = eligible.map((key) => bucketOf(experiment.salt, key));
    const inserted = await client.query<{ candidateKey: string; variant: string; assignedAt: Date }>(
      `INSERT INTO assignments (experiment_id, candidate_key, variant, bucket)
       SELECT $1, * FROM unnest($2::text[], $3::text[], $4::float8[])
       ON CONFLICT (experiment_id, candidate_key) DO NOTHING
       RETURNING candidate_key AS "candidateKey", variant, assigned_at AS "assignedAt"`,
      [experimentId, eligible, buckets.map((b) => variantForBucket(experiment.variants, b)), buckets],
    );
    const created = new Set(inserted.rows.map((r) => r.candidateKey));
    // Rows a racing transaction inserted first: read them back, they are the truth.
    const raced = await this.assignments(
      experimentId,
      eligible.filter((key) => !created.has(key)),
      client,
    );
    for (const row of inserted.rows) results.push({ enrolled: true, experimentId, ...row, created: true });
    for (const row of raced.values()) results.push({ enrolled: true, experimentId, ...row, created: false });

    const events: OutgoingEvent[] = inserted.rows.map((row) => {
      const event: VariantAssigned = {
        type: 'VariantAssigned',
        eventId: uuidV5('variant-assigned', experimentId, row.candidateKey),
        occurredAt: row.assignedAt.getTime(),
        producer: 'experiment',
        correlationId,
        causationId: null,
        experimentId,
        candidateKey: row.candidateKey,
        variant: row.variant,
        assignedAt: row.assignedAt.getTime(),
      };
      return { topic: this.assignmentsTopic, event };
    });
    await enqueueEvents(client, events);
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
        `INSERT INTO exposure_events (event_id, experiment_id, candidate_key, variant, send_id, recorded_at)
         SELECT * FROM unnest($1::uuid[], $2::text[], $3::text[], $4::text[], $5::uuid[], $6::timestamptz[])
         ON CONFLICT (event_id) DO NOTHING
         RETURNING experiment_id AS "experimentId", candidate_key AS "candidateKey"`,
        [
          exposures.map((e) => e.eventId),
          exposures.map((e) => e.experimentId),
          exposures.map((e) => e.candidateKey),
          exposures.map((e) => e.variant),
          exposures.map((e) => e.sendId),
          exposures.map((e) => e.recordedAt),
        ],
      );
      if (inserted.rows.length === 0) return [];
      // A candidate is contaminated when the variants it was assigned and exposed to are not one.
      const { rows } = await client.query<{
        experimentId: string;
        candidateKey: string;
        assigned: string | null;
        exposed: string[];
      }>(
        `WITH touched AS (SELECT DISTINCT * FROM unnest($1::text[], $2::text[]) AS t(experiment_id, candidate_key))
         SELECT t.experiment_id AS "experimentId", t.candidate_key AS "candidateKey", a.variant AS assigned,
                array_agg(DISTINCT e.variant ORDER BY e.variant) AS exposed
         FROM touched t
         JOIN exposure_events e USING (experiment_id, candidate_key)
         LEFT JOIN assignments a USING (experiment_id, candidate_key)
         GROUP BY t.experiment_id, t.candidate_key, a.variant`,
        [inserted.rows.map((r) => r.experimentId), inserted.rows.map((r) => r.candidateKey)],
      );
      const contaminated = rows.filter((r) => new Set([...r.exposed, ...(r.assigned ? [r.assigned] : [])]).size > 1);
      const events: VariantContaminated[] = [];
      for (const row of contaminated) {
        const changed = await client.query<{ detectedAt: Date }>(
          `INSERT INTO contaminations (experiment_id, candidate_key, assigned_variant, exposed_variants) VALUES ($1, $2, $3, $4)
           ON CONFLICT (experiment_id, candidate_key) DO UPDATE SET exposed_variants = excluded.exposed_variants, detected_at = now()
             WHERE contaminations.exposed_variants IS DISTINCT FROM excluded.exposed_variants
           RETURNING detected_at AS "detectedAt"`,
          [row.experimentId, row.candidateKey, row.assigned, row.exposed],
        );
        const detectedAt = changed.rows[0]?.detectedAt;
        if (!detectedAt) continue;
        const cause = exposures.find((e) => e.experimentId === row.experimentId && e.candidateKey === row.candidateKey);
        events.push({
          type: 'VariantContaminated',
          eventId: uuidV5('variant-contaminated', row.experimentId, row.candidateKey, ...row.exposed),
          occurredAt: detectedAt.getTime(),
          producer: 'experiment',
          correlationId: cause?.correlationId ?? row.candidateKey,
          causationId: cause?.eventId ?? null,
          experimentId: row.experimentId,
          candidateKey: row.candidateKey,
          assignedVariant: row.assigned ?? row.exposed[0] ?? '',
          exposedVariants: row.exposed,
          detectedAt: detectedAt.getTime(),
        });
      }
      await enqueueEvents(
        client,
        events.map((event) => ({ topic: this.assignmentsTopic, event })),
      );
      return events;
    });
  }

  /** Counts per variant, contaminated candidates excluded from assignment and exposure metrics. */
  async report(experimentId: string): Promise<{
    variants: Array<{ variant: string; assigned: number; exposedCandidates: number; exposures: number }>;
    assignedTotal: number;
    contaminated: Array<{
      candidateKey: string;
      assignedVariant: string | null;
      exposedVariants: string[];
      detectedAt: Date;
    }>;
  }> {
    const [assigned, exposed, contaminated, all] = await Promise.all([
      this.pool.query<{ variant: string; n: number }>(
        `SELECT a.variant, count(*)::int AS n FROM assignments a
         WHERE a.experiment_id = $1
           AND NOT EXISTS (SELECT 1 FROM contaminations c WHERE c.experiment_id = a.experiment_id AND c.candidate_key = a.candidate_key)
         GROUP BY a.variant`,
        [experimentId],
      ),
      this.pool.query<{ variant: string; candidates: number; exposures: number }>(
        `SELECT e.variant, count(DISTINCT e.candidate_key)::int AS candidates, count(*)::int AS exposures FROM exposure_events e
         WHERE e.experiment_id = $1
           AND NOT EXISTS (SELECT 1 FROM contaminations c WHERE c.experiment_id = e.experiment_id AND c.candidate_key = e.candidate_key)
         GROUP BY e.variant`,
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
         FROM contaminations WHERE experiment_id = $1 ORDER BY detected_at, candidate_key`,
        [experimentId],
      ),
      this.pool.query<{ n: number }>('SELECT count(*)::int AS n FROM assignments WHERE experiment_id = $1', [
        experimentId,
      ]),
    ]);
    const names = new Set([...assigned.rows.map((r) => r.variant), ...exposed.rows.map((r) => r.variant)]);
    return {
      variants: [...names].sort().map((variant) => ({
        variant,
        assigned: assigned.rows.find((r) => r.variant === variant)?.n ?? 0,
        exposedCandidates: exposed.rows.find((r) => r.variant === variant)?.candidates ?? 0,
        exposures: exposed.rows.find((r) => r.variant === variant)?.exposures ?? 0,
      })),
      assignedTotal: all.rows[0]?.n ?? 0,
      contaminated: contaminated.rows,
    };
  }

  /** Exposure counts per (experiment, variant): what a replay must reproduce. */
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
       FROM exposure_events GROUP BY experiment_id, variant ORDER BY 1, 2`,
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
