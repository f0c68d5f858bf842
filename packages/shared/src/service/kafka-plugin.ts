import fp from 'fastify-plugin';
import type { Admin, Kafka } from 'kafkajs';
import { checkKafkaAccess } from '../kafka/access.js';
import type { KafkaAccessNeeds } from '../kafka/acls.js';
import { createKafka } from '../kafka/client.js';
import { EventProducer } from '../kafka/producer.js';
import { kafkaSecurityFromEnv, reloadWarnings, type KafkaSecurity } from '../kafka/security.js';
import { dlqTopicOf } from '../kafka/topics.js';
import type { Logger } from '../logger.js';

/** What this process will do on Kafka, collected while plugins register; checked once it is ready. */
export class KafkaNeeds implements KafkaAccessNeeds {
  readonly read: string[] = [];
  readonly write: string[] = [];
  readonly groups: string[] = [];

  /** A consumer group reading `topics`, dead-lettering into their DLQs. */
  consumes(groupId: string, topics: readonly string[]): void {
    this.groups.push(groupId);
    this.read.push(...topics);
    this.write.push(...topics.map(dlqTopicOf));
  }

  produces(topics: readonly string[]): void {
    this.write.push(...topics);
  }
}

declare module 'fastify' {
  interface FastifyInstance {
    readonly kafka: Kafka;
    readonly producer: EventProducer;
    readonly kafkaNeeds: KafkaNeeds;
    /** KAFKA_AUTH_RETRY_WINDOW_MS: how long a consumer restarts itself while the brokers refuse our credentials. */
    readonly kafkaAuthRetryWindowMs: number | undefined;
    /** CONSUMER_FETCH_MAX_BYTES / _PARTITION_MAX_BYTES, for the consumers registered on this app. */
    readonly kafkaFetchLimits: FetchLimits | undefined;
  }
}

/** What one consumer fetch may bring back: in all, and per partition (kafkajs maxBytes, maxBytesPerPartition). */
export interface FetchLimits {
  readonly maxBytes: number;
  readonly maxBytesPerPartition: number;
}

export interface KafkaPluginOptions {
  readonly brokers: readonly string[];
  readonly clientId: string;
  /** TLS and SASL; default: this process's KAFKA_SSL* / KAFKA_SASL* / KAFKA_OAUTH* variables. */
  readonly security?: KafkaSecurity;
  /** The role whose ACLs this process has (kafka/acls.ts), named in the start-up check's message. */
  readonly role?: string;
  /** What the role writes and reads beyond what the registered consumers declare. */
  readonly needs?: KafkaAccessNeeds;
  /** How long the start-up check waits for a broker that does not answer (KAFKA_STARTUP_TIMEOUT_MS). */
  readonly startupTimeoutMs?: number;
  /** KAFKA_STARTUP_ACL_CHECK: false checks credentials and certificates only. */
  readonly checkAcls?: boolean;
  /** KAFKA_AUTH_RETRY_WINDOW_MS, for the consumers registered on this app (ConsumerRunner's default otherwise). */
  readonly authRetryWindowMs?: number;
  /** CONSUMER_FETCH_*, for the consumers registered on this app (kafkajs's defaults otherwise). */
  readonly fetchLimits?: FetchLimits;
}

/**
 * Decorates the app with the Kafka client and one idempotent producer, adds a readiness check (a
 * metadata request), and disconnects on close, after the consumers and relays that use them.
 * When the app becomes ready, before any consumer starts, it checks that the brokers accept our
 * credentials and that our principal may read and write what the consumers and the role need
 * (kafka/access.ts); a refusal rejects `ready()` with a StartupError, which runService turns into
 * an exit naming the cause.
 */
export const kafkaPlugin = fp<KafkaPluginOptions>(
  async (app, options) => {
    const security =
      options.security ?? kafkaSecurityFromEnv(process.env, undefined, reloadWarnings(app.log as Logger));
    const kafka = createKafka({
      brokers: options.brokers,
      clientId: options.clientId,
      logger: app.log as Logger,
      security,
    });
    const producer = new EventProducer(kafka, { logger: app.log as Logger });
    const needs = new KafkaNeeds();
    if (options.needs) {
      needs.read.push(...options.needs.read);
      needs.write.push(...options.needs.write);
      needs.groups.push(...options.needs.groups);
    }
    let admin: Admin | undefined;
    app.decorate('kafka', kafka);
    app.decorate('producer', producer);
    app.decorate('kafkaNeeds', needs);
    app.decorate('kafkaAuthRetryWindowMs', options.authRetryWindowMs);
    app.decorate('kafkaFetchLimits', options.fetchLimits);
    app.addHook('onReady', async () => {
      await checkKafkaAccess({
        brokers: options.brokers,
        security,
        needs,
        timeoutMs: options.startupTimeoutMs ?? 60_000,
        clientId: options.clientId,
        ...(options.role ? { role: options.role } : {}),
        ...(options.checkAcls === false ? { checkAcls: false } : {}),
        logger: app.log as Logger,
      });
    });
    app.readiness.set('kafka', async () => {
      admin ??= kafka.admin({ retry: { retries: 0 } });
      await admin.connect();
      await admin.describeCluster();
    });
    app.addHook('onClose', async () => {
      await producer.disconnect().catch(() => undefined);
      await admin?.disconnect().catch(() => undefined);
    });
  },
  { name: 'kafka', dependencies: ['health'] },
);
