import { Kafka, logLevel, type KafkaConfig, type LogEntry } from 'kafkajs';
import type { Logger } from '../logger.js';
import { waitFor } from '../wait.js';
import { patchKafkajsIdleTimer, patchKafkajsReauthentication } from './kafkajs-patches.js';
import { oauthBearerAuthenticator } from './oauthbearer.js';
import { snapshotAuthenticator } from './password-sasl.js';
import { kafkaSecurityFromEnv, reloadWarnings, type KafkaSecurity } from './security.js';

export interface KafkaClientOptions {
  readonly brokers: readonly string[];
  readonly clientId: string;
  /** Kafka client logs go through the service's pino logger; omit to silence them. */
  readonly logger?: Logger;
  readonly connectionTimeoutMs?: number;
  readonly requestTimeoutMs?: number;
  /**
   * TLS and SASL. Omitted: this process's KAFKA_SSL* / KAFKA_SASL* / KAFKA_OAUTH* variables, so every
   * service and CLI connects the same way without passing them along (kafka/security.ts).
   */
  readonly security?: KafkaSecurity;
  /** Retries of a failed request or connection (8); the start-up check makes its own. */
  readonly retries?: number;
}

const levels: Record<number, 'error' | 'warn' | 'info' | 'debug'> = {
  [logLevel.ERROR]: 'error',
  [logLevel.WARN]: 'warn',
  [logLevel.INFO]: 'info',
  [logLevel.DEBUG]: 'debug',
};

/**
 * The one place a kafkajs client is constructed. Services never import kafkajs: they use the
 * producer/consumer helpers of this package, so the client library can be swapped (see ADR 001).
 */
export function createKafka(options: KafkaClientOptions): Kafka {
  patchKafkajsIdleTimer();
  patchKafkajsReauthentication();
  const { logger } = options;
  const config: KafkaConfig = {
    clientId: options.clientId,
    brokers: [...options.brokers],
    connectionTimeout: options.connectionTimeoutMs ?? 3_000,
    requestTimeout: options.requestTimeoutMs ?? 30_000,
    logLevel: logger ? logLevel.INFO : logLevel.NOTHING,
    retry: { initialRetryTime: 100, retries: options.retries ?? 8 },
  };
  const security =
    options.security ?? kafkaSecurityFromEnv(process.env, undefined, logger ? reloadWarnings(logger) : {});
  if (security.ssl) config.ssl = security.ssl;
  if (security.sasl?.mechanism === 'oauthbearer') {
    // Our OAUTHBEARER exchange: kafkajs' own mistakes a refused token for a success (oauthbearer.ts).
    config.sasl = {
      mechanism: 'oauthbearer',
      authenticationProvider: oauthBearerAuthenticator(security.sasl.oauthBearerProvider),
    };
  } else if (security.sasl && security.saslCredentials) {
    // One snapshot of the username and password per login (password-sasl.ts).
    const authenticationProvider = snapshotAuthenticator(security.sasl.mechanism, security.saslCredentials);
    config.sasl = authenticationProvider
      ? { mechanism: security.sasl.mechanism, authenticationProvider }
      : security.sasl;
  } else if (security.sasl) config.sasl = security.sasl;
  if (logger) {
    const kafkaLogger = logger.child({ component: 'kafkajs' });
    config.logCreator =
      () =>
      ({ namespace, level, log }: LogEntry) => {
        const { message, timestamp: _ts, logger: _name, ...extra } = log;
        kafkaLogger[levels[level] ?? 'info']({ namespace, ...extra }, message);
      };
  }
  return new Kafka(config);
}

/**
 * Readiness means the broker answers a metadata request and a group coordinator exists
 * (the first FindCoordinator creates `__consumer_offsets`; until then every group join fails).
 */
export async function waitForKafka(
  brokers: readonly string[],
  timeoutMs: number,
  security?: KafkaSecurity,
): Promise<{ clusterId: string }> {
  const kafka = createKafka({
    brokers,
    clientId: 'readiness-probe',
    connectionTimeoutMs: 1_000,
    requestTimeoutMs: 5_000,
    ...(security ? { security } : {}),
  });
  const admin = kafka.admin({ retry: { retries: 0 } });
  try {
    await waitFor(
      async () => {
        await admin.connect();
        return true;
      },
      { timeoutMs, intervalMs: 250, description: `a Kafka broker at ${brokers.join(',')}` },
    );
    const cluster = await waitFor(() => admin.describeCluster(), {
      timeoutMs,
      intervalMs: 250,
      description: 'a metadata response from Kafka',
    });
    await waitFor(
      async () => {
        const { groups } = await admin.describeGroups(['__readiness-probe']);
        return groups.length === 1;
      },
      { timeoutMs, intervalMs: 250, description: 'a Kafka group coordinator' },
    );
    return { clusterId: cluster.clusterId };
  } finally {
    await admin.disconnect().catch(() => undefined);
  }
}
