import type { Admin } from 'kafkajs';
import type { FastifyInstance } from 'fastify';
import type { Registry } from 'prom-client';
import { registerConsumerLagMetrics, type ConsumerLag } from '../metrics/consumer-lag.js';
import type { Logger } from '../logger.js';

/** One sampler per registry (an app's plugins share theirs), whichever plugin registers a consumer first. */
const samplers = new WeakMap<Registry, ConsumerLag>();

/**
 * Reports the lag of `groupId` on `topics` in the app's metrics. The admin client connects on the
 * first scrape (an app nobody scrapes opens no connection) and disconnects when the app closes; its
 * reads need only what the consumer's ACLs already grant (Describe on the group and the topics).
 */
export function trackConsumerLag(app: FastifyInstance, groupId: string, topics: readonly string[]): void {
  let lag = samplers.get(app.metrics);
  if (!lag) {
    let admin: Admin | undefined;
    let connecting: Promise<Admin> | undefined;
    const connect = (): Promise<Admin> =>
      (connecting ??= (async () => {
        admin = app.kafka.admin({ retry: { retries: 0 } });
        await admin.connect();
        return admin;
      })().catch((error: unknown) => {
        connecting = undefined;
        throw error;
      }));
    const log = app.log as Logger;
    lag = registerConsumerLagMetrics(app.metrics, {
      admin: connect,
      onError: (error) => log.warn({ err: error }, 'consumer lag: sample failed'),
    });
    samplers.set(app.metrics, lag);
    app.addHook('onClose', async () => {
      await admin?.disconnect().catch(() => undefined);
    });
  }
  lag.track(groupId, topics);
}
