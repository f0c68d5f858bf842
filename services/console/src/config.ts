import { BaseConfigSchema, ConfigError, KafkaSecurityConfigSchema } from '@outreach/shared';
import { Type, type Static } from '@sinclair/typebox';
import { envSchema } from 'env-schema';

const URL = { pattern: '^https?://[^/?#@\\s]+(/\\S*)?$' };

/**
 * The console's settings (docs/operations.md, "The operations console"). It needs PostgreSQL (its
 * audit table) and the four services' URLs, and Kafka only for its dead-letter pages: of the base
 * settings it takes the HTTP, PostgreSQL and secret-refresh ones.
 */
export const ConfigSchema = Type.Composite([
  Type.Pick(BaseConfigSchema, [
    'NODE_ENV',
    'LOG_LEVEL',
    'HTTP_HOST',
    'HTTP_PORT',
    'DATABASE_URL',
    'DATABASE_SSL_MODE',
    'DATABASE_SSL_CA_FILE',
    'DATABASE_SSL_CERT_FILE',
    'DATABASE_SSL_KEY_FILE',
    'DATABASE_PASSWORD_FILE',
    'DATABASE_SESSION_URL',
    'DATABASE_RUNTIME_ROLE',
    'MIGRATE_ON_START',
    'SECRET_FILE_REFRESH_MS',
    'RATE_LIMIT_MAX',
    'RATE_LIMIT_WINDOW_MS',
    'HTTP_REQUEST_TIMEOUT_MS',
    'HTTP_CONNECTION_TIMEOUT_MS',
    'READINESS_REFRESH_MS',
    'SHUTDOWN_TIMEOUT_MS',
  ]),
  Type.Object({
    /** The console's own schema: its audit table. */
    DATABASE_SCHEMA: Type.String({ default: 'console', pattern: '^[a-z_][a-z0-9_]*$' }),
    /** The four services' base URLs, as the console reaches them (inside the cluster). */
    PLANNER_URL: Type.String(URL),
    SENDER_URL: Type.String(URL),
    EXPERIMENT_URL: Type.String(URL),
    LIVENESS_URL: Type.String(URL),
    /**
     * The console's tokens for the services' APIs: a `read` one for every page, an `operate` one for
     * the actions alone (CONSOLE_READ_TOKEN_FILE, CONSOLE_OPERATE_TOKEN_FILE: mounted Secrets, read
     * again every SECRET_FILE_REFRESH_MS). The browser never sees them.
     */
    CONSOLE_READ_TOKEN: Type.String({ default: '' }),
    CONSOLE_READ_TOKEN_FILE: Type.String({ default: '' }),
    CONSOLE_OPERATE_TOKEN: Type.String({ default: '' }),
    CONSOLE_OPERATE_TOKEN_FILE: Type.String({ default: '' }),
    /** Deadline of one call to a service. */
    UPSTREAM_TIMEOUT_MS: Type.Integer({ minimum: 100, maximum: 60_000, default: 5_000 }),
    /** The key that signs session cookies: at least 32 bytes (CONSOLE_SESSION_KEY_FILE in production). */
    CONSOLE_SESSION_KEY: Type.String({ default: '' }),
    CONSOLE_SESSION_KEY_FILE: Type.String({ default: '' }),
    /** How long a sign-in lasts. */
    CONSOLE_SESSION_TTL_MS: Type.Integer({ minimum: 60_000, maximum: 7 * 86_400_000, default: 8 * 3_600_000 }),
    /** Cookies only over HTTPS (and named `__Host-…`). Off only for a local demo over plain HTTP. */
    CONSOLE_COOKIE_SECURE: Type.Boolean({ default: true }),
    /** Local operators: `name reader|operator scrypt$…` per line (console-hash-password). Empty: none. */
    CONSOLE_USERS_FILE: Type.String({ default: '' }),
    /**
     * The OIDC proxy's addresses (comma-separated addresses or CIDRs). Empty: proxy headers are never
     * believed. A request from one of them must also carry CONSOLE_PROXY_SECRET in its header.
     */
    CONSOLE_PROXY_CIDRS: Type.String({ default: '' }),
    CONSOLE_PROXY_SECRET: Type.String({ default: '' }),
    CONSOLE_PROXY_SECRET_FILE: Type.String({ default: '' }),
    CONSOLE_PROXY_SECRET_HEADER: Type.String({ default: 'x-console-proxy-secret', pattern: '^[a-z0-9-]+$' }),
    CONSOLE_PROXY_EMAIL_HEADER: Type.String({ default: 'x-forwarded-email', pattern: '^[a-z0-9-]+$' }),
    CONSOLE_PROXY_GROUPS_HEADER: Type.String({ default: 'x-forwarded-groups', pattern: '^[a-z0-9-]+$' }),
    /** Groups (comma-separated) whose members operate; members of the reader groups only read. */
    CONSOLE_OPERATOR_GROUPS: Type.String({ default: 'outreach-operators' }),
    CONSOLE_READER_GROUPS: Type.String({ default: 'outreach-readers' }),
    /** Rows per page of the lists (ambiguous sends, audit). */
    CONSOLE_PAGE_SIZE: Type.Integer({ minimum: 1, maximum: 500, default: 50 }),
    /**
     * The overview's chart of sends per second and outcomes: the console reads the sender's outcome
     * counters from its /metrics every CONSOLE_OUTCOME_SAMPLE_MS and keeps CONSOLE_OUTCOME_WINDOW_MS
     * of them in memory (a ring buffer that restarts empty; Prometheus keeps the history).
     */
    CONSOLE_OUTCOME_SAMPLE_MS: Type.Integer({ minimum: 1_000, maximum: 300_000, default: 15_000 }),
    CONSOLE_OUTCOME_WINDOW_MS: Type.Integer({ minimum: 60_000, maximum: 6 * 3_600_000, default: 3_600_000 }),
    /**
     * The dead-letter pages (/dlq): the brokers the console reads the DLQs from with its own principal
     * (`console`, packages/shared/src/kafka/acls.ts), with the KAFKA_SSL*, KAFKA_SASL*, KAFKA_OAUTH*
     * settings below. Empty: the pages say dead letters are not configured (the Kubernetes base's default).
     */
    KAFKA_BROKERS: Type.String({ default: '' }),
    TOPIC_PREFIX: Type.String({ default: '', pattern: '^[a-zA-Z0-9._-]*$' }),
    /** The registry whose schemas decode Confluent-framed dead letters; empty: single-object and JSON only. */
    SCHEMA_REGISTRY_URL: Type.String({ default: '' }),
    /**
     * How long a DLQ read may take; a replay gets six times this, but never more than four fifths of
     * HTTP_REQUEST_TIMEOUT_MS (its page must answer before the request is cut off).
     */
    DLQ_READ_TIMEOUT_MS: Type.Integer({ minimum: 500, maximum: 60_000, default: 10_000 }),
  }),
  KafkaSecurityConfigSchema,
]);

export type Config = Static<typeof ConfigSchema>;

/**
 * What `server.js migrate` reads (the image's `migrate console`, the migrate Job's container): the
 * PostgreSQL settings and the schema, none of the services' URLs or the sign-in.
 */
export const MigrateConfigSchema = Type.Composite([
  Type.Pick(BaseConfigSchema, [
    'NODE_ENV',
    'LOG_LEVEL',
    'DATABASE_URL',
    'DATABASE_SSL_MODE',
    'DATABASE_SSL_CA_FILE',
    'DATABASE_SSL_CERT_FILE',
    'DATABASE_SSL_KEY_FILE',
    'DATABASE_PASSWORD_FILE',
    'DATABASE_SESSION_URL',
    'DATABASE_RUNTIME_ROLE',
  ]),
  Type.Pick(ConfigSchema, ['DATABASE_SCHEMA']),
]);
export type MigrateConfig = Static<typeof MigrateConfigSchema>;

/** Validates the environment; a missing or malformed variable is a ConfigError naming it. */
export function loadConfig(env: NodeJS.ProcessEnv = process.env): Config {
  return load<Config>(ConfigSchema, env);
}

/** The settings of `server.js migrate` alone. */
export function loadMigrateConfig(env: NodeJS.ProcessEnv = process.env): MigrateConfig {
  return load<MigrateConfig>(MigrateConfigSchema, env);
}

function load<T>(schema: typeof ConfigSchema | typeof MigrateConfigSchema, env: NodeJS.ProcessEnv): T {
  try {
    const data = { ...env };
    if (data.NODE_ENV !== undefined) data.NODE_ENV = data.NODE_ENV.trim().toLowerCase() || undefined;
    return envSchema<T & Record<string, unknown>>({ schema, data, dotenv: false, env: false });
  } catch (error) {
    const message = error instanceof Error ? error.message : String(error);
    throw new ConfigError(`invalid configuration: ${message.replace(/\benv\b/g, 'environment')}`);
  }
}
