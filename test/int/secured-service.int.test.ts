/**
 * A whole service as a process on the secured stack: the experiment service with SCRAM over TLS to
 * the secured broker (its own principal, the ACLs generated for its role) and verify-full TLS to
 * PostgreSQL as its runtime role (password from a file, no DDL, migrations already run by the
 * migrator). It becomes ready. Then each way a secured start can go wrong makes the process exit
 * at start, within seconds, with one line naming the cause: a wrong Kafka password, an untrusted
 * Kafka CA, a missing ACL, an untrusted PostgreSQL CA, a wrong PostgreSQL password, migrating as the
 * runtime role, and a setting that would send a password in clear. `topics:ensure` does the same.
 */
import { spawnSync } from 'node:child_process';
import { join } from 'node:path';
import { declaredTopics } from '@outreach/shared';
import { freePort, startProcess, waitFor, type RunningProcess } from '@outreach/testkit';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import {
  migrateService,
  securedDatabaseFixture,
  securedKafkaFixture,
  type SecuredDatabaseFixture,
  type SecuredKafkaFixture,
} from './secured-fixtures.js';

const infra = inject('securedInfra');
const root = join(import.meta.dirname, '..', '..');
const entry = join(root, 'services', 'experiment', 'src', 'server.ts');
const tsx = ['--conditions=source', '--import', join(root, 'node_modules', 'tsx', 'dist', 'loader.mjs')];

describe.skipIf(!infra)('a service on the secured stack', () => {
  let kafka: SecuredKafkaFixture;
  let db: SecuredDatabaseFixture;
  const processes: RunningProcess[] = [];

  beforeAll(async () => {
    const secured = infra as NonNullable<typeof infra>;
    [kafka, db] = await Promise.all([
      securedKafkaFixture(secured, ['experiment', 'topics-admin']),
      securedDatabaseFixture(secured, ['experiment']),
    ]);
    await migrateService(db, 'experiment');
  });
  afterAll(async () => {
    await Promise.all(processes.map((p) => p.stop('SIGKILL').catch(() => undefined)));
    await kafka?.cleanup();
    await db?.cleanup();
  });

  /** The experiment service's environment on the secured stack; `overrides` break one thing. */
  async function start(overrides: Record<string, string> = {}, principal = 'experiment') {
    const role = db.roles.experiment as string;
    const port = await freePort();
    const url = db.url(role).replace(/:[^:@/]+@/, '@');
    const proc = startProcess(
      entry,
      {
        PATH: process.env.PATH,
        ...kafka.env(principal, 'scram-sha-512'),
        DATABASE_URL: url,
        DATABASE_PASSWORD_FILE: kafka.file(`${role}.pg`, `${db.passwords[role]}\n`),
        DATABASE_SCHEMA: 'experiment',
        MIGRATE_ON_START: 'false',
        TOPIC_PREFIX: kafka.topicPrefix,
        CONSUMER_GROUP: `${kafka.groupPrefix}experiment`,
        HTTP_HOST: '127.0.0.1',
        HTTP_PORT: String(port),
        LOG_LEVEL: 'info',
        FASTIFY_AUTOLOAD_TYPESCRIPT: '1',
        KAFKA_STARTUP_TIMEOUT_MS: '60000',
        // The wire format is not what this file tests, and the secured stack has no registry of its own.
        EVENT_WIRE_FORMAT: 'single-object',
        ...overrides,
      },
      [],
      tsx,
    );
    processes.push(proc);
    return { proc, port };
  }

  /** Exits on its own, soon, with `code`, and says `message` on stderr. */
  async function exitsWith(proc: RunningProcess, code: number, message: RegExp) {
    const started = Date.now();
    const exit = await waitFor(() => proc.child.exitCode ?? undefined, {
      timeoutMs: 45_000,
      intervalMs: 100,
      description: 'the service to exit at start',
    }).catch(() => 'still running');
    expect(exit, proc.stderrLines.join('\n')).toBe(code);
    expect(proc.stderrLines.join('\n')).toMatch(message);
    return Date.now() - started;
  }

  it('starts and becomes ready: its consumer joined under its ACLs, its pool connected over verify-full TLS', async () => {
    const { proc, port } = await start();
    await waitFor(
      async () => {
        if (proc.child.exitCode !== null)
          throw new Error(`exited ${proc.child.exitCode}: ${proc.stderrLines.join('\n')}`);
        const response = await fetch(`http://127.0.0.1:${port}/health/ready`).catch(() => undefined);
        return response?.status === 200;
      },
      { timeoutMs: 60_000, intervalMs: 250, description: 'the secured experiment service to be ready' },
    );
    await proc.stop('SIGTERM');
  });

  describe.concurrent('exits at start, naming the cause', () => {
    it('a wrong Kafka password', async () => {
      const { proc } = await start({ KAFKA_SASL_PASSWORD_FILE: kafka.file('wrong-kafka', 'not-the-password\n') });
      await exitsWith(
        proc,
        78,
        /experiment: kafka: the brokers refused our credentials \(SASL_SSL SCRAM-SHA-512 as "experiment"\)/,
      );
      expect(proc.stderrLines.join('\n')).not.toContain('not-the-password');
    });

    it('an untrusted Kafka CA', async () => {
      const { proc } = await start({ KAFKA_SSL_CA_FILE: infra?.kafka.untrustedCaFile ?? '' });
      await exitsWith(proc, 78, /experiment: kafka: the broker's certificate is not signed by a CA we trust/);
    });

    it('a missing ACL (the publisher principal has none of the experiment role)', async () => {
      const { proc } = await start({}, 'publisher');
      await exitsWith(
        proc,
        78,
        new RegExp(
          `experiment: kafka: principal "publisher" .* is not allowed: Read on topic ${kafka.topicPrefix.replaceAll('.', '\\.')}outreach\\.send-recorded\\.v1; .*Grant role experiment's ACLs`,
        ),
      );
    });

    it('an untrusted PostgreSQL CA', async () => {
      const role = db.roles.experiment as string;
      const url = db.url(role, { ca: infra?.postgres.untrustedCaFile ?? '' }).replace(/:[^:@/]+@/, '@');
      const { proc } = await start({ DATABASE_URL: url });
      await exitsWith(proc, 78, /experiment: postgres: the server's certificate is not trusted \(\w+\)/);
    });

    it('a wrong PostgreSQL password', async () => {
      const { proc } = await start({ DATABASE_PASSWORD_FILE: kafka.file('wrong-pg', 'nope\n') });
      await exitsWith(
        proc,
        78,
        /experiment: postgres: the server refused us \(28P01\): password authentication failed/,
      );
    });

    it('migrating at start as the runtime role, which has no DDL', async () => {
      const { proc } = await start({ MIGRATE_ON_START: 'true' });
      await exitsWith(
        proc,
        78,
        /experiment: postgres: permission denied \(42501\): .*\(while migrating; with a runtime role, set MIGRATE_ON_START=false and migrate as the migrator\)/,
      );
    });

    it('PLAIN without TLS (the password would travel in clear)', async () => {
      const { proc } = await start({ KAFKA_SSL: 'false', KAFKA_SSL_CA_FILE: '', KAFKA_SASL_MECHANISM: 'plain' });
      await exitsWith(proc, 78, /KAFKA_SASL_MECHANISM=plain sends the secret in clear; set KAFKA_SSL=true/);
    });

    it('topics:ensure with a wrong password, and as topics-admin with the right one', () => {
      const run = (env: Record<string, string>) =>
        spawnSync(process.execPath, [...tsx, 'packages/ops/src/cli/topics.ts'], {
          cwd: root,
          env: { PATH: process.env.PATH, TOPIC_PREFIX: kafka.topicPrefix, TOPIC_PARTITIONS: '1', ...env },
          encoding: 'utf8',
          timeout: 60_000,
        });
      const refused = run(
        kafka.env('topics-admin', 'scram-sha-256', { KAFKA_SASL_PASSWORD_FILE: kafka.file('wrong-topics', 'x\n') }),
      );
      expect(refused.status, refused.stderr).toBe(78);
      expect(refused.stderr).toMatch(
        /topics:ensure: kafka: the brokers refused our credentials \(SASL_SSL SCRAM-SHA-256 as "topics-admin"\)/,
      );
      const allowed = run(kafka.env('topics-admin', 'scram-sha-256'));
      expect(allowed.status, allowed.stderr).toBe(0);
      expect(allowed.stdout).toContain(`topics: 0 created, 0 reconfigured, ${declaredTopics().length} unchanged`);
    });
  });
});
