export { waitFor, WaitTimeoutError, type WaitOptions } from './wait.js';
export { createLogger, type Logger, type LoggerConfig } from './logger.js';
export { BaseConfigSchema, loadConfig, brokerList, ConfigError, type BaseConfig } from './config.js';
export { createKafka, waitForKafka, type KafkaClientOptions } from './kafka/client.js';
export { createPool, waitForPostgres, quoteIdent, redactUrl, type PoolOptions } from './pg/pool.js';
export { AppError, errorStatus, type ErrorCode } from './service/errors.js';
export { buildHttpApp, type HttpAppOptions, type ReadinessCheck } from './service/http.js';
export { postgresPlugin, type PostgresPluginOptions } from './service/postgres-plugin.js';
export { runService, type ServiceDefinition } from './service/run.js';
export * from './contracts/events.generated.js';
export { EventCodec, eventCodec, DecodeError, EncodeError, type DecodeErrorCode } from './contracts/codec.js';
export { crc64Avro, fingerprintBytes } from './contracts/fingerprint.js';
export {
  loadSchemaSet,
  canonicalForm,
  schemaFingerprint,
  generateTypeScript,
  checkCompatibility,
  type SchemaSet,
  type SchemaFile,
  type AvroSchema,
  type CompatibilityProblem,
} from './contracts/schema-tools.js';
