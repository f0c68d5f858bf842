import { Type, type Static, type TObject, type TProperties } from '@sinclair/typebox';
import { envSchema } from 'env-schema';

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
  /** Comma-separated bearer tokens accepted on mutating /v1 routes. None = those routes answer 401. */
  API_TOKENS: Type.String({ default: '' }),
  /** Apply pending migrations when the service starts (the `migrate` command always does). */
  MIGRATE_ON_START: Type.Boolean({ default: true }),
  /**
   * Partitions a consumer works on at once (kafkajs partitionsConsumedConcurrently). Each partition's
   * events stay in order; more at once cuts the latency that per-partition transactions add up to.
   */
  CONSUMER_PARTITION_CONCURRENCY: Type.Integer({ minimum: 1, maximum: 64, default: 4 }),
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
  try {
    return envSchema<BaseConfig & Static<TObject<P>>>({ schema, data: { ...env }, dotenv: false });
  } catch (error) {
    const message = error instanceof Error ? error.message : String(error);
    throw new ConfigError(`invalid configuration: ${message.replace(/\benv\b/g, 'environment')}`);
  }
}

export function tokenList(tokens: string): string[] {
  return tokens
    .split(',')
    .map((t) => t.trim())
    .filter((t) => t.length > 0);
}

export function brokerList(brokers: string): string[] {
  return brokers
    .split(',')
    .map((b) => b.trim())
    .filter((b) => b.length > 0);
}
