import type { FastifyInstance } from 'fastify';
import { ConsumerRunner, type ConsumerRunnerOptions } from '../kafka/consumer.js';
import type { Logger } from '../logger.js';
import { OutboxRelay, registerOutboxMetrics, type OutboxRelayOptions } from '../outbox/outbox.js';

/**
 * Runs a consumer inside a service: started when the app is ready, stopped when it closes (before
 * the Kafka client and the pool, which were registered earlier and so close later). On SIGTERM the
 * current chunk finishes or is abandoned uncommitted; it is redelivered to the next owner.
 */
export function registerConsumer(
  app: FastifyInstance,
  options: Omit<ConsumerRunnerOptions, 'kafka' | 'logger' | 'metrics'> & { logger?: Logger },
): ConsumerRunner {
  const runner = new ConsumerRunner({
    ...options,
    kafka: app.kafka,
    logger: options.logger ?? (app.log.child({ consumer: options.groupId }) as Logger),
    metrics: app.metrics,
  });
  app.addHook('onReady', async () => {
    await runner.start();
  });
  app.addHook('onClose', async () => {
    await runner.stop();
  });
  return runner;
}

/** Runs the outbox relay of `schema` inside a service, with its backlog metrics. */
export function registerOutboxRelay(
  app: FastifyInstance,
  options: Omit<OutboxRelayOptions, 'producer' | 'logger' | 'metrics'>,
): OutboxRelay {
  const relay = new OutboxRelay({
    ...options,
    producer: app.producer,
    logger: app.log.child({ component: 'outbox-relay' }) as Logger,
    metrics: app.metrics,
  });
  registerOutboxMetrics(app.metrics, app.pg);
  app.addHook('onReady', async () => {
    relay.start();
  });
  app.addHook('onClose', async () => {
    await relay.stop();
  });
  return relay;
}
