/**
 * `npm run demo`: the main job on a fresh machine. Brings up (or reuses) the local Kafka and
 * PostgreSQL, starts the four services as separate processes, and keeps them running until Ctrl-C.
 *
 * The workload (campaigns, an A/B test, follow-ups, a mid-run sender SIGKILL) arrives with the
 * services that process it; until then this starts the stack and shows each service's health.
 * DEMO_EXIT_WHEN_READY=1 stops everything once all services report ready (used by a smoke test).
 */
import { join } from 'node:path';
import { createKafka, ensureTopics } from '@outreach/shared';
import { startProcess, waitFor, type RunningProcess } from '@outreach/shared/testing';
import { up } from './infra.js';

const root = join(import.meta.dirname, '..');
const services = [
  { name: 'planner', port: 8081 },
  { name: 'sender', port: 8082 },
  { name: 'experiment', port: 8083 },
  { name: 'liveness', port: 8084 },
] as const;

function say(message: string): void {
  process.stdout.write(`[demo] ${message}\n`);
}

async function main(): Promise<number> {
  const state = await up();
  say(`kafka ${state.kafkaBrokers} (${state.kafka.source}), postgres ${state.postgres.source}`);
  const admin = createKafka({ brokers: state.kafkaBrokers.split(','), clientId: 'demo' }).admin();
  await admin.connect();
  const topics = await ensureTopics(admin);
  await admin.disconnect();
  say(`topics: ${topics.created.length} created, ${topics.unchanged.length + topics.reconfigured.length} present`);

  const running: Array<{ name: string; port: number; proc: RunningProcess }> = [];
  const stopAll = async () => {
    await Promise.all(running.map(({ proc }) => proc.stop('SIGTERM')));
  };

  for (const service of services) {
    const portBase = Number(process.env.DEMO_PORT_BASE ?? 8080) - 8080;
    const port = service.port + portBase;
    const proc = startProcess(join(root, 'services', service.name, 'dist', 'server.js'), {
      ...process.env,
      KAFKA_BROKERS: state.kafkaBrokers,
      DATABASE_URL: state.databaseUrl,
      HTTP_PORT: String(port),
      HTTP_HOST: '127.0.0.1',
      LOG_LEVEL: process.env.LOG_LEVEL ?? 'info',
    });
    running.push({ name: service.name, port, proc });
  }

  try {
    for (const { name, port, proc } of running) {
      await waitFor(
        async () => {
          if (proc.child.exitCode !== null) throw new Error(`${name} exited: ${proc.stderrLines.join('\n')}`);
          return (await fetch(`http://127.0.0.1:${port}/health/ready`)).ok;
        },
        { timeoutMs: 30_000, description: `${name} to report ready` },
      );
      say(`${name.padEnd(10)} ready  http://127.0.0.1:${port}/health/ready`);
    }
  } catch (error) {
    await stopAll();
    throw error;
  }

  if (process.env.DEMO_EXIT_WHEN_READY === '1') {
    await stopAll();
    say('all services were ready; stopped them (DEMO_EXIT_WHEN_READY=1)');
    return 0;
  }

  say('the stack is running. Ctrl-C stops the services; `npm run infra:down` stops Kafka too.');
  await new Promise<void>((resolve) => {
    process.once('SIGINT', resolve);
    process.once('SIGTERM', resolve);
  });
  say('stopping services ...');
  await stopAll();
  return 0;
}

main().then(
  (code) => process.exit(code),
  (error: unknown) => {
    process.stderr.write(`[demo] ${error instanceof Error ? error.message : String(error)}\n`);
    process.exit(1);
  },
);
