import { SuppressionKeyConfigSchema, type BaseConfig } from '@outreach/shared';
import { Type, type Static } from '@sinclair/typebox';

const MINUTE = 60_000;

/** The liveness projector's settings, on top of BaseConfigSchema. */
export const ConfigSchema = Type.Object({
  DATABASE_SCHEMA: Type.String({ default: 'liveness', pattern: '^[a-z_][a-z0-9_]*$' }),
  CONSUMER_GROUP: Type.String({ default: 'liveness' }),
  /** Default grace after an inbound message before "no next step" is flagged. */
  GRACE_INBOUND_MS: Type.Integer({ minimum: 1, default: 15 * MINUTE }),
  /** Default grace after an outbound step (start, send, completed step). */
  GRACE_OUTBOUND_MS: Type.Integer({ minimum: 1, default: 72 * 60 * MINUTE }),
  /** Default grace after a scheduled step's due time before it is "overdue". */
  GRACE_OVERDUE_MS: Type.Integer({ minimum: 0, default: 60 * MINUTE }),
  /**
   * Default reply window: how long a conversation whose planned sequence was sent in full awaits
   * the candidate's reply before the sweep closes it (`sequence_completed`).
   */
  REPLY_WINDOW_MS: Type.Integer({ minimum: 1, default: 7 * 24 * 60 * MINUTE }),
  SWEEP_INTERVAL_MS: Type.Integer({ minimum: 100, default: 1_000 }),
  /**
   * Retention (ADR 014): a closed conversation, its events and its planned steps are purged once it
   * closed and last changed this many days ago (then GET /v1/conversations/:id answers 404).
   */
  CONVERSATION_RETENTION_DAYS: Type.Integer({ minimum: 1, maximum: 3_650, default: 90 }),
  /** How often the liveness service purges closed conversations past their retention. */
  CONVERSATION_PURGE_INTERVAL_MS: Type.Integer({ minimum: 100, default: 3_600_000 }),
  /**
   * The suppression key (ADR 014): the projector and the rebuild skip events of a person erased here
   * (`subject_erasures` holds their candidate key's hash under it). The planner's and the sender's.
   */
  ...SuppressionKeyConfigSchema.properties,
});

export type Config = BaseConfig & Static<typeof ConfigSchema>;
