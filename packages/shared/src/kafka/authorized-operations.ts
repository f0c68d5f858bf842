/**
 * Which operations the broker lets *us* do on some topics, without doing them: a Metadata request
 * (v8+) with `include_topic_authorized_operations` (KIP-430). The start-up check needs it to tell
 * "may write" from "may only read" before the first real write, which may come hours later.
 *
 * kafkajs 2.2.4 speaks Metadata only up to v6, so this encodes v8 itself and sends it over a
 * kafkajs connection: it reaches kafkajs internals (the cluster factory, a broker's connection
 * pool, its Encoder/Decoder), which is why it lives alone in this file. kafkajs is pinned and
 * unmaintained, so they will not move under us; a move to @confluentinc/kafka-javascript replaces
 * this file with its admin `describeTopics({ includeAuthorizedOperations: true })`.
 */
import { createRequire } from 'node:module';
import type { Kafka } from 'kafkajs';

const require = createRequire(import.meta.url);

interface Encoder {
  writeArray(values: readonly string[]): Encoder;
  writeBoolean(value: boolean): Encoder;
}
interface Decoder {
  readInt16(): number;
  readInt32(): number;
  readString(): string | null;
  readBoolean(): boolean;
  readArray<T>(reader: (decoder: Decoder) => T): T[];
}
const EncoderClass = require('kafkajs/src/protocol/encoder') as new () => Encoder;
const DecoderClass = require('kafkajs/src/protocol/decoder') as new (buffer: Buffer) => Decoder;

/** AclOperation codes, as bits of `topic_authorized_operations` (org.apache.kafka.common.acl.AclOperation). */
const OPERATION_BITS = {
  READ: 3,
  WRITE: 4,
  CREATE: 5,
  DELETE: 6,
  ALTER: 7,
  DESCRIBE: 8,
  DESCRIBE_CONFIGS: 10,
  ALTER_CONFIGS: 11,
} as const;
export type TopicOperation = keyof typeof OPERATION_BITS;

export interface TopicAccess {
  /** 0, or the topic's error: 29 TOPIC_AUTHORIZATION_FAILED (no ACL at all, or no such topic), 3 UNKNOWN_TOPIC_OR_PARTITION. */
  readonly errorCode: number;
  /** Undefined when the broker did not compute them (Kafka's "not requested" value, -2^31). */
  readonly operations: ReadonlySet<TopicOperation> | undefined;
}

export const TOPIC_AUTHORIZATION_FAILED = 29;
export const UNKNOWN_TOPIC_OR_PARTITION = 3;

function metadataV8(topics: readonly string[]) {
  return {
    request: {
      apiKey: 3,
      apiVersion: 8,
      apiName: 'Metadata',
      // topics, allow_auto_topic_creation, include_cluster_authorized_operations, include_topic_authorized_operations
      encode: async () =>
        new EncoderClass().writeArray(topics).writeBoolean(false).writeBoolean(false).writeBoolean(true),
    },
    response: {
      decode: async (raw: Buffer) => {
        const decoder = new DecoderClass(raw);
        decoder.readInt32(); // throttle_time_ms
        decoder.readArray((d) => [d.readInt32(), d.readString(), d.readInt32(), d.readString()]); // brokers
        decoder.readString(); // cluster_id
        decoder.readInt32(); // controller_id
        const topicsRead = decoder.readArray((d) => {
          const errorCode = d.readInt16();
          const name = d.readString() ?? '';
          d.readBoolean(); // is_internal
          d.readArray((p) => {
            p.readInt16(); // error_code
            p.readInt32(); // partition_index
            p.readInt32(); // leader_id
            p.readInt32(); // leader_epoch
            p.readArray((r) => r.readInt32()); // replica_nodes
            p.readArray((r) => r.readInt32()); // isr_nodes
            p.readArray((r) => r.readInt32()); // offline_replicas
            return null;
          });
          return { name, errorCode, bits: d.readInt32() };
        });
        return topicsRead;
      },
      parse: async <T>(decoded: T) => decoded,
    },
  };
}

interface InternalBroker {
  readonly connectionPool: { send(request: unknown): Promise<unknown> };
  findGroupCoordinator(options: { groupId: string }): Promise<unknown>;
}
interface InternalCluster {
  connect(): Promise<void>;
  disconnect(): Promise<void>;
  readonly brokerPool: { readonly seedBroker: InternalBroker };
}

/** One authenticated connection to a seed broker, for the start-up check's requests. */
export interface BrokerSession {
  topicAccess(topics: readonly string[]): Promise<Map<string, TopicAccess>>;
  /** Rejects with kafkajs's GROUP_AUTHORIZATION_FAILED when we may not even describe the group. */
  findGroupCoordinator(groupId: string): Promise<void>;
  disconnect(): Promise<void>;
}

export async function openBrokerSession(kafka: Kafka): Promise<BrokerSession> {
  const factory = Object.getOwnPropertySymbols(kafka).find((s) => s.description === 'private:Kafka:createCluster');
  if (!factory)
    throw new Error('this kafkajs has no cluster factory where 2.2.4 had it (see authorized-operations.ts)');
  const cluster = (kafka as unknown as Record<symbol, (options: object) => InternalCluster>)[factory]?.({});
  if (!cluster) throw new Error('kafkajs did not build a cluster');
  try {
    await cluster.connect();
  } catch (error) {
    await cluster.disconnect().catch(() => undefined);
    throw error;
  }
  const broker = cluster.brokerPool.seedBroker;
  return {
    async topicAccess(topics) {
      const answer = (await broker.connectionPool.send(metadataV8(topics))) as Array<{
        name: string;
        errorCode: number;
        bits: number;
      }>;
      const result = new Map<string, TopicAccess>();
      for (const topic of answer) {
        if (topic.bits === -2147483648) {
          result.set(topic.name, { errorCode: topic.errorCode, operations: undefined });
          continue;
        }
        const operations = new Set<TopicOperation>();
        for (const [operation, bit] of Object.entries(OPERATION_BITS)) {
          if ((topic.bits & (1 << bit)) !== 0) operations.add(operation as TopicOperation);
        }
        result.set(topic.name, { errorCode: topic.errorCode, operations });
      }
      return result;
    },
    async findGroupCoordinator(groupId) {
      await broker.findGroupCoordinator({ groupId });
    },
    disconnect: () => cluster.disconnect(),
  };
}
