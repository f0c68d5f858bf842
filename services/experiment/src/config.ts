import { SuppressionKeyConfigSchema, type BaseConfig } from '@outreach/shared';
import { Type, type Static } from '@sinclair/typebox';

/** The experiment service's settings, on top of BaseConfigSchema. */
export const ConfigSchema = Type.Object({
  DATABASE_SCHEMA: Type.String({ default: 'experiment', pattern: '^[a-z_][a-z0-9_]*$' }),
  CONSUMER_GROUP: Type.String({ default: 'experiment' }),
  /** Largest batch the planner may assign in one request (the route's schema caps it at 10 000). */
  MAX_BATCH_ASSIGNMENTS: Type.Integer({ minimum: 1, maximum: 10_000, default: 1_000 }),
  /** Largest dry run (the route's schema caps it at 1 000 000). */
  MAX_DRY_RUN: Type.Integer({ minimum: 1, maximum: 1_000_000, default: 100_000 }),
  /**
   * The suppression key (ADR 014): the exposure projection files an erased person's exposures under
   * the pseudonym the erasure left (`subject_erasures` holds their candidate key's hash under it).
   */
  ...SuppressionKeyConfigSchema.properties,
});

export type Config = BaseConfig & Static<typeof ConfigSchema>;
