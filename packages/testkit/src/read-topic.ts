import type { Kafka, KafkaMessage } from 'kafkajs';
import { waitFor } from '@outreach/shared';
import { uniqueName } from './names.js';

export interface ReadMessage {
  readonly partition: number;
  readonly offset: string;
  readonly key: string | null;
  readonly value: Buffer | null;
  readonly headers: Record<string, string>;
  readonly timestamp: number;
}

function toRead(partition: number, message: KafkaMessage): ReadMessage {
  const headers: Record<string, string> = {};
  for (const [name, value] of Object.entries(message.headers ?? {})) {
    const first = Array.isArray(value) ? value[0] : value;
    if (first !== undefined) headers[name] = first.toString();
  }
  return {
    partition,
    offset: message.offset,
    key: message.key?.toString() ?? null,
    value: message.value,
    headers,
    timestamp: Number(message.timestamp),
  };
}

/**
 * Reads a topic from the beginning (in a throw-away group) until `done(messages)` holds or the
 * deadline passes. For tests and tooling that check what reached Kafka.
 */
export async function readTopic(
  kafka: Kafka,
  topic: string,
  done: (messages: readonly ReadMessage[]) => boolean,
  timeoutMs = 30_000,
): Promise<ReadMessage[]> {
  const messages: ReadMessage[] = [];
  const consumer = kafka.consumer({ groupId: uniqueName('reader'), maxWaitTimeInMs: 250 });
  await consumer.connect();
  try {
    await consumer.subscribe({ topic, fromBeginning: true });
    await consumer.run({
      eachBatch: async ({ batch }) => {
        for (const message of batch.messages) messages.push(toRead(batch.partition, message));
      },
    });
    await waitFor(() => done(messages), {
      timeoutMs,
      description: `the expected messages on ${topic} (have ${messages.length})`,
    });
    return messages;
  } finally {
    await consumer.disconnect();
  }
}
