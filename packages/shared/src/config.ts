import { Type, type Static, type TObject, type TProperties } from '@sinclair/typebox';
import { envSchema } from 'env-schema';

/** The consumer retry cap when nothing configures it (ConsumerRunner falls back to it too). */
export const CONSUMER_RETRY_DEFAULTS = { maxAttempts: 100, maxElapsedMs: 15 * 60_000 } as const;

/**
 * How long a running consumer retries credentials the brokers refuse (KAFKA_AUTH_RETRY_WINDOW_MS):
 * longer than the kubelet takes to refresh a mounted Secret (about a minute, up to two).
 */
export const KAFKA_AUTH_RETRY_WINDOW_DEFAULT_MS = 5 * 60_000;

const literals = <T extends string>(values: readonly T[]) => values.map((v) => Type.Literal(v));

/**
 * How every service and CLI reaches Kafka on a secured cluster (docs/operations.md, "Secured Kafka and
 * PostgreSQL"; ADR 010). Secrets come from `*_FILE` (a mounted Secret) or, for development, the
 * variable itself; never both (security/secrets.ts). kafka/security.ts checks the combinations.
 */
export const KafkaSecurityConfigSchema = Type.Object({
  /** TLS to the brokers. Without a CA file the system trust store verifies them (public CAs). */
  KAFKA_SSL: Type.Boolean({ default: false }),
  /** PEM file with the CA(s) that sign the brokers' certificates. */
  KAFKA_SSL_CA_FILE: Type.String({ default: '' }),
  /** PEM client certificate and key for mutual TLS (the principal is the certificate's subject). */
  KAFKA_SSL_CERT_FILE: Type.String({ default: '' }),
  KAFKA_SSL_KEY_FILE: Type.String({ default: '' }),
  /** Passphrase of an encrypted client key. */
  KAFKA_SSL_KEY_PASSWORD: Type.String({ default: '' }),
  KAFKA_SSL_KEY_PASSWORD_FILE: Type.String({ default: '' }),
  /** Empty: no SASL. PLAIN and OAUTHBEARER need KAFKA_SSL (they carry the secret itself). */
  KAFKA_SASL_MECHANISM: Type.Union(literals(['', 'plain', 'scram-sha-256', 'scram-sha-512', 'oauthbearer']), {
    default: '',
  }),
  KAFKA_SASL_USERNAME: Type.String({ default: '' }),
  KAFKA_SASL_USERNAME_FILE: Type.String({ default: '' }),
  KAFKA_SASL_PASSWORD: Type.String({ default: '' }),
  KAFKA_SASL_PASSWORD_FILE: Type.String({ default: '' }),
  /**
   * Where OAUTHBEARER tokens come from: `oidc` (client credentials at KAFKA_OAUTH_TOKEN_ENDPOINT),
   * `aws-msk-iam` (AWS's MSK IAM signer, default AWS credential chain), `token-file` (a token a
   * sidecar or projected volume keeps fresh), `unsecured` (an unsigned JWS for test brokers).
   */
  KAFKA_OAUTH_PROVIDER: Type.Union(literals(['', 'oidc', 'aws-msk-iam', 'token-file', 'unsecured']), {
    default: '',
  }),
  KAFKA_OAUTH_TOKEN_ENDPOINT: Type.String({ default: '', pattern: '^(https?://.+)?$' }),
  KAFKA_OAUTH_CLIENT_ID: Type.String({ default: '' }),
  KAFKA_OAUTH_CLIENT_ID_FILE: Type.String({ default: '' }),
  KAFKA_OAUTH_CLIENT_SECRET: Type.String({ default: '' }),
  KAFKA_OAUTH_CLIENT_SECRET_FILE: Type.String({ default: '' }),
  KAFKA_OAUTH_SCOPE: Type.String({ default: '' }),
  KAFKA_OAUTH_AUDIENCE: Type.String({ default: '' }),
  /** SASL extensions sent with the token, `key=value,key=value` (Confluent Cloud: logicalCluster, identityPoolId). */
  KAFKA_OAUTH_EXTENSIONS: Type.String({ default: '', pattern: '^([A-Za-z]+=[^,=]+(,[A-Za-z]+=[^,=]+)*)?$' }),
  KAFKA_OAUTH_TOKEN_FILE: Type.String({ default: '' }),
  /** The `sub` of an unsecured token (KAFKA_OAUTH_PROVIDER=unsecured; test brokers only). */
  KAFKA_OAUTH_SUBJECT: Type.String({ default: '' }),
  /** The AWS region of an MSK cluster (aws-msk-iam); empty: AWS_REGION. */
  KAFKA_AWS_REGION: Type.String({ default: '' }),
  /**
   * How long the start-up check waits for an unreachable broker before the process exits (69). A wrong
   * password, an untrusted certificate or a missing ACL stops the start at once (78), naming the cause.
   */
  KAFKA_STARTUP_TIMEOUT_MS: Type.Integer({ minimum: 1_000, default: 60_000 }),
  /**
   * Whether the start-up check also asks the brokers what our principal may do (Metadata's authorized
   * operations, KIP-430). Off only for a broker that answers that wrongly; credentials and
   * certificates are checked either way.
   */
  KAFKA_STARTUP_ACL_CHECK: Type.Boolean({ default: true }),
  /**
   * How long a running consumer whose credentials the brokers refuse on reconnecting (a rotation half
   * done: the broker has the new password, the mounted Secret not yet) keeps restarting itself, the
   * credential files read again each time, before `/health/live` fails. 0: it fails at the first
   * refusal. At start a refusal still stops the process (78).
   */
  KAFKA_AUTH_RETRY_WINDOW_MS: Type.Integer({ minimum: 0, default: KAFKA_AUTH_RETRY_WINDOW_DEFAULT_MS }),
});

/**
 * TLS and credentials for PostgreSQL beyond DATABASE_URL (pg/connection.ts). The TLS modes keep
 * libpq's meanings, whichever node-postgres gives them (ADR 010); `sslmode`, `sslrootcert`,
 * `sslcert` and `sslkey` in DATABASE_URL are read the same way.
 */
export const PostgresSecurityConfigSchema = Type.Object({
  /** disable | require | verify-ca | verify-full (libpq meanings); empty: DATABASE_URL's sslmode, else disable. */
  DATABASE_SSL_MODE: Type.Union(
    literals(['', 'disable', 'allow', 'prefer', 'require', 'verify-ca', 'verify-full', 'no-verify']),
    { default: '' },
  ),
  /** PEM file with the CA that signs the server's certificate (libpq's sslrootcert). */
  DATABASE_SSL_CA_FILE: Type.String({ default: '' }),
  /** PEM client certificate and key (libpq's sslcert/sslkey), for `cert` authentication. */
  DATABASE_SSL_CERT_FILE: Type.String({ default: '' }),
  DATABASE_SSL_KEY_FILE: Type.String({ default: '' }),
  /** A file holding the password (a mounted Secret), read for every new connection so a rotation needs no restart. */
  DATABASE_PASSWORD_FILE: Type.String({ default: '' }),
  /**
   * For the connections that need a session of their own: the outbox relay (a session advisory lock,
   * LISTEN) and migrations (an advisory lock). Set it to PostgreSQL itself, or a session-mode pool,
   * when DATABASE_URL goes through PgBouncer in transaction mode. Empty: DATABASE_URL.
   */
  DATABASE_SESSION_URL: Type.String({ default: '', pattern: '^(postgres(ql)?://.+)?$' }),
  /**
   * The runtime role `migrate` grants rights on what it creates (USAGE on the schema; SELECT, INSERT,
   * UPDATE, DELETE on its tables; its sequences), now and by default. Empty: no grants (one role does all).
   */
  DATABASE_RUNTIME_ROLE: Type.String({ default: '', pattern: '^([a-z_][a-z0-9_]*)?$' }),
});

/** The schema registry and the wire format of the public topics (ADR 011, registry/binding.ts). */
export const SchemaRegistryConfigSchema = Type.Object({
  /**
   * How public topics (no PII: what data teams read) are written: `confluent` (the default: magic
   * byte 0, the registry id, the Avro body; needs SCHEMA_REGISTRY_URL and `npm run schemas:register`)
   * or `single-object` (C3 01 and the schema fingerprint; no registry: an explicit opt-out for a
   * deployment without one). Both are always read.
   */
  EVENT_WIRE_FORMAT: Type.Union(literals(['confluent', 'single-object']), { default: 'confluent' }),
  /**
   * Base URL of the registry's Confluent-compatible API (Apicurio: .../apis/ccompat/v7). Empty: none.
   * No `user:password@` in it (fetch refuses such a URL, and its error would print the password):
   * credentials go in the SCHEMA_REGISTRY_AUTH file.
   */
  SCHEMA_REGISTRY_URL: Type.String({ default: '', pattern: '^(https?://[^/?#@\\s]+([/?#]\\S*)?)?$' }),
  /** A file holding `user:password` for the registry's basic authentication (a mounted Secret). */
  SCHEMA_REGISTRY_AUTH: Type.String({ default: '' }),
  /** Deadline of one registry request. */
  SCHEMA_REGISTRY_TIMEOUT_MS: Type.Integer({ minimum: 100, maximum: 60_000, default: 5_000 }),
  /** How long the start-up waits for an unreachable registry before the process exits (69). */
  SCHEMA_REGISTRY_STARTUP_TIMEOUT_MS: Type.Integer({ minimum: 0, default: 30_000 }),
});

/** Settings every service reads. Services extend this with their own. */
export const BaseConfigSchema = Type.Object({
  ...KafkaSecurityConfigSchema.properties,
  ...PostgresSecurityConfigSchema.properties,
  ...SchemaRegistryConfigSchema.properties,
  /**
   * `production` (the default), `development` or `test`, read case-insensitively. Anything else stops
   * the start: a misspelling (`prod`) must not skip the checks production gets.
   */
  NODE_ENV: Type.Union(literals(['production', 'development', 'test']), { default: 'production' }),
  LOG_LEVEL: Type.Union(
    ['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'].map((l) => Type.Literal(l)),
    { default: 'info' },
  ),
  HTTP_HOST: Type.String({ default: '0.0.0.0' }),
  HTTP_PORT: Type.Integer({ minimum: 0, maximum: 65535, default: 8080 }),
  /**
   * Whose X-Forwarded-For to believe, so per-client limits see the client behind an ingress rather
   * than the ingress: the proxies' addresses or CIDRs (comma-separated), or the number of proxy hops.
   * Empty: the socket's peer is the client. "true" (believe anyone) is refused: any caller could
   * then pick its own address and escape its limit.
   */
  TRUST_PROXY: Type.String({ default: '', pattern: '^(|\\d{1,2}|[0-9A-Fa-f.:/]+(,\\s*[0-9A-Fa-f.:/]+)*)$' }),
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
  /** The sender's bounce-mailbox hook (POST /v1/feedback/dsn) only; other services have no such route. */
  API_TOKENS_DSN: Type.String({ default: '' }),
  API_TOKENS_DSN_FILE: Type.String({ default: '' }),
  /** Data-subject erasure (ADR 014): the planner's POST /v1/subjects/.../erase and each service's part of it. */
  API_TOKENS_ERASE: Type.String({ default: '' }),
  API_TOKENS_ERASE_FILE: Type.String({ default: '' }),
  /**
   * How often secret files that may be rotated while a service runs are read again: the
   * API_TOKENS_*_FILE files, and the planner's EXPERIMENT_TOKEN_FILE (security/reload.ts).
   */
  SECRET_FILE_REFRESH_MS: Type.Integer({ minimum: 100, maximum: 3_600_000, default: 30_000 }),
  /**
   * Requests per RATE_LIMIT_WINDOW_MS, per replica, in each bucket: per token (per client address
   * without a valid one); on the public routes per route purpose, a verified credential's (a signed
   * message, an unsubscribe link) its own, everything else's per client address (docs/operations.md,
   * "Rate limits").
   */
  RATE_LIMIT_MAX: Type.Integer({ minimum: 1, maximum: 100_000_000, default: 6_000 }),
  RATE_LIMIT_WINDOW_MS: Type.Integer({ minimum: 1_000, maximum: 3_600_000, default: 60_000 }),
  /**
   * A request, headers and body, must arrive within this (else 408 and the connection closed): a
   * client trickling its body a byte at a time cannot hold a connection longer.
   */
  HTTP_REQUEST_TIMEOUT_MS: Type.Integer({ minimum: 1_000, maximum: 600_000, default: 30_000 }),
  /** A connection on which no byte moves for this long is closed (a request in progress included). */
  HTTP_CONNECTION_TIMEOUT_MS: Type.Integer({ minimum: 1_000, maximum: 3_600_000, default: 60_000 }),
  /**
   * How often `/health/ready` runs its checks while they pass (at most every second while one
   * fails); requests read the last result (service/health.ts).
   */
  READINESS_REFRESH_MS: Type.Integer({ minimum: 100, maximum: 60_000, default: 5_000 }),
  /**
   * Apply pending migrations when the service starts (the `migrate` command always does). Off in
   * production, where the migrate Job runs them as the migrator role and the service's own role has no DDL.
   */
  MIGRATE_ON_START: Type.Boolean({ default: true }),
  /**
   * Partitions a consumer works on at once (kafkajs partitionsConsumedConcurrently). Each partition's
   * events stay in order; more at once cuts the latency that per-partition transactions add up to.
   */
  CONSUMER_PARTITION_CONCURRENCY: Type.Integer({ minimum: 1, maximum: 64, default: 4 }),
  /**
   * What one fetch of a consumer may bring back, in all (kafkajs maxBytes) and per partition
   * (maxBytesPerPartition). Every record of a fetch is held, decoded, until the fetch's batches are
   * handled: these bound a consumer's memory under a backlog. Defaults: kafkajs's (10 MiB, 1 MiB).
   */
  CONSUMER_FETCH_MAX_BYTES: Type.Integer({ minimum: 65_536, default: 10_485_760 }),
  CONSUMER_FETCH_PARTITION_MAX_BYTES: Type.Integer({ minimum: 16_384, default: 1_048_576 }),
  /**
   * The cap on retrying a transient failure (database, broker or peer unavailable) before the events
   * go to the DLQ as TRANSIENT_EXHAUSTED (replayable): attempts, and milliseconds since the first.
   */
  CONSUMER_RETRY_MAX_ATTEMPTS: Type.Integer({ minimum: 1, default: CONSUMER_RETRY_DEFAULTS.maxAttempts }),
  CONSUMER_RETRY_MAX_MS: Type.Integer({ minimum: 1_000, default: CONSUMER_RETRY_DEFAULTS.maxElapsedMs }),
  /** Milliseconds a shutdown may take before the process exits anyway (keep below the pod's grace period). */
  SHUTDOWN_TIMEOUT_MS: Type.Integer({ minimum: 100, default: 25_000 }),
  /**
   * How long an event's id stays in outbox_event_ids, where the outbox refuses a repeat of
   * it (a week). Consumers deduplicate by event id in any case; a high-rate service may keep less.
   */
  OUTBOX_EVENT_IDS_RETENTION_MS: Type.Integer({ minimum: 60_000, default: 7 * 24 * 60 * 60 * 1000 }),
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
    const data = { ...env };
    if (data.NODE_ENV !== undefined) data.NODE_ENV = data.NODE_ENV.trim().toLowerCase() || undefined;
    // `env: false`: read only the environment passed in (env-schema would otherwise merge process.env under it).
    return envSchema<BaseConfig & Static<TObject<P>>>({ schema, data, dotenv: false, env: false });
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
