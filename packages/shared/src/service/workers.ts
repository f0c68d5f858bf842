import type { FastifyInstance } from 'fastify';
import type { BaseConfig } from '../config.js';
import { ConsumerRunner, type ConsumerRunnerOptions } from '../kafka/consumer.js';
import type { Logger } from '../logger.js';
import { registerOutboxMetrics, registerRelayUp } from '../metrics/outbox.js';
import { OutboxRelay, type OutboxRelayOptions } from '../outbox/outbox.js';
import { trackConsumerLag } from './consumer-lag.js';
import { HealthProblem } from './health.js';
import type { PeriodicTask } from './periodic.js';

/** The retry cap of every consumer, from the base config (CONSUMER_RETRY_MAX_ATTEMPTS, _MS). */
export function retryCap(config: Pick<BaseConfig, 'CONSUMER_RETRY_MAX_ATTEMPTS' | 'CONSUMER_RETRY_MAX_MS'>): {
  maxAttempts: number;
  maxElapsedMs: number;
} {
  return { maxAttempts: config.CONSUMER_RETRY_MAX_ATTEMPTS, maxElapsedMs: config.CONSUMER_RETRY_MAX_MS };
}

/**
 * Runs a consumer inside a service: started when the app is ready, stopped when it closes (before
 * the Kafka client and the pool, which were registered earlier and so close later). On SIGTERM the
 * current chunk finishes or is abandoned uncommitted; it is redelivered to the next owner.
 * Readiness fails while the consumer is not a member of its group; liveness fails once kafkajs has
 * crashed it for good (a CRASH with `restart: false`), so the orchestrator restarts the process, or
 * once the brokers have refused its credentials for longer than KAFKA_AUTH_RETRY_WINDOW_MS (within
 * it the runner restarts the consumer itself: a rotation half done heals without a restart).
 */
export function registerConsumer(
  app: FastifyInstance,
  options: Omit<ConsumerRunnerOptions, 'kafka' | 'logger' | 'metrics'> & { logger?: Logger },
): ConsumerRunner {
  // The start-up check (kafka-plugin.ts) proves this group may read its topics and write their DLQs.
  if (app.hasDecorator('kafkaNeeds')) app.kafkaNeeds.consumes(options.groupId, options.topics);
  if (app.hasDecorator('kafka')) trackConsumerLag(app, options.groupId, options.topics);
  const authRetryWindowMs = app.hasDecorator('kafkaAuthRetryWindowMs') ? app.kafkaAuthRetryWindowMs : undefined;
  const fetchLimits = app.hasDecorator('kafkaFetchLimits') ? app.kafkaFetchLimits : undefined;
  const runner = new ConsumerRunner({
    ...(authRetryWindowMs === undefined ? {} : { authRetryWindowMs }),
    ...(fetchLimits === undefined ? {} : { fetchLimits }),
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
  // The checks' names are public (unauthenticated probes read them): a number, not the group. The
  // log says which group each number is, and each failure's detail names it.
  const check = `consumer-${[...app.readiness.keys()].filter((name) => name.startsWith('consumer-')).length + 1}`;
  app.log.info({ check, group: options.groupId }, 'consumer health checks registered');
  const group = `consumer group ${options.groupId}`;
  app.readiness.set(check, async () => {
    if (startError)
      throw new HealthProblem('start_failed', `${group} failed to start: ${(startError as Error).message}`);
    const dead = runner.liveness();
    if (dead) throw new HealthProblem('crashed', `${group}: ${dead}`);
    const refused = runner.credentialsRefused();
    if (refused) throw new HealthProblem('credentials_refused', `${group}: ${refused}`);
    if (!runner.joined) throw new HealthProblem('not_joined', `${group}: not a member (joining or rebalancing)`);
  });
  app.liveness.set(check, () => {
    const dead = runner.liveness();
    return dead === undefined ? undefined : `${group}: ${dead}`;
  });
  app.addHook('onClose', async () => {
    await runner.stop();
  });
  return runner;
}

/**
 * Runs the outbox relay of `schema` inside a service, with its backlog metrics; liveness fails when
 * its loop exited or stalled. Its connection holds a session advisory lock and LISTENs, so when the
 * app has a session URL (DATABASE_SESSION_URL: PostgreSQL itself while the pool goes through a
 * transaction-mode PgBouncer) it connects there instead of `databaseUrl`.
 */
export function registerOutboxRelay(
  app: FastifyInstance,
  options: Omit<OutboxRelayOptions, 'producer' | 'logger' | 'metrics'>,
): OutboxRelay {
  const relay = new OutboxRelay({
    ...options,
    databaseUrl: (app.hasDecorator('pgSessionUrl') ? app.pgSessionUrl : undefined) ?? options.databaseUrl,
    producer: app.producer,
    logger: app.log.child({ component: 'outbox-relay' }) as Logger,
    metrics: app.metrics,
  });
  registerOutboxMetrics(app.metrics, app.pg);
  let started = false;
  registerRelayUp(app.metrics, () => started && relay.liveness() === undefined);
  app.liveness.set('outbox-relay', () => relay.liveness());
  app.addHook('onReady', async () => {
    relay.start();
    started = true;
  });
  app.addHook('onClose', async () => {
    started = false;
    await relay.stop();
  });
  return relay;
}

/**
 * Runs a periodic task inside a service: started when the app is ready, stopped (its run in
 * progress awaited) when it closes; liveness fails when it stops turning.
 */
export function registerPeriodicTask(app: FastifyInstance, task: PeriodicTask): PeriodicTask {
  app.addHook('onReady', async () => task.start());
  app.addHook('onClose', async () => task.stop());
  watchPeriodicTask(app, task);
  return task;
}

/** Adds the liveness of a task its owner starts and stops (a reconciler, a sweeper). */
export function watchPeriodicTask(app: FastifyInstance, task: Pick<PeriodicTask, 'name' | 'liveness'>): void {
  app.liveness.set(`task:${task.name}`, () => task.liveness());
}
