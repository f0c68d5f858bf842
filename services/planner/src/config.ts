import { EmailHashKeyConfigSchema, SuppressionKeyConfigSchema, type BaseConfig } from '@outreach/shared';
import { Type, type Static } from '@sinclair/typebox';

/** The planner's own settings, on top of BaseConfigSchema (KAFKA_BROKERS, DATABASE_URL, HTTP_PORT, ...). */
export const ConfigSchema = Type.Object({
  /** The emailHash HMAC key and its id, the sender's: it keys candidates whose id is an address. */
  ...EmailHashKeyConfigSchema.properties,
  DATABASE_SCHEMA: Type.String({ default: 'planner', pattern: '^[a-z_][a-z0-9_]*$' }),
  CONSUMER_GROUP: Type.String({ default: 'planner' }),
  EXPERIMENT_URL: Type.String({ default: 'http://127.0.0.1:8083', pattern: '^https?://' }),
  /**
   * Bearer token the experiment service lists under its publish and read scopes (API_TOKENS_PUBLISH,
   * _READ): a file holding it (a mounted Secret, read again every SECRET_FILE_REFRESH_MS, so a
   * rotation needs no restart) or, for development, the token itself; never both.
   */
  EXPERIMENT_TOKEN_FILE: Type.String({ default: '' }),
  EXPERIMENT_TOKEN: Type.String({ default: '' }),
  EXPERIMENT_TIMEOUT_MS: Type.Integer({ minimum: 100, default: 5_000 }),
  SCHEDULER_INTERVAL_MS: Type.Integer({ minimum: 50, default: 500 }),
  REQUEST_BATCH_SIZE: Type.Integer({ minimum: 1, maximum: 1_000, default: 200 }),
  /**
   * How long GET /v1/outreach-requests/:requestId can answer for a request: its record is purged once
   * it and every outcome of its plan are this many days old (then the route answers 404).
   */
  REQUEST_STATUS_RETENTION_DAYS: Type.Integer({ minimum: 1, maximum: 3_650, default: 30 }),
  /**
   * Data-subject requests (ADR 014): the suppression key the subject, the audit and the erased keys
   * are hashed under (the sender's own); without it /v1/subjects answers 503 naming it.
   */
  ...SuppressionKeyConfigSchema.properties,
  /** The sender and the liveness service, asked for their parts of an export or erasure. */
  SENDER_URL: Type.String({ default: 'http://127.0.0.1:8082', pattern: '^https?://' }),
  LIVENESS_URL: Type.String({ default: 'http://127.0.0.1:8084', pattern: '^https?://' }),
  /**
   * Bearer tokens the sender and the liveness service list under their read and erase scopes (the
   * experiment service's is EXPERIMENT_TOKEN, which then also needs those two scopes there): a file
   * (read again every SECRET_FILE_REFRESH_MS) or, for development, the token; never both.
   */
  SENDER_TOKEN_FILE: Type.String({ default: '' }),
  SENDER_TOKEN: Type.String({ default: '' }),
  LIVENESS_TOKEN_FILE: Type.String({ default: '' }),
  LIVENESS_TOKEN: Type.String({ default: '' }),
  /** How long one service may take over its part of one subject request. */
  SUBJECT_TIMEOUT_MS: Type.Integer({ minimum: 100, default: 10_000 }),
  /**
   * Subject requests served at once; more wait, up to SUBJECT_QUEUE_MAX, then 429. Exports and
   * erasures each have these slots, apart; one caller (token) holds at most SUBJECT_QUEUE_PER_CALLER
   * of a kind's, running and waiting.
   */
  SUBJECT_CONCURRENCY: Type.Integer({ minimum: 1, maximum: 64, default: 4 }),
  SUBJECT_QUEUE_MAX: Type.Integer({ minimum: 0, maximum: 100_000, default: 500 }),
  SUBJECT_QUEUE_PER_CALLER: Type.Integer({ minimum: 1, maximum: 100_000, default: 50 }),
  /**
   * What an erasure's report says a request made before it may still be on its way for (`inFlight`):
   * the requests topic's lag and the consumer's retries (CONSUMER_RETRY_MAX_MS) at most. Repeat an
   * erasure after it to catch a request whose planning overlapped the first.
   */
  SUBJECT_IN_FLIGHT_WINDOW_MS: Type.Integer({ minimum: 0, default: 600_000 }),
  /** How often the planner purges request statuses past their retention. */
  REQUEST_STATUS_PURGE_INTERVAL_MS: Type.Integer({ minimum: 100, default: 3_600_000 }),
});

export type Config = BaseConfig & Static<typeof ConfigSchema>;
