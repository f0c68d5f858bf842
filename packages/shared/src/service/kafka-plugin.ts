import fp from 'fastify-plugin';
import type { Admin, Kafka } from 'kafkajs';
import { createKafka } from '../kafka/client.js';
import { EventProducer } from '../kafka/producer.js';
import type { Logger } from '../logger.js';

declare module 'fastify' {
  interface FastifyInstance {
    readonly kafka: Kafka;
    readonly producer: EventProducer;
  }
}

export interface KafkaPluginOptions {
  readonly brokers: readonly string[];
  readonly clientId: string;
}

/**
 * Decorates the app with the Kafka client and one idempotent producer, adds a readiness check (a
 * metadata request), and disconnects on close, after the consumers and relays that use them.
 */
export const kafkaPlugin = fp<KafkaPluginOptions>(
  async (app, options) => {
    const kafka = createKafka({ brokers: options.brokers, clientId: options.clientId, logger: app.log as Logger });
    const producer = new EventProducer(kafka, { logger: app.log as Logger });
    let admin: Admin | undefined;
    app.decorate('kafka', kafka);
    app.decorate('producer', producer);
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
