export { waitFor, WaitTimeoutError } from './wait.js';
export { createLogger, type Logger } from './logger.js';
export {
  BaseConfigSchema,
  KafkaSecurityConfigSchema,
  loadConfig,
  brokerList,
  ConfigError,
  type BaseConfig,
} from './config.js';
export { createKafka, waitForKafka } from './kafka/client.js';
export { kafkaSecurityFromEnv, PLAINTEXT, type KafkaSecurity } from './kafka/security.js';
export { unsecuredJws } from './kafka/oauth.js';
export * from './kafka/acls.js';
export { applyKafkaAcls, deleteKafkaAcls } from './kafka/acls-admin.js';
export { checkKafkaAccess, explainKafkaError } from './kafka/access.js';
export { StartupError } from './service/startup-error.js';
export { readPemFile, readSecretFile, reloadingSecret, type ReadFile } from './security/secrets.js';
export { type Reloading } from './security/reload.js';
export { boundedText, readBoundedBody, readBoundedJson } from './bounded-body.js';
export { createPool, waitForPostgres, quoteIdent, redactUrl } from './pg/pool.js';
export { explainPgError, pgClientConfig, pgSettingsFromEnv, resolvePgSettings, tlsOptions } from './pg/connection.js';
export { databaseRolesSql, ROLE_NAME, ensureDatabaseRoles, type DatabaseRolesPlan } from './pg/roles.js';
export { AppError } from './service/errors.js';
export { campaignIdParam } from './service/params.js';
export { buildHttpApp, buildServiceApp, MAX_BODY_BYTES } from './service/http.js';
export {
  authenticate,
  clientRateLimit,
  credentialRateLimit,
  scopedTokensFrom,
  scopes,
  type CredentialRateLimit,
  type RegisteredRoute,
  type Scope,
} from './service/auth.js';
export { runService } from './service/run.js';
export {
  registerConsumer,
  registerOutboxRelay,
  registerPeriodicTask,
  retryCap,
  watchPeriodicTask,
} from './service/workers.js';
export { registerSubjectPartRoutes, type SubjectPart } from './service/subject-part-routes.js';
export { asyncApiDocument, DEAD_LETTER_HEADERS } from './contracts/asyncapi.js';
export { avroFromJson, avroToJsonSchema, type JsonSchema } from './contracts/json-schema.js';
export { SchemaRegistryClient, SchemaRegistryError, readRegistryAuth } from './registry/client.js';
export { publisherSubjects, registrySubjects, schemaText } from './registry/subjects.js';
export {
  registerSchemas,
  registerSubject,
  SchemaRegistrationError,
  SUBJECT_COMPATIBILITY,
} from './registry/register.js';
export { bindSchemaRegistry, unbindSchemaRegistry } from './registry/binding.js';
export { loadSchemaSet, generateTypeScript, checkCompatibility, type SchemaSet } from './contracts/schema-tools.js';
export { EmailHashKeyConfigSchema, loadEmailHashKey, readKeyMaterial } from './email-hash-key.js';
export {
  topics,
  topicName,
  dlqTopicOf,
  declaredTopics,
  ensureTopics,
  createTopicsSettled,
  listTopicsSettled,
  type TopicSpec,
  type TopicId,
} from './kafka/topics.js';
export {
  EventProducer,
  fitsAlone,
  recordBytes,
  eventHeaders,
  type OutgoingEvent,
  type RawRecord,
} from './kafka/producer.js';
export {
  ConsumerRunner,
  TransientError,
  TRANSIENT_EXHAUSTED,
  isTransientError,
  type ConsumedEvent,
  type EventBatchHandler,
  type BatchContext,
  type Rejection,
} from './kafka/consumer.js';
export { replayFromBeginning } from './kafka/replay.js';
export { replayDeadLetters } from './kafka/dlq-replay.js';
export { withTransaction, type Queryable } from './pg/transaction.js';
export { decideAll, runCommands, type AggregateStore, type Decided } from './pg/command.js';
export { traced, withCause } from './telemetry/trace.js';
export { GroupCommit } from './pg/group-commit.js';
export { migrate, sharedMigrationsDir } from './pg/migrate.js';
export { withScratchSchema } from './pg/scratch.js';
export { PeriodicTask } from './service/periodic.js';
export { enqueueEvents, OutboxRelay } from './outbox/outbox.js';
export {
  createMetricsRegistry,
  counter,
  gauge,
  histogram,
  METRICS,
  Counter,
  Registry,
  type MetricSpec,
} from './metrics.js';
export {
  ERASURE_STATUSES,
  ErasedSubjects,
  erasedPseudonym,
  erasureStatus,
  exportTables,
  loadSuppressionKey,
  lockAgainstErasure,
  lockForErasure,
  MAX_SUBJECT_KEYS,
  MAX_SUBJECT_PAGE,
  recordErasure,
  subjectHash,
  SubjectAddress,
  SubjectCandidate,
  SubjectPartEraseAnswer,
  SubjectPartEraseBody,
  SubjectPartExportAnswer,
  SubjectPartExportBody,
  SuppressionKeyConfigSchema,
  type ErasureStatus,
  type SubjectHashKind,
  type SubjectTable,
  type SuppressionKeyConfig,
} from './subjects.js';
