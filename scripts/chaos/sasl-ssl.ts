/**
 * The platform on the secured broker (secured-kafka.ts): the four services as processes and the load
 * driver over SASL_SSL, each with its own SCRAM principal and only the generated ACLs. The fault: the
 * sender is SIGKILLed once mid-run; the new process logs in again, passes its start-up check and takes
 * over the sends in flight. The same judge as everywhere.
 */
import { services } from '../lib/stack.js';
import { CONCURRENCY } from './common.js';
import type { Scenario } from './scenario.js';

export const saslSsl: Scenario = {
  name: 'sasl-ssl-sender-sigkill',
  fault:
    'the planner, sender, experiment and liveness services and the load driver talk to the secured broker over SASL_SSL (SCRAM-SHA-512, each as its own principal with the generated ACLs); the sender is SIGKILLed once at a random point and restarted',
  secured: true,
  sinkDelayMs: 10,
  kills: 1,
  async load(run) {
    await Promise.all(services.map((service) => run.stack.start(service)));
    await run.publish(run.requests);
  },
  async inject(run) {
    const point = 0.2 + Math.random() * 0.5;
    await run.progress(point);
    await run.stack.stop('sender', 'SIGKILL');
    await run.stack.start('sender');
    run.note(`kill at ${Math.round(point * 100)}% of deliveries`);
    return CONCURRENCY;
  },
};
