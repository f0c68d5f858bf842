/**
 * A SCRAM password rotated broker first, and the broker restarted before the pods' mounted Secret
 * changed (issue #31; docs/operations.md, "Rotating Kafka credentials: which side first"). The
 * sender runs as a process on a secured broker of this spec's own (ADR 010's configuration; it is
 * restarted, so never the shared one), as its own principal with its generated ACLs and its password
 * in a file. After the restart its consumer reconnects and is refused. It must keep trying with the
 * file read again, say so (the alert's metric, readiness) while `/health/live` stays up, and resume
 * once the file holds the new password, FILE_DELAY_MS after the restart (the kubelet's refresh,
 * shortened): the same process, every request sent once, every outcome on outreach.send-recorded.v1.
 * In the same window: the sender's file emptied first (half a rotation) keeps the refused password
 * in hand and says so; a consumer whose file never changes is dead once its
 * KAFKA_AUTH_RETRY_WINDOW_MS has passed, not before; one stopped while it waits stops at once; and a
 * process started with the old password still exits 78.
 */
import { spawn, spawnSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdirSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { eventCodec, type SendRecorded, type SendRequested } from '@outreach/contracts';
import {
  applyKafkaAcls,
  ConsumerRunner,
  createKafka,
  createLogger,
  kafkaAcls,
  kafkaSecurityFromEnv,
} from '@outreach/shared';
import { freePort, readTopic, uniqueName, waitFor, type ReadMessage, type RunningProcess } from '@outreach/testkit';
import { afterAll, afterEach, beforeAll, describe, expect, inject, it } from 'vitest';
import {
  kafkaLibs,
  ownSecuredKafka,
  securedWanted,
  startKafka,
  stopKafka,
  type KafkaInstance,
} from '../../../scripts/infra.js';
import { aclsInEffect, superUserSecurity, type SecuredKafkaInfo } from '../../../scripts/lib/secured.js';
import { deliveriesByRecipient, senderTestEnv, sendRequested, type SenderTestEnv } from './harness.js';

const root = join(import.meta.dirname, '..', '..', '..');
const databaseUrl = inject('databaseUrl');
const hasJava = !spawnSync('java', ['-version']).error;
/** From the broker's restart with the new password to the file's update. Kubernetes: about a minute. */
const FILE_DELAY_MS = Number(process.env.ROTATION_FILE_DELAY_MS ?? 10_000);
/** The window of the consumer whose file never changes: shorter than FILE_DELAY_MS, so it ends first. */
const SHORT_WINDOW_MS = 3_000;
const logger = createLogger({ name: 'credential-rotation', level: process.env.TEST_LOG_LEVEL ?? 'silent' });

describe.skipIf(!securedWanted || !hasJava)('a SCRAM password rotated while the sender runs', () => {
  const dir = join(root, '.infra', 'faults', uniqueName('rotation'));
  const groupPrefix = `${uniqueName('g')}-`;
  const group = `${groupPrefix}sender`;
  let instance: KafkaInstance;
  let info: SecuredKafkaInfo;
  let t: SenderTestEnv;
  const processes: RunningProcess[] = [];

  beforeAll(async () => {
    mkdirSync(join(dir, 'secrets'), { recursive: true });
    ({ instance, info } = await ownSecuredKafka(join(dir, 'kafka')));
    await startKafka(instance);
    t = await senderTestEnv({ kafkaBrokers: info.brokers, databaseUrl, kafkaSecurity: superUserSecurity(info) });
    const admin = t.kafka.admin();
    await admin.connect();
    try {
      await applyKafkaAcls(admin, kafkaAcls({ topicPrefix: t.prefix, groupPrefix, roles: ['sender'] }));
    } finally {
      await admin.disconnect();
    }
    await aclsInEffect(info, ['sender'], { topicPrefix: t.prefix, groupPrefix });
  }, 180_000);

  afterEach((context) => {
    if (context.task.result?.state !== 'fail') return;
    for (const proc of processes) {
      console.error(`--- sender ${proc.child.pid} stdout (last 20):\n${proc.stdoutLines.slice(-20).join('\n')}`);
    }
  });

  afterAll(async () => {
    await t?.cleanup();
    if (instance) await stopKafka(instance).catch(() => undefined);
    rmSync(dir, { recursive: true, force: true });
  }, 120_000);

  /** Written whole and renamed into place, as the kubelet swaps a mounted Secret. */
  function secret(name: string, value: string): string {
    const path = join(dir, 'secrets', name);
    writeFileSync(`${path}.new`, `${value}\n`, { mode: 0o600 });
    renameSync(`${path}.new`, path);
    return path;
  }

  /** The sender's Kafka settings on the secured broker: SCRAM-SHA-512 as `sender`, the password in `passwordFile`. */
  function kafkaEnv(passwordFile: string): Record<string, string> {
    return {
      KAFKA_BROKERS: info.brokers,
      KAFKA_SSL: 'true',
      KAFKA_SSL_CA_FILE: info.caFile,
      KAFKA_SASL_MECHANISM: 'scram-sha-512',
      KAFKA_SASL_USERNAME: 'sender',
      KAFKA_SASL_PASSWORD_FILE: passwordFile,
      CONSUMER_GROUP: group,
    };
  }

  /** The broker side of the rotation, as kafka-configs.sh does it (test/int/java/ScramPassword.java). */
  async function changePassword(user: string, password: string): Promise<void> {
    const java = spawn(
      'java',
      [
        '-cp',
        `${kafkaLibs()}/*`,
        join(root, 'test', 'int', 'java', 'ScramPassword.java'),
        info.brokers,
        info.caFile,
        user,
      ],
      {
        env: { PATH: process.env.PATH, ADMIN_PASSWORD: info.passwords.admin, NEW_PASSWORD: password },
        stdio: ['ignore', 'pipe', 'pipe'],
      },
    );
    let output = '';
    java.stdout.on('data', (chunk: Buffer) => (output += chunk.toString()));
    java.stderr.on('data', (chunk: Buffer) => (output += chunk.toString()));
    const code = await new Promise<number | null>((resolve) => java.once('exit', resolve));
    expect(code, output).toBe(0);
  }

  async function status(port: number, path: string): Promise<number | undefined> {
    return (await fetch(`http://127.0.0.1:${port}${path}`).catch(() => undefined))?.status;
  }

  async function refusedGauge(port: number): Promise<number | undefined> {
    const text = await (await fetch(`http://127.0.0.1:${port}/metrics`)).text();
    const line = text
      .split('\n')
      .find((l) => l.startsWith('outreach_consumer_credentials_refused{') && l.includes(`group="${group}"`));
    return line === undefined ? undefined : Number(line.split(' ').at(-1));
  }

  function requests(campaignId: string, count: number): SendRequested[] {
    return Array.from({ length: count }, (_, i) =>
      sendRequested({ campaignId, candidateId: `${campaignId}-${i}`, email: `${campaignId}-${i}@example.com` }),
    );
  }

  it(
    'the consumer waits out a refused password and resumes in the same process once the file has the new one: ' +
      'every request sent once and recorded; a consumer whose file never changes dies after its window; a new start exits 78',
    { timeout: 240_000 },
    async () => {
      const passwordFile = secret('sender.password', info.passwords.sender ?? '');
      const port = await freePort();
      const sender = t.startProcess({ ...kafkaEnv(passwordFile), HTTP_PORT: String(port) });
      processes.push(sender);
      await waitFor(
        async () => {
          if (sender.child.exitCode !== null)
            throw new Error(`exited ${sender.child.exitCode}: ${sender.stderrLines.join('\n')}`);
          return (await status(port, '/health/ready')) === 200;
        },
        { timeoutMs: 60_000, intervalMs: 250, description: 'the sender on the secured broker to be ready' },
      );

      // Consumers in this process on the same credentials, whose file is never updated: one with a
      // short window (dead after it), one stopped while it waits (a SIGTERM mid-rotation).
      const staleFile = secret('stale.password', info.passwords.sender ?? '');
      const staleConsumer = async (name: string, authRetryWindowMs: number) => {
        const runner = new ConsumerRunner({
          kafka: createKafka({
            brokers: [info.brokers],
            clientId: `rotation-${name}`,
            logger,
            security: kafkaSecurityFromEnv(kafkaEnv(staleFile)),
          }),
          groupId: `${group}-${name}`,
          topics: [t.topic('sendRequested')],
          logger,
          handler: async () => undefined,
          authRetryWindowMs,
        });
        await runner.start();
        await waitFor(() => runner.joined, { timeoutMs: 30_000, description: `the ${name} consumer to join` });
        return runner;
      };
      const [witness, stopped] = await Promise.all([
        staleConsumer('witness', SHORT_WINDOW_MS),
        staleConsumer('stopped', 10 * 60_000),
      ]);
      // When it is first seen refused, and first seen dead, sampled every 100 ms from here on.
      const seen: { refused?: number; dead?: number } = {};
      const sampler = setInterval(() => {
        if (seen.refused === undefined && witness.credentialsRefused()) seen.refused = Date.now();
        if (seen.dead === undefined && witness.liveness()) seen.dead = Date.now();
      }, 100);

      const before = requests('before', 15);
      await t.publishRequests(before);
      await waitFor(() => t.sink.messages.length >= before.length, {
        timeoutMs: 30_000,
        description: 'the requests before the rotation delivered',
      });

      // The broker first: its new password, then a restart, so every connection logs in again.
      const newPassword = randomBytes(18).toString('base64url');
      await changePassword('sender', newPassword);
      await stopKafka(instance);
      await startKafka(instance);
      const restartedAt = Date.now();
      const during = requests('during', 15);
      await t.publishRequests(during, { fresh: true });

      // Refused: the alert's gauge is 1, readiness says why, and liveness holds.
      await waitFor(async () => (await refusedGauge(port)) === 1, {
        timeoutMs: 60_000,
        intervalMs: 250,
        description: "the sender's consumer to be refused and report it",
      });
      const refusedSeenAt = Date.now();
      expect(await status(port, '/health/live')).toBe(200);
      expect(await status(port, '/health/ready')).toBe(503);
      expect(sender.stdoutLines.join('\n')).toContain('"alert":"kafka_credentials_refused"');
      for (const password of [newPassword, info.passwords.sender ?? '']) {
        expect(sender.stdoutLines.join('\n')).not.toContain(password);
      }

      // A SIGTERM while the consumer waits between attempts: it stops at once, and is not reported dead.
      await waitFor(() => stopped.credentialsRefused() !== undefined, {
        timeoutMs: 60_000,
        description: 'the consumer to be stopped to be refused',
      });
      const stopStarted = Date.now();
      await stopped.stop();
      expect(Date.now() - stopStarted).toBeLessThan(5_000);
      expect(stopped.liveness()).toBeUndefined();

      // Half a rotation on the sender's side: the file emptied (a Secret key not filled in yet). The
      // next attempt keeps the refused password in hand, says so, and the attempts go on.
      secret('sender.password', '');
      await waitFor(
        () => sender.stdoutLines.some((l) => l.includes('KAFKA_SASL_PASSWORD_FILE could not be read again')),
        { timeoutMs: 30_000, intervalMs: 100, description: 'an attempt to read the emptied file' },
      );

      // A process started now with the file's old password: exit 78 at start, as before.
      const stalePort = await freePort();
      const fresh = t.startProcess({ ...kafkaEnv(staleFile), HTTP_PORT: String(stalePort) });
      processes.push(fresh);

      // Until the kubelet would have refreshed the file: the sender stays live, and nothing of the
      // requests published meanwhile goes out with the refused credentials.
      const live: Array<number | undefined> = [];
      await waitFor(
        async () => {
          live.push(await status(port, '/health/live'));
          return Date.now() >= restartedAt + FILE_DELAY_MS;
        },
        { timeoutMs: FILE_DELAY_MS + 5_000, intervalMs: 250, description: 'the file delay to pass' },
      );
      expect(live.length).toBeGreaterThan(0);
      expect(new Set(live)).toEqual(new Set([200]));
      expect(t.sink.messages).toHaveLength(before.length);
      expect(sender.child.exitCode).toBeNull();
      secret('sender.password', newPassword);

      const exit = await waitFor(() => fresh.child.exitCode ?? undefined, {
        timeoutMs: 45_000,
        intervalMs: 100,
        description: 'the start with the old password to exit',
      });
      expect(exit, fresh.stderrLines.join('\n')).toBe(78);
      expect(fresh.stderrLines.join('\n')).toMatch(
        /sender: kafka: the brokers refused our credentials \(SASL_SSL SCRAM-SHA-512 as "sender"\)/,
      );

      // Resumed in the same process: every request sent once, every outcome recorded on the topic.
      const all = [...before, ...during];
      await waitFor(() => t.sink.messages.length >= all.length, {
        timeoutMs: 60_000,
        intervalMs: 250,
        description: `all ${all.length} requests delivered after the file changed`,
      });
      const duplicated = [...deliveriesByRecipient(t.sink)].filter(([, n]) => n > 1);
      expect(duplicated).toEqual([]);
      expect(t.sink.messages).toHaveLength(all.length);
      const recordedSends = (messages: readonly ReadMessage[]) =>
        new Set(
          messages
            .map((m) => eventCodec.decode(m.value as Buffer) as SendRecorded)
            .filter((e) => e.outcome === 'sent')
            .map((e) => e.sendId),
        );
      const recorded = await readTopic(
        t.kafka,
        t.topic('sendRecorded'),
        (messages) => recordedSends(messages).size >= all.length,
        60_000,
      );
      expect([...recordedSends(recorded)].sort()).toEqual(all.map((r) => r.sendId).sort());
      const sent = await t.query<{ n: number }>(`SELECT count(*)::int AS n FROM sends WHERE status = 'sent'`);
      expect(sent[0]?.n).toBe(all.length);
      await waitFor(async () => (await status(port, '/health/ready')) === 200, {
        timeoutMs: 30_000,
        intervalMs: 250,
        description: 'the sender ready again',
      });
      expect(await refusedGauge(port)).toBe(0);
      expect(sender.child.exitCode).toBeNull();
      expect(sender.stdoutLines.join('\n')).toContain('the brokers accept our credentials again');
      for (const password of [newPassword, info.passwords.sender ?? '']) {
        expect(sender.stdoutLines.join('\n')).not.toContain(password);
      }

      // The witness, never given the new password: refused, live through its window, then dead.
      await waitFor(() => seen.dead !== undefined, {
        timeoutMs: 30_000,
        intervalMs: 100,
        description: 'the witness to die',
      });
      clearInterval(sampler);
      expect(seen.refused, 'the witness was seen refused, and alive, before it died').toBeDefined();
      expect((seen.dead ?? 0) - (seen.refused ?? 0)).toBeGreaterThanOrEqual(SHORT_WINDOW_MS - 500);
      expect(witness.liveness()).toMatch(
        /the brokers refused our credentials for \d+ s \(KAFKA_AUTH_RETRY_WINDOW_MS 3 s\)/,
      );
      expect(refusedSeenAt).toBeGreaterThanOrEqual(restartedAt);
      await witness.stop();
    },
  );
});
