/**
 * The image as built from the Dockerfile (test/container/global-setup.ts), and the platform run from
 * it against the local Kafka, PostgreSQL and schema registry, as Kubernetes would run it:
 *   - what it holds: production dependencies only; no test kit, tests, sources or secrets (the build's
 *     CA included); its size and layers within budget; uid 10001; the usage as its default command;
 *   - the Jobs' commands (schemas:register, topics:ensure, migrate) from it, each a container;
 *   - the four services from it, non-root, on a read-only root filesystem with only /tmp writable,
 *     each ready by the image's own HEALTHCHECK;
 *   - a demo-shaped workload through their public ingress (the topic and the planner's HTTP
 *     endpoint) with the sender's container SIGKILLed midway and SIGTERMed later, each started again:
 *     0 duplicates at the SMTP sink and every request accounted for;
 *   - SIGTERM drains every service within the compose and Kubernetes grace periods.
 * The run has its own database (the Jobs migrate the default schemas, as in production), its own
 * topic prefix and registry subjects, and leaves none of them behind.
 */
import { createHash, randomUUID } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { spawnSync } from 'node:child_process';
import {
  createKafka,
  EventProducer,
  listTopicsSettled,
  registrySubjects,
  SchemaRegistryClient,
  topicName,
} from '@outreach/shared';
import { normalizeCandidateKey, sendIdFor } from '@outreach/contracts';
import { freePort, SmtpSink, waitFor, type DeliveredMessage } from '@outreach/testkit';
import pg from 'pg';
import { parse as parseYaml } from 'yaml';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { buildCaFile, dockerfileBaseImage, IMAGE, Podman } from '../../scripts/lib/container.js';
import { root } from '../../scripts/lib/paths.js';
import {
  BOUNCING_ADDRESS,
  DEMO_EXPERIMENT,
  demoWorkload,
  SUPPRESSED_ADDRESS,
} from '../../scripts/lib/demo-workload.js';
import { ingressBody, services, Stack, type Service } from '../../scripts/lib/stack.js';
import { judge, TERMINAL } from '../../scripts/chaos/checks.js';
import { CONCURRENCY, FAULT_SENDER_SETTINGS } from '../../scripts/chaos/common.js';
import { lookupSettings } from '../../scripts/chaos/run-scenario.js';
import { SentLog } from '../../scripts/chaos/sent-log.js';
import { ContainerLauncher, HARDENED } from './launcher.js';

const podman = Podman.get();
const commands = JSON.parse(readFileSync(join(root, 'deploy', 'docker', 'commands.json'), 'utf8')) as Record<
  string,
  unknown
>;
/** What the image adds to its base, at most: measured 101 MB (node_modules 97 MB) and 23 layers. */
const BUDGET = { addedMegabytes: 125, addedLayers: 30 };

/** The shortest grace a platform gives a container after SIGTERM: compose's, or Kubernetes' minus preStop. */
function gracePeriodSeconds(): number {
  const compose = parseYaml(readFileSync(join(root, 'docker-compose.yml'), 'utf8'), { merge: true }) as {
    services: Record<string, { stop_grace_period?: string }>;
  };
  const composeGrace = Math.min(
    ...services.map((s) => Number.parseInt(compose.services[s]?.stop_grace_period ?? '10s', 10)),
  );
  const kubernetesGrace = Math.min(
    ...services.map((s) => {
      const text = readFileSync(join(root, 'deploy', 'kubernetes', 'base', `${s}.yaml`), 'utf8');
      const grace = Number(/terminationGracePeriodSeconds: (\d+)/.exec(text)?.[1] ?? 30);
      const preStop = Number(/preStop:\s*\n\s*sleep:\s*\n\s*seconds: (\d+)/.exec(text)?.[1] ?? 0);
      return grace - preStop;
    }),
  );
  return Math.min(composeGrace, kubernetesGrace);
}

interface Inspected {
  Size: number;
  RootFS: { Layers: string[] };
  Config: { User?: string; Env?: string[]; Entrypoint?: string[]; Cmd?: string[] };
  /** podman keeps the Docker-format HEALTHCHECK here. */
  Healthcheck?: { Test?: string[] };
}

function inspect(image: string): Inspected {
  return (JSON.parse(podman.run(['image', 'inspect', image])) as Inspected[])[0] as Inspected;
}

/** name@version of every package the host's `npm ls --omit=dev` counts as production (workspaces included). */
function productionPackages(): Set<string> {
  const listed = spawnSync('npm', ['ls', '--omit=dev', '--all', '--parseable'], { cwd: root, encoding: 'utf8' });
  const found = new Set<string>();
  for (const dir of listed.stdout.split('\n').filter(Boolean)) {
    try {
      const manifest = JSON.parse(readFileSync(join(dir, 'package.json'), 'utf8')) as { name: string; version: string };
      found.add(`${manifest.name}@${manifest.version}`);
    } catch {
      // not a package directory (the root)
    }
  }
  return found;
}

/** Walks the image from inside (node, as uid 10001): its app files, its packages, and files the build CA matches. */
const SURVEY = `
const fs = require('fs'), path = require('path'), crypto = require('crypto');
const out = { appFiles: [], packages: [], caCopies: [], secretFiles: [] };
const caSize = Number(process.env.CA_SIZE || -1), caHash = process.env.CA_SHA256 || '';
const skip = new Set(['/proc', '/sys', '/dev', '/tmp']);
function walk(dir) {
  let entries; try { entries = fs.readdirSync(dir, { withFileTypes: true }); } catch { return; }
  for (const e of entries) {
    const full = path.join(dir, e.name);
    if (skip.has(full)) continue;
    if (e.isDirectory()) { walk(full); continue; }
    if (!e.isFile()) continue;
    if (full.startsWith('/app/') && !full.startsWith('/app/node_modules/')) out.appFiles.push(full.slice(5));
    if (/(^|\\/)(\\.npmrc|\\.env|id_rsa|.*\\.(pem|key|p12|pfx))$/.test(full) && !/^\\/(usr\\/share|usr\\/lib|etc\\/ssl)\\//.test(full) && !full.includes('/node_modules/')) out.secretFiles.push(full);
    try {
      if (caSize > 0 && fs.statSync(full).size === caSize && crypto.createHash('sha256').update(fs.readFileSync(full)).digest('hex') === caHash) out.caCopies.push(full);
    } catch {}
  }
}
walk('/');
function packages(dir) {
  let entries; try { entries = fs.readdirSync(dir); } catch { return; }
  for (const name of entries) {
    const full = path.join(dir, name);
    if (name.startsWith('@')) { packages(full); continue; }
    try {
      const m = JSON.parse(fs.readFileSync(path.join(full, 'package.json'), 'utf8'));
      out.packages.push(m.name + '@' + m.version);
    } catch { if (name !== '.bin' && name !== '.package-lock.json') out.packages.push('?' + full); }
    packages(path.join(full, 'node_modules'));
  }
}
packages('/app/node_modules');
out.secretsDir = fs.existsSync('/run/secrets') && fs.readdirSync('/run/secrets').length > 0;
out.uid = process.getuid();
process.stdout.write(JSON.stringify(out));
`;

describe('the image', () => {
  const image = inspect(IMAGE);
  const base = inspect(dockerfileBaseImage());

  it('runs as uid 10001 through the entrypoint, has a HEALTHCHECK, and its default command prints the usage', () => {
    expect(image.Config.User).toBe('10001:10001');
    expect(image.Config.Entrypoint).toEqual(['node', '/app/deploy/docker/entrypoint.mjs']);
    expect(image.Healthcheck?.Test).toEqual(['CMD', 'node', '/app/deploy/docker/healthcheck.mjs', '/health/ready']);
    expect(image.Config.Env).toContain('NODE_ENV=production');
    // outreach_build_info names the commit it was built from.
    const head = spawnSync('git', ['rev-parse', 'HEAD'], { cwd: root, encoding: 'utf8' }).stdout.trim();
    expect(image.Config.Env).toContain(`OUTREACH_COMMIT=${head}`);

    const usage = podman.try(['run', '--rm', '--network', 'none', '--no-healthcheck', ...HARDENED, IMAGE]);
    expect(usage.status, usage.stderr).toBe(0);
    expect(usage.stdout).toMatch(/^Usage: docker run \[options\] outreach <command>/);
    for (const command of Object.keys(commands)) expect(usage.stdout).toContain(command);
    expect(usage.stdout + usage.stderr).not.toContain('unknown command');
    const unknown = podman.try(['run', '--rm', '--network', 'none', '--no-healthcheck', ...HARDENED, IMAGE, 'mailer']);
    expect(unknown.status).toBe(64);
    expect(unknown.stderr).toContain('unknown command "mailer"');
  });

  it('holds production dependencies only, no test kit, tests or sources, and no secrets (the build CA included)', () => {
    const ca = buildCaFile();
    const caBytes = ca ? readFileSync(ca) : undefined;
    const surveyed = podman.run(
      [
        'run',
        '--rm',
        '--network',
        'none',
        '--no-healthcheck',
        ...HARDENED,
        '-e',
        `CA_SIZE=${caBytes?.length ?? -1}`,
        '-e',
        `CA_SHA256=${caBytes ? createHash('sha256').update(caBytes).digest('hex') : ''}`,
        '--entrypoint',
        'node',
        IMAGE,
        '-e',
        SURVEY,
      ],
      { stdio: ['ignore', 'pipe', 'ignore'] },
    );
    const survey = JSON.parse(surveyed) as {
      appFiles: string[];
      packages: string[];
      caCopies: string[];
      secretFiles: string[];
      secretsDir: boolean;
      uid: number;
    };
    expect(survey.uid).toBe(10001);

    const production = productionPackages();
    const extra = survey.packages.filter((p) => !production.has(p));
    expect(extra, 'packages in the image that production does not need').toEqual([]);
    const names = new Set(survey.packages.map((p) => p.slice(0, p.lastIndexOf('@'))));
    const manifest = JSON.parse(readFileSync(join(root, 'package.json'), 'utf8')) as {
      devDependencies: Record<string, string>;
    };
    const productionNames = new Set([...production].map((p) => p.slice(0, p.lastIndexOf('@'))));
    const devOnly = Object.keys(manifest.devDependencies).filter((name) => !productionNames.has(name));
    expect(devOnly.length).toBeGreaterThan(10);
    expect(devOnly.filter((name) => names.has(name))).toEqual([]);
    for (const name of ['@outreach/testkit', 'smtp-server', 'mailparser', 'vitest', 'typescript', 'tsx'])
      expect(names.has(name), name).toBe(false);

    expect(survey.appFiles.filter((f) => /(^|\/)(test|src)\//.test(f) || /\.test\.|(?<!\.d)\.ts$/.test(f))).toEqual([]);
    expect(survey.appFiles.filter((f) => f.startsWith('packages/testkit/'))).toEqual([]);
    expect(survey.appFiles.some((f) => f === 'services/sender/dist/server.js')).toBe(true);

    expect(survey.secretFiles).toEqual([]);
    expect(survey.secretsDir).toBe(false);
    expect(survey.caCopies, 'copies of the build CA').toEqual([]);
    const secretish = (image.Config.Env ?? []).filter((v) => /TOKEN|PASSWORD|SECRET|_KEY=|CA_CERTS/i.test(v));
    expect(secretish).toEqual([]);
    const history = podman.run(['history', '--no-trunc', '--format', '{{.CreatedBy}}', IMAGE]);
    expect(history).not.toContain('BEGIN CERTIFICATE');
  });

  it('stays within its size and layer budget', () => {
    const added = {
      megabytes: (image.Size - base.Size) / 1e6,
      layers: image.RootFS.Layers.length - base.RootFS.Layers.length,
    };
    process.stdout.write(
      `[image] ${IMAGE}: ${(image.Size / 1e6).toFixed(0)} MB in ${image.RootFS.Layers.length} layers; ` +
        `${added.megabytes.toFixed(0)} MB and ${added.layers} layers over ${dockerfileBaseImage()}\n`,
    );
    expect(added.megabytes).toBeLessThanOrEqual(BUDGET.addedMegabytes);
    expect(added.layers).toBeLessThanOrEqual(BUDGET.addedLayers);
  });
});

describe('the platform from the image, on the local Kafka, PostgreSQL and registry', () => {
  const run = `ct${Date.now().toString(36)}${randomUUID().slice(0, 4)}`;
  const database = run;
  const prefix = `${run}.`;
  const kafkaBrokers = inject('kafkaBrokers');
  const registryUrl = inject('schemaRegistryUrl');
  const launcher = new ContainerLauncher(podman, IMAGE, run);
  const grace = gracePeriodSeconds();
  let databaseUrl = '';
  let sink: SmtpSink;
  let stack: Stack;
  let admin: pg.Client;
  const startSeconds: Partial<Record<Service, number>> = {};

  beforeAll(async () => {
    admin = new pg.Client({ connectionString: inject('databaseUrl') });
    await admin.connect();
    await admin.query(`CREATE DATABASE "${database}"`);
    const url = new URL(inject('databaseUrl'));
    url.pathname = `/${database}`;
    databaseUrl = url.toString();
    sink = await new SmtpSink({
      behaviour: (to) => (to === BOUNCING_ADDRESS ? { reject: 'mailbox unavailable' } : undefined),
    }).start();
    // Sends in doubt after the SIGKILL are settled by asking the sink, as compose's sender asks Mailpit (ADR 009).
    const lookup = lookupSettings(await sink.startMailpitApi());
    stack = new Stack({
      run,
      kafkaBrokers,
      databaseUrl,
      portBase: (await freePort()) + 100,
      token: 'container-token',
      smtpPort: sink.port,
      ...(registryUrl ? { schemaRegistryUrl: registryUrl } : {}),
      launcher,
      // The schemas the migrate Job made (the services' defaults), and no migration at start: the Job did it.
      env: (service) => ({
        DATABASE_SCHEMA: service,
        MIGRATE_ON_START: 'false',
        SMTP_HOST: '127.0.0.1',
        ...(service === 'sender' ? { ...FAULT_SENDER_SETTINGS, ...lookup } : {}),
      }),
    });
  });

  afterAll(async () => {
    await stack?.stopAll('SIGKILL').catch(() => undefined);
    launcher.killAll();
    await sink?.stop();
    await stack?.dropData([]).catch(() => undefined);
    await admin?.query(`DROP DATABASE IF EXISTS "${database}" WITH (FORCE)`).catch(() => undefined);
    await admin?.end();
  });

  /** A one-shot command from the image, as a Job runs it: hardened, no HEALTHCHECK, exit code checked. */
  async function job(command: string, env: Record<string, string>): Promise<string> {
    const started = Date.now();
    const result = await launcher.exec([
      'run',
      '--rm',
      '--network',
      'host',
      '--no-healthcheck',
      ...HARDENED,
      ...Object.entries(env).flatMap(([k, v]) => ['-e', `${k}=${v}`]),
      IMAGE,
      command,
    ]);
    process.stdout.write(
      `[image] job ${command}: exit ${result.status} in ${((Date.now() - started) / 1000).toFixed(1)} s\n`,
    );
    expect(result.status, `${command}:\n${result.stderr}\n${result.stdout}`).toBe(0);
    return result.stdout;
  }

  it('runs the Jobs from it: schemas:register, topics:ensure and migrate', async () => {
    if (registryUrl) {
      const registered = await job('schemas:register', { SCHEMA_REGISTRY_URL: registryUrl, TOPIC_PREFIX: prefix });
      expect(registered).toMatch(/registered \d+ subjects/);
      const client = new SchemaRegistryClient({ url: registryUrl });
      for (const { subject } of registrySubjects(prefix))
        expect((await client.versions(subject)).length, subject).toBeGreaterThan(0);
    }
    await job('topics:ensure', {
      KAFKA_BROKERS: kafkaBrokers,
      TOPIC_PREFIX: prefix,
      TOPIC_PARTITIONS: '6',
      TOPIC_REPLICATION_FACTOR: '1',
    });
    const kafkaAdmin = createKafka({ brokers: kafkaBrokers.split(','), clientId: `${run}-check` }).admin();
    await kafkaAdmin.connect();
    const topics = (await listTopicsSettled(kafkaAdmin)).filter((t) => t.startsWith(prefix));
    await kafkaAdmin.disconnect();
    expect(topics).toContain(topicName('outreachRequested', prefix));
    expect(topics).toContain(`${topicName('sendRequested', prefix)}.dlq`);

    await job('migrate', { DATABASE_URL: databaseUrl, KAFKA_BROKERS: kafkaBrokers });
    const db = new pg.Client({ connectionString: databaseUrl });
    await db.connect();
    const { rows } = await db.query<{ schema_name: string }>('SELECT schema_name FROM information_schema.schemata');
    await db.end();
    expect(rows.map((r) => r.schema_name)).toEqual(expect.arrayContaining([...services]));
  });

  it('starts the four services from it, as uid 10001 on a read-only root filesystem, each ready by its HEALTHCHECK', async () => {
    for (const service of ['experiment', 'sender', 'liveness', 'planner'] as const) {
      const started = Date.now();
      await stack.start(service, { readyTimeoutMs: 90_000 });
      startSeconds[service] = (Date.now() - started) / 1000;
    }
    process.stdout.write(
      `[image] start to healthy: ${Object.entries(startSeconds)
        .map(([s, t]) => `${s} ${t.toFixed(1)} s`)
        .join(', ')}\n`,
    );
    for (const service of services) {
      const name = launcher.name(service);
      const identity = await launcher.exec([
        'exec',
        name,
        'node',
        '-e',
        'process.stdout.write(String(process.getuid()))',
      ]);
      expect(identity.stdout).toBe('10001');
      const write = await launcher.exec(['exec', name, 'node', '-e', "require('fs').writeFileSync('/app/x', 'x')"]);
      expect(write.status).not.toBe(0);
      expect(write.stderr).toMatch(/EROFS|read-only file system/i);
      const tmp = await launcher.exec(['exec', name, 'node', '-e', "require('fs').writeFileSync('/tmp/x', 'x')"]);
      expect(tmp.status).toBe(0);
      // No capability left, effective or bounding, and no way to gain one.
      const status = await launcher.exec([
        'exec',
        name,
        'node',
        '-e',
        "process.stdout.write(require('fs').readFileSync('/proc/1/status', 'utf8'))",
      ]);
      expect(status.stdout).toMatch(/^CapEff:\s+0+$/m);
      expect(status.stdout).toMatch(/^CapBnd:\s+0+$/m);
      expect(status.stdout).toMatch(/^NoNewPrivs:\s+1$/m);
    }
  });

  it('never reports healthy a service that cannot reach its broker', async () => {
    const name = `${run}-unready`;
    const started = await launcher.exec([
      'run',
      '--detach',
      '--rm',
      '--name',
      name,
      '--network',
      'host',
      ...HARDENED,
      ...Object.entries({
        ...stack.env('experiment'),
        PATH: undefined,
        HTTP_PORT: String(await freePort()),
        // Nothing listens there: the consumer never joins, so the service never reports ready.
        KAFKA_BROKERS: `127.0.0.1:${await freePort()}`,
        EVENT_WIRE_FORMAT: 'single-object',
        SCHEMA_REGISTRY_URL: '',
      })
        .filter((entry): entry is [string, string] => entry[1] !== undefined)
        .flatMap(([k, v]) => ['-e', `${k}=${v}`]),
      IMAGE,
      'experiment',
    ]);
    expect(started.status, started.stderr).toBe(0);
    try {
      // Asked again and again for 5 s: never healthy (1 while it tries; 125 once it gave up and is gone).
      const verdicts: Array<number | null> = [];
      for (const until = Date.now() + 5_000; Date.now() < until;) {
        verdicts.push((await launcher.exec(['healthcheck', 'run', name])).status);
      }
      expect(verdicts.length).toBeGreaterThan(2);
      expect(verdicts.filter((v) => v === 0)).toEqual([]);
      expect(verdicts[0]).toBe(1);
    } finally {
      await launcher.exec(['rm', '--force', '--time', '0', name]);
    }
  });

  it('delivers a demo-shaped workload with the sender SIGKILLed and SIGTERMed midway: 0 duplicates, every request accounted for', async () => {
    const {
      requests,
      backend,
      repeats: duplicates,
      caseVariants: variants,
    } = demoWorkload(240, {
      producer: 'container-test',
      followUpDelayMs: 1_000,
      requestId: (i) => `${run}-${i}`,
    });
    await stack.json('experiment', '/v1/experiments', { method: 'POST', body: DEMO_EXPERIMENT });
    await stack.json('sender', `/v1/suppressions/${SUPPRESSED_ADDRESS}`, {
      method: 'PUT',
      body: { reason: 'unsubscribe' },
    });
    // Every send the requests call for: each first step, and the backend campaign's follow-up, which
    // the planner schedules once its first step is `sent` (never after a failed or ambiguous one).
    const stepOf = new Map<string, string>();
    const followUpOf = new Map<string, string>();
    for (const r of requests) {
      const key = normalizeCandidateKey(r.candidateId);
      const intro = sendIdFor(r.campaignId, key, 'intro');
      stepOf.set(intro, 'intro');
      for (const f of r.followUps) {
        stepOf.set(sendIdFor(r.campaignId, key, f.step), f.step);
        followUpOf.set(intro, sendIdFor(r.campaignId, key, f.step));
      }
    }
    const kafka = createKafka({ brokers: kafkaBrokers.split(','), clientId: `${run}-driver` });
    const producer = new EventProducer(kafka);
    const requestsTopic = topicName('outreachRequested', prefix);
    const sentLog = new SentLog(databaseUrl, 'sender');
    try {
      await producer.publish(requests.filter((_, i) => i % 4 !== 0).map((event) => ({ topic: requestsTopic, event })));
      for (const r of requests.filter((_, i) => i % 4 === 0)) {
        await stack.json('planner', '/v1/outreach-requests', { method: 'POST', body: ingressBody(r) });
      }
      await producer.publish([...duplicates, ...variants].map((event) => ({ topic: requestsTopic, event })));

      const delivered = (share: number) =>
        waitFor(() => sink.messages.length >= Math.floor(stepOf.size * share), {
          timeoutMs: 180_000,
          description: `${share * 100}% of the sends delivered`,
        });
      await delivered(0.3);
      await stack.stop('sender', 'SIGKILL');
      await stack.start('sender', { readyTimeoutMs: 90_000 });

      await delivered(0.6);
      const termStarted = Date.now();
      const exit = await stack.processes.get('sender')?.stop('SIGTERM', (grace + 5) * 1000);
      const drained = (Date.now() - termStarted) / 1000;
      process.stdout.write(
        `[image] sender drained on SIGTERM mid-load in ${drained.toFixed(1)} s (grace ${grace} s)\n`,
      );
      expect(exit).toBe(0);
      expect(drained).toBeLessThan(grace);
      await stack.start('sender', { readyTimeoutMs: 90_000 });

      // Settled: every expected send terminal, nothing mid-send, and that (with the sink's count) for 3 polls.
      let previous = '';
      let stableFor = 0;
      const expected = await waitFor(
        async () => {
          const rows = await sentLog.rows();
          const status = new Map(rows.map((r) => [r.sendId, r.status]));
          const wanted = [...stepOf.keys()].filter((id) => stepOf.get(id) === 'intro');
          for (const [intro, followUp] of followUpOf) if (status.get(intro) === 'sent') wanted.push(followUp);
          const snapshot = `${rows.map((r) => r.status).join()}|${sink.messages.length}`;
          stableFor = snapshot === previous ? stableFor + 1 : 0;
          previous = snapshot;
          const settled =
            rows.every((r) => TERMINAL.has(r.status)) && wanted.every((id) => TERMINAL.has(status.get(id) ?? ''));
          return settled && stableFor >= 3 ? new Set(wanted) : undefined;
        },
        { timeoutMs: 180_000, intervalMs: 500, description: 'every send of the workload terminal' },
      ).catch(async (error: unknown) => {
        const rows = await sentLog.rows();
        const byStatus: Record<string, number> = {};
        for (const r of rows) byStatus[r.status] = (byStatus[r.status] ?? 0) + 1;
        const steps = await stack.json('planner', '/v1/steps/summary').catch((e: unknown) => String(e));
        process.stderr.write(
          `[image] ${rows.length} send rows ${JSON.stringify(byStatus)}, ${sink.messages.length} delivered, ` +
            `planner steps ${JSON.stringify(steps)}\n${stack.tails(20)}\n`,
        );
        throw error;
      });
      const slotOf = (m: DeliveredMessage) =>
        `${m.headers.get('x-outreach-campaign')}|${m.to.join(',').toLowerCase()}|${stepOf.get(m.headers.get('x-outreach-send-id') ?? '') ?? '?'}`;
      const verdict = judge({
        expected,
        log: await sentLog.rows(),
        deliveries: sink.messages,
        // Only the SIGKILL can leave sends in doubt: a SIGTERM drains them.
        inFlightAtFaults: CONCURRENCY,
        cut: 0,
        slotOf,
      });
      process.stdout.write(
        `[image] workload: ${requests.length} requests (+${duplicates.length} repeats, +${variants.length} case variants), ` +
          `${expected.size} sends (${stepOf.size - expected.size} follow-ups withheld after a first step not sent), ` +
          `${sink.messages.length} delivered, outcomes ${JSON.stringify(verdict.outcomes)}, ` +
          `duplicates ${verdict.duplicates}, lost ${verdict.lost}, ambiguous ${verdict.ambiguous}\n`,
      );
      expect(verdict.violations).toEqual([]);
      expect(verdict.duplicates).toBe(0);
      expect(verdict.lost).toBe(0);
      expect(verdict.outcomes.suppressed).toBe(1);
      expect(verdict.outcomes.failed).toBe(1);
      const report = await stack.json<{ variants: Array<{ assigned: number }>; contaminated: unknown[] }>(
        'experiment',
        '/v1/experiments/subject-line/report',
      );
      expect(report.contaminated).toEqual([]);
      expect(report.variants.reduce((n, v) => n + v.assigned, 0)).toBe(backend);
    } finally {
      await producer.disconnect();
      await sentLog.end();
    }
  });

  it('drains every service on SIGTERM within the grace period, exit 0', async () => {
    const drains: string[] = [];
    await Promise.all(
      services.map(async (service) => {
        const started = Date.now();
        const code = await stack.processes.get(service)?.stop('SIGTERM', (grace + 5) * 1000);
        const seconds = (Date.now() - started) / 1000;
        drains.push(`${service} ${seconds.toFixed(1)} s`);
        expect(code, service).toBe(0);
        expect(seconds, service).toBeLessThan(grace);
      }),
    );
    process.stdout.write(`[image] SIGTERM to exit: ${drains.join(', ')} (grace ${grace} s)\n`);
  });
});
