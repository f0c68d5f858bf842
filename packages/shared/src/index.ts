export { waitFor, WaitTimeoutError, type WaitOptions } from './wait.js';
export { createLogger, type Logger, type LoggerConfig } from './logger.js';
export {
  BaseConfigSchema,
  KafkaSecurityConfigSchema,
  PostgresSecurityConfigSchema,
  CONSUMER_RETRY_DEFAULTS,
  loadConfig,
  brokerList,
  ConfigError,
  type BaseConfig,
} from './config.js';
export { createKafka, waitForKafka, type KafkaClientOptions } from './kafka/client.js';
export {
  kafkaSecurityFromEnv,
  PLAINTEXT,
  reloadWarnings,
  type KafkaSecurity,
  type KafkaSecurityOptions,
  type OAuthProviderKind,
  type SaslMechanism,
} from './kafka/security.js';
export {
  awsMskIamTokenProvider,
  oidcClientCredentialsProvider,
  OAuthTokenError,
  tokenFileProvider,
  unsecuredJws,
  unsecuredTokenProvider,
  type AwsCredentials,
  type OAuthBearerProvider,
  type OAuthBearerToken,
  type OidcClientCredentialsOptions,
} from './kafka/oauth.js';
export * from './kafka/acls.js';
export { applyKafkaAcls, deleteKafkaAcls } from './kafka/acls-admin.js';
export { checkKafkaAccess, explainKafkaError, type KafkaAccessCheckOptions } from './kafka/access.js';
export { StartupError, type StartupFailure } from './service/startup-error.js';
export {
  readPemFile,
  readSecret,
  readSecretFile,
  reloadingSecret,
  type ReloadingSecretOptions,
} from './security/secrets.js';
export { reloadEvery, type ReloadOptions, type Reloading } from './security/reload.js';
export { boundedText, readBoundedBody, readBoundedJson, type BoundedJson } from './bounded-body.js';
export { createPool, waitForPostgres, quoteIdent, redactUrl, type PoolOptions } from './pg/pool.js';
export {
  explainPgError,
  pgClientConfig,
  pgSettingsFromEnv,
  resolvePgSettings,
  tlsOptions,
  unverifiedTls,
  type PgConnectionSettings,
  type SslMode,
} from './pg/connection.js';
export {
  databaseRolesSql,
  ROLE_NAME,
  ensureDatabaseRoles,
  grantRuntimeAccess,
  runtimeGrantsSql,
  scramVerifier,
  type DatabaseRolesPlan,
  type ServiceDatabaseRole,
} from './pg/roles.js';
export { AppError, errorStatus, type ErrorCode } from './service/errors.js';
export { campaignIdParam } from './service/params.js';
export {
  buildHttpApp,
  buildServiceApp,
  MAX_BODY_BYTES,
  MAX_PARAM_CHARS,
  type HttpAppOptions,
  type LivenessCheck,
  type ReadinessCheck,
} from './service/http.js';
export { postgresPlugin, type PostgresPluginOptions } from './service/postgres-plugin.js';
export { kafkaPlugin, KafkaNeeds, type KafkaPluginOptions } from './service/kafka-plugin.js';
export {
  accessControl,
  authenticate,
  authorize,
  clientRateLimit,
  parseTokens,
  scopedTokensFrom,
  scopePluginRoutes,
  scopes,
  TokenVerifier,
  type AccessControlOptions,
  type Authentication,
  type Principal,
  type RegisteredRoute,
  type RouteAccess,
  type Scope,
  type ScopedTokens,
} from './service/auth.js';
export { runService, type ServiceDefinition } from './service/run.js';
export { openApiDocument } from './service/docs.js';
export {
  registerConsumer,
  registerOutboxRelay,
  registerPeriodicTask,
  retryCap,
  watchPeriodicTask,
} from './service/workers.js';
export { asyncApiDocument, DEAD_LETTER_HEADERS, type AsyncApiOptions } from './contracts/asyncapi.js';
export {
  avroFromJson,
  avroToJsonSchema,
  type JsonConversion,
  type JsonSchema,
  type JsonSchemaOptions,
} from './contracts/json-schema.js';
export {
  SchemaRegistryClient,
  SchemaRegistryError,
  readRegistryAuth,
  type CompatibilityLevel,
  type SchemaRegistryClientOptions,
} from './registry/client.js';
export {
  isPublicTopic,
  publisherSubjects,
  registrySubjects,
  schemaText,
  subjectName,
  type RegistrySubject,
  type WireFormat,
} from './registry/subjects.js';
export {
  registerSchemas,
  registerSubject,
  SchemaRegistrationError,
  SUBJECT_COMPATIBILITY,
  type RegisteredSubject,
} from './registry/register.js';
export {
  bindSchemaRegistry,
  learnUnknownSchemaIds,
  SchemaIdResolver,
  unbindSchemaRegistry,
  type RegistryBinding,
  type RegistryBindingConfig,
} from './registry/binding.js';
export {
  loadSchemaSet,
  generateTypeScript,
  checkCompatibility,
  type SchemaSet,
  type SchemaFile,
  type CompatibilityProblem,
} from './contracts/schema-tools.js';
export {
  EmailHashKeyConfigSchema,
  loadEmailHashKey,
  MIN_EMAIL_HASH_KEY_BYTES,
  type EmailHashKeyConfig,
} from './email-hash-key.js';
export {
  topics,
  topicName,
  dlqTopicOf,
  declaredTopics,
  ensureTopics,
  createTopicsSettled,
  listTopicsSettled,
  whileMetadataSettles,
  DLQ_SUFFIX,
  type TopicSpec,
  type TopicId,
  type EnsureTopicsResult,
} from './kafka/topics.js';
export {
  EventProducer,
  FALLBACK_MAX_MESSAGE_BYTES,
  RecordTooLargeError,
  fitsAlone,
  isMessageTooLarge,
  recordBytes,
  HEADER,
  messageKey,
  childTraceparent,
  eventHeaders,
  type OutgoingEvent,
  type RawRecord,
} from './kafka/producer.js';
export {
  ConsumerRunner,
  TransientError,
  TRANSIENT_EXHAUSTED,
  isTransientError,
  isRebalanceError,
  type ConsumedEvent,
  type EventBatchHandler,
  type BatchContext,
  type Rejection,
  type ConsumerRunnerOptions,
} from './kafka/consumer.js';
export { replayFromBeginning } from './kafka/replay.js';
export { replayDeadLetters, type DlqReplayOptions, type DlqReplayResult } from './kafka/dlq-replay.js';
export { withTransaction, type Queryable } from './pg/transaction.js';
export { decideAll, runCommands, type AggregateStore, type Decided } from './pg/command.js';
export { shutdownTracing, traced, tracingActive, withCause, type TracedSpan } from './telemetry/trace.js';
export { classifyPgError, sqlState, type PgErrorKind } from './pg/errors.js';
export { GroupCommit } from './pg/group-commit.js';
export { migrate, sharedMigrationsDir, type MigrateOptions } from './pg/migrate.js';
export { withScratchSchema } from './pg/scratch.js';
export { PeriodicTask, type PeriodicTaskOptions } from './service/periodic.js';
export { enqueueEvents, OutboxRelay, outboxChannel, type OutboxRelayOptions } from './outbox/outbox.js';
export {
  createMetricsRegistry,
  counter,
  gauge,
  histogram,
  sharedRead,
  METRICS,
  Counter,
  Gauge,
  Histogram,
  Registry,
  type MetricName,
  type MetricSpec,
} from './metrics.js';
export { registerOutboxMetrics } from './metrics/outbox.js';
