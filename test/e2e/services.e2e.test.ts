/**
 * Each service as the process Kubernetes would run: built output, environment config, JSON logs,
 * health routes, and a clean exit on SIGTERM.
 */
import { join } from 'node:path';
import {
  freePort,
  startProcess,
  TEST_EMAIL_HASH_ENV,
  TEST_IDENTIFIER_KEY_ENV,
  waitFor,
  wireFormatEnv,
  wireFormatFromEnv,
  type RunningProcess,
} from '@outreach/testkit';
import { createKafka, ensureTopics } from '@outreach/shared';
import { afterEach, beforeAll, describe, expect, inject, it } from 'vitest';

const services = ['planner', 'sender', 'experiment', 'liveness'] as const;
const entry = (service: string) => join(import.meta.dirname, '..', '..', 'services', service, 'dist', 'server.js');
const running: RunningProcess[] = [];
/** The run's wire format (ADR 011): the Confluent one, the services' default, whenever a registry runs. */
let wireFormat: Record<string, string> = {};
const SENDER_IDENTITY = {
  MAIL_FROM: 'Recruiting <recruiting@mail.acme-corp.com>',
  MESSAGE_ID_DOMAIN: 'mail.acme-corp.com',
  UNSUBSCRIBE_MAILTO: 'unsubscribe@mail.acme-corp.com',
  UNSUBSCRIBE_URL: 'https://outreach.acme-corp.com/v1/unsubscribe',
};

beforeAll(async () => {
  const admin = createKafka({ brokers: inject('kafkaBrokers').split(','), clientId: 'e2e' }).admin();
  await admin.connect();
  await ensureTopics(admin);
  await admin.disconnect();
  const { format, registryUrl } = wireFormatFromEnv();
  wireFormat = await wireFormatEnv('', format, registryUrl);
});

afterEach(async () => {
  await Promise.all(running.splice(0).map((p) => p.stop('SIGKILL')));
});

describe.each(services)('%s process', (service) => {
  it('starts, logs JSON with pino, serves /health/live and /health/ready, and exits 0 on SIGTERM', async () => {
    const port = await freePort();
    const proc = startProcess(entry(service), {
      PATH: process.env.PATH,
      KAFKA_BROKERS: inject('kafkaBrokers'),
      DATABASE_URL: inject('databaseUrl'),
      HTTP_PORT: String(port),
      HTTP_HOST: '127.0.0.1',
      // Each run gets its own group, so a previous run's members never delay the join.
      CONSUMER_GROUP: `e2e-${service}-${Date.now()}`,
      ...TEST_EMAIL_HASH_ENV,
      ...TEST_IDENTIFIER_KEY_ENV,
      ...wireFormat,
      // In production (the default NODE_ENV) the sender starts only with an identity of its own.
      ...(service === 'sender' ? SENDER_IDENTITY : {}),
    });
    running.push(proc);

    const live = await waitFor(
      async () => {
        const response = await fetch(`http://127.0.0.1:${port}/health/live`);
        return response.ok ? ((await response.json()) as { status: string; service: string }) : undefined;
      },
      { timeoutMs: 20_000, description: `${service} /health/live` },
    );
    expect(live).toEqual({ status: 'ok', service });

    const ready = await waitFor(
      async () => {
        const response = await fetch(`http://127.0.0.1:${port}/health/ready`);
        return response.ok ? response : undefined;
      },
      { timeoutMs: 30_000, description: `${service} /health/ready` },
    );
    expect(await ready.json()).toMatchObject({ status: 'ready', checks: { postgres: 'ok', kafka: 'ok' } });

    const metrics = await fetch(`http://127.0.0.1:${port}/metrics`);
    expect(await metrics.text()).toMatch(/process_cpu_seconds_total/);

    const started = proc.stdoutLines.map((line) => JSON.parse(line) as Record<string, unknown>);
    expect(started).toContainEqual(expect.objectContaining({ level: 'info', service, msg: `${service} started` }));

    expect(await proc.stop('SIGTERM')).toBe(0);
    expect(proc.stdoutLines.some((line) => line.includes('"shutting down"'))).toBe(true);
  });

  it('refuses to start without its configuration and names the missing variable', async () => {
    const proc = startProcess(entry(service), { PATH: process.env.PATH, DATABASE_URL: inject('databaseUrl') });
    running.push(proc);
    expect(await proc.exited).toBe(78);
    expect(proc.stderrLines.join('\n')).toMatch(/KAFKA_BROKERS/);
  });
});

describe('public topics in the Confluent wire format, the default (ADR 011)', () => {
  it.each(services)(
    '%s refuses to start without a schema registry, naming SCHEMA_REGISTRY_URL and the opt-out',
    async (service) => {
      const proc = startProcess(entry(service), {
        PATH: process.env.PATH,
        KAFKA_BROKERS: inject('kafkaBrokers'),
        DATABASE_URL: inject('databaseUrl'),
        HTTP_PORT: String(await freePort()),
        ...TEST_EMAIL_HASH_ENV,
        ...TEST_IDENTIFIER_KEY_ENV,
        ...(service === 'sender' ? SENDER_IDENTITY : {}),
      });
      running.push(proc);
      expect(await proc.exited).toBe(78);
      const stderr = proc.stderrLines.join('\n');
      expect(stderr).toMatch(/SCHEMA_REGISTRY_URL/);
      expect(stderr).toMatch(/EVENT_WIRE_FORMAT=single-object/);
    },
  );
});

describe('sender process in production', () => {
  it('refuses to start with a placeholder identity, naming the variable (#16)', async () => {
    const proc = startProcess(entry('sender'), {
      PATH: process.env.PATH,
      KAFKA_BROKERS: inject('kafkaBrokers'),
      DATABASE_URL: inject('databaseUrl'),
      HTTP_PORT: String(await freePort()),
      ...TEST_EMAIL_HASH_ENV,
      ...TEST_IDENTIFIER_KEY_ENV,
      ...wireFormat,
      ...SENDER_IDENTITY,
      MAIL_FROM: 'Outreach <outreach@example.com>',
    });
    running.push(proc);
    expect(await proc.exited).toBe(78);
    expect(proc.stderrLines.join('\n')).toMatch(/MAIL_FROM must be set to your own domain/);
  });
});
