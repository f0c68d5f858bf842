/**
 * `topics:ensure`: create every declared topic (and its DLQ) that is missing, align the config of
 * those that exist. Idempotent; safe to run on every deploy (the Kubernetes topics Job runs it).
 *
 *   KAFKA_BROKERS=host:9092 [TOPIC_PREFIX=] [TOPIC_PARTITIONS=] [TOPIC_REPLICATION_FACTOR=] node cli/topics.js
 *
 * On a secured cluster it connects with the KAFKA_SSL* / KAFKA_SASL* variables (as the topics-admin
 * principal, kafka/acls.ts); a refused login, certificate or ACL ends it with exit 78 and the cause.
 */
import { Type } from '@sinclair/typebox';
import { envSchema } from 'env-schema';
import { brokerList } from '@outreach/shared';
import { createKafka } from '@outreach/shared';
import { kafkaSecurityFromEnv, type KafkaSecurity } from '@outreach/shared';
import { ensureTopics } from '@outreach/shared';
import { exitOnKafkaFailure } from './kafka-failure.js';

const Env = Type.Object({
  KAFKA_BROKERS: Type.String({ pattern: '^[^,\\s:]+:\\d+(,[^,\\s:]+:\\d+)*$' }),
  TOPIC_PREFIX: Type.String({ default: '' }),
  TOPIC_PARTITIONS: Type.Optional(Type.Integer({ minimum: 1 })),
  TOPIC_REPLICATION_FACTOR: Type.Optional(Type.Integer({ minimum: 1 })),
});

async function main(): Promise<void> {
  let env: {
    KAFKA_BROKERS: string;
    TOPIC_PREFIX: string;
    TOPIC_PARTITIONS?: number;
    TOPIC_REPLICATION_FACTOR?: number;
  };
  try {
    env = envSchema({ schema: Env, dotenv: false });
  } catch (error) {
    process.stderr.write(`topics:ensure: ${(error as Error).message.replace(/\benv\b/g, 'environment')}\n`);
    process.exit(78);
  }
  let security: KafkaSecurity | undefined;
  try {
    security = kafkaSecurityFromEnv();
  } catch (error) {
    exitOnKafkaFailure('topics:ensure', error);
  }
  const admin = createKafka({
    brokers: brokerList(env.KAFKA_BROKERS),
    clientId: 'topics-ensure',
    security,
    retries: 2,
  }).admin();
  try {
    await admin.connect();
    const result = await ensureTopics(admin, {
      prefix: env.TOPIC_PREFIX,
      ...(env.TOPIC_PARTITIONS ? { partitions: env.TOPIC_PARTITIONS } : {}),
      ...(env.TOPIC_REPLICATION_FACTOR ? { replicationFactor: env.TOPIC_REPLICATION_FACTOR } : {}),
    });
    for (const name of result.created) console.log(`created      ${name}`);
    for (const name of result.reconfigured) console.log(`reconfigured ${name}`);
    for (const m of result.partitionMismatch) {
      console.log(
        `WARNING      ${m.name} has ${m.actual} partitions, declared ${m.declared} (left unchanged: keys would move)`,
      );
    }
    console.log(
      `topics: ${result.created.length} created, ${result.reconfigured.length} reconfigured, ${result.unchanged.length} unchanged`,
    );
  } catch (error) {
    exitOnKafkaFailure('topics:ensure', error, security);
  } finally {
    await admin.disconnect();
  }
}

await main();
