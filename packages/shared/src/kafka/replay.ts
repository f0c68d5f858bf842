/**
 * Replays topics from the beginning through a handler, in a throw-away consumer group, until every
 * partition reaches the end offsets read when the replay began. The basis of every "rebuild the
 * projection from the log and compare" command (docs/design.md, guarantee 5).
 */
import type { Kafka } from 'kafkajs';
import type { Logger } from '../logger.js';
import { waitFor } from '../wait.js';
import { ConsumerRunner, type EventBatchHandler } from './consumer.js';

export async function replayFromBeginning(options: {
  readonly kafka: Kafka;
  readonly topics: readonly string[];
  readonly groupId: string;
  readonly handler: EventBatchHandler;
  readonly logger: Logger;
  readonly timeoutMs?: number;
}): Promise<{ messages: number }> {
  const admin = options.kafka.admin();
  await admin.connect();
  try {
    const targets = new Map<string, number>();
    for (const topic of options.topics) {
      for (const p of await admin.fetchTopicOffsets(topic)) targets.set(`${topic}/${p.partition}`, Number(p.high));
    }
    let messages = 0;
    const runner = new ConsumerRunner({
      kafka: options.kafka,
      groupId: options.groupId,
      topics: options.topics,
      logger: options.logger,
      fromBeginning: true,
      handler: async (events, context) => {
        const result = await options.handler(events, context);
        messages += events.length;
        return result;
      },
    });
    await runner.start();
    try {
      // Committed offsets count dead-lettered messages and control records too.
      await waitFor(
        async () => {
          const committed = await admin.fetchOffsets({ groupId: options.groupId, topics: [...options.topics] });
          return [...targets].every(([key, high]) => {
            const [topic, partition] = [
              key.slice(0, key.lastIndexOf('/')),
              Number(key.slice(key.lastIndexOf('/') + 1)),
            ];
            const offset = Number(
              committed.find((c) => c.topic === topic)?.partitions.find((p) => p.partition === partition)?.offset ?? -1,
            );
            return high === 0 || offset >= high;
          });
        },
        {
          timeoutMs: options.timeoutMs ?? 120_000,
          intervalMs: 250,
          description: `the replay of ${options.topics.join(', ')} to catch up`,
        },
      );
    } finally {
      await runner.stop();
    }
    return { messages };
  } finally {
    await admin.disconnect();
  }
}
