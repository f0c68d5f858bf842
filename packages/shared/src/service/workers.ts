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
  // Joining can take a whole session timeout (a crashed predecessor is still a member), so the app
  // does not wait for it: readiness reports it, and a start that fails for good crashes the
  // process (close-with-grace turns that into a graceful exit) so the orchestrator restarts it.
  let startError: unknown;
  app.addHook('onReady', async () => {
    runner.start().catch((error: unknown) => {
      startError = error;
      app.log.fatal({ err: error, group: options.groupId }, 'consumer could not start');
      setImmediate(() => {
        throw error;
      });
    });
  });
  app.readiness.set(`consumer:${options.groupId}`, async () => {
    if (startError) throw new Error(`failed to start: ${(startError as Error).message}`);
    if (!runner.joined) throw new Error('joining its group');
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
