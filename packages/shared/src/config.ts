import { Type, type Static, type TObject, type TProperties } from '@sinclair/typebox';
import { envSchema } from 'env-schema';

/** The consumer retry cap when nothing configures it (ConsumerRunner falls back to it too). */
export const CONSUMER_RETRY_DEFAULTS = { maxAttempts: 100, maxElapsedMs: 15 * 60_000 } as const;

/** Settings every service reads. Services extend this with their own. */
export const BaseConfigSchema = Type.Object({
  NODE_ENV: Type.String({ default: 'production' }),
  LOG_LEVEL: Type.Union(
    ['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'].map((l) => Type.Literal(l)),
    { default: 'info' },
  ),
  HTTP_HOST: Type.String({ default: '0.0.0.0' }),
  HTTP_PORT: Type.Integer({ minimum: 0, maximum: 65535, default: 8080 }),
  /** Comma-separated host:port list. */
  KAFKA_BROKERS: Type.String({ pattern: '^[^,\\s:]+:\\d+(,[^,\\s:]+:\\d+)*$' }),
  DATABASE_URL: Type.String({ pattern: '^postgres(ql)?://' }),
  /** Prefix for every topic name (parallel environments, tests); empty in production. */
  TOPIC_PREFIX: Type.String({ default: '', pattern: '^[a-zA-Z0-9._-]*$' }),
  /**
   * Bearer tokens per scope (service/auth.ts), comma-separated, several at once during a rotation;
   * each `_FILE` names a file with one token per line (a mounted Secret), added to the inline ones.
   * A scope without tokens answers 401 on every route that needs it.
   */
  API_TOKENS_PUBLISH: Type.String({ default: '' }),
  API_TOKENS_PUBLISH_FILE: Type.String({ default: '' }),
  API_TOKENS_OPERATE: Type.String({ default: '' }),
  API_TOKENS_OPERATE_FILE: Type.String({ default: '' }),
  API_TOKENS_READ: Type.String({ default: '' }),
  API_TOKENS_READ_FILE: Type.String({ default: '' }),
  /** Requests per RATE_LIMIT_WINDOW_MS per token (per client address without a valid token), per replica. */
  RATE_LIMIT_MAX: Type.Integer({ minimum: 1, maximum: 100_000_000, default: 6_000 }),
  RATE_LIMIT_WINDOW_MS: Type.Integer({ minimum: 1_000, maximum: 3_600_000, default: 60_000 }),
  /** Apply pending migrations when the service starts (the `migrate` command always does). */
  MIGRATE_ON_START: Type.Boolean({ default: true }),
  /**
   * Partitions a consumer works on at once (kafkajs partitionsConsumedConcurrently). Each partition's
   * events stay in order; more at once cuts the latency that per-partition transactions add up to.
   */
  CONSUMER_PARTITION_CONCURRENCY: Type.Integer({ minimum: 1, maximum: 64, default: 4 }),
  /**
   * The cap on retrying a transient failure (database, broker or peer unavailable) before the events
   * go to the DLQ as TRANSIENT_EXHAUSTED (replayable): attempts, and milliseconds since the first.
   */
  CONSUMER_RETRY_MAX_ATTEMPTS: Type.Integer({ minimum: 1, default: CONSUMER_RETRY_DEFAULTS.maxAttempts }),
  CONSUMER_RETRY_MAX_MS: Type.Integer({ minimum: 1_000, default: CONSUMER_RETRY_DEFAULTS.maxElapsedMs }),
  /** Milliseconds a shutdown may take before the process exits anyway (keep below the pod's grace period). */
  SHUTDOWN_TIMEOUT_MS: Type.Integer({ minimum: 100, default: 25_000 }),
});
export type BaseConfig = Static<typeof BaseConfigSchema>;

export class ConfigError extends Error {
  override readonly name = 'ConfigError';
}

/**
 * Validates the environment once, at start. A missing or malformed variable throws a
 * ConfigError whose message names the variable, so the process stops before doing anything.
 */
export function loadConfig<P extends TProperties>(
  extra: TObject<P>,
  env: NodeJS.ProcessEnv = process.env,
): BaseConfig & Static<TObject<P>> {
  const schema = Type.Composite([BaseConfigSchema, extra]);
  // The one shared list was replaced by scoped ones; starting with it set would silently lock
  // every caller out (or, worse, look configured), so it stops the start instead.
  if (env.API_TOKENS !== undefined && env.API_TOKENS.trim() !== '') {
    throw new ConfigError(
      'invalid configuration: API_TOKENS was replaced by API_TOKENS_PUBLISH, API_TOKENS_OPERATE and API_TOKENS_READ (see docs/operations.md, "API scopes and token rotation")',
    );
  }
  try {
    return envSchema<BaseConfig & Static<TObject<P>>>({ schema, data: { ...env }, dotenv: false });
  } catch (error) {
    const message = error instanceof Error ? error.message : String(error);
    throw new ConfigError(`invalid configuration: ${message.replace(/\benv\b/g, 'environment')}`);
  }
}

export function brokerList(brokers: string): string[] {
  return brokers
    .split(',')
    .map((b) => b.trim())
    .filter((b) => b.length > 0);
}
