/**
 * docker-compose.yml brought up for real: the file unchanged, with Debian's podman-compose, the
 * outreach services from the image, and the four public images it names replaced by stand-ins built
 * from the artifacts the project already uses (test/container/compose.standins.yml, standins.ts).
 *
 * The stack runs in a network namespace of its own, so the ports the file publishes (9092, 5432,
 * 8085, 8081-8084, 8025, 1025) are free there whatever the machine runs. podman-compose 1.0.3 creates
 * every container as the file says but ignores `depends_on` conditions, so this test starts them the
 * way `docker compose up` does: each once the services it depends on are healthy
 * (`service_healthy`, by the file's own healthcheck) or finished with exit 0
 * (`service_completed_successfully`). Then the README's curl commands deliver an email.
 */
import { spawn, spawnSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { waitFor } from '@outreach/testkit';
import { parse as parseYaml } from 'yaml';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { Podman } from '../../scripts/lib/container.js';
import { root } from '../../scripts/lib/paths.js';
import { forPodman, type PodmanKube } from './kube.js';
import { buildStandins } from './standins.js';

interface ComposeService {
  depends_on?: Record<string, { condition: 'service_started' | 'service_healthy' | 'service_completed_successfully' }>;
  healthcheck?: { test?: string[]; disable?: boolean };
  restart?: string;
}

const podman = Podman.get();
const compose = parseYaml(readFileSync(join(root, 'docker-compose.yml'), 'utf8'), { merge: true }) as {
  services: Record<string, ComposeService>;
};
const project = `oc${randomBytes(3).toString('hex')}`;
const netns = `outreach-${project}`;
const files = ['-f', join(root, 'docker-compose.yml'), '-f', join(root, 'test', 'container', 'compose.standins.yml')];

/** A command in the stack's network namespace (its ports are 127.0.0.1:<published> there). */
function inStackNetwork(
  command: string,
  args: readonly string[],
): { status: number | null; stdout: string; stderr: string } {
  const result = spawnSync('nsenter', [`--net=/run/netns/${netns}`, command, ...args], {
    cwd: root,
    encoding: 'utf8',
    maxBuffer: 16 * 2 ** 20,
  });
  return { status: result.status, stdout: result.stdout ?? '', stderr: result.stderr ?? '' };
}

/** podman in the namespace, without blocking the event loop for long (health checks take a second or two). */
function podmanAsync(args: readonly string[]): Promise<{ status: number | null; stdout: string }> {
  return new Promise((resolve) => {
    const child = spawn('nsenter', [`--net=/run/netns/${netns}`, 'podman', ...podman.globalArgs, ...args], {
      stdio: ['ignore', 'pipe', 'ignore'],
    });
    let stdout = '';
    child.stdout.setEncoding('utf8').on('data', (chunk: string) => (stdout += chunk));
    child.once('error', () => resolve({ status: null, stdout }));
    child.once('close', (status) => resolve({ status, stdout }));
  });
}

const container = (service: string) => `${project}_${service}_1`;
const composeCommand = (args: readonly string[]) =>
  inStackNetwork('podman-compose', ['--podman-path', podman.shim(), '-p', project, ...files, ...args]);

beforeAll(() => {
  buildStandins();
  expect(spawnSync('ip', ['netns', 'add', netns]).status).toBe(0);
  expect(spawnSync('ip', ['netns', 'exec', netns, 'ip', 'link', 'set', 'lo', 'up']).status).toBe(0);
});

/** The kube part runs on the stack the compose part brought up. */
let composeUp = false;
/** What the kube part created, for the clean-up: its pods and its podman secrets. */
let kube: PodmanKube | undefined;
const scratch = mkdtempSync(join(tmpdir(), 'outreach-kube-'));

afterAll(() => {
  if (kube) {
    inStackNetwork('podman', [...podman.globalArgs, 'kube', 'down', join(scratch, 'dev.yaml')]);
    for (const name of Object.keys(kube.secrets)) inStackNetwork('podman', ['secret', 'rm', name]);
  }
  rmSync(scratch, { recursive: true, force: true });
  const down = composeCommand(['down']);
  if (down.status !== 0) process.stderr.write(`[compose] down: ${down.stderr.slice(-2_000)}\n`);
  inStackNetwork('podman', [...podman.globalArgs, 'network', 'rm', '--force', `${project}_default`]);
  spawnSync('ip', ['netns', 'delete', netns]);
});

it('comes up healthy in the dependency order of docker-compose.yml, and the README curl example delivers an email', async () => {
  const started = Date.now();
  const created = composeCommand(['up', '--no-build', '--no-start']);
  expect(created.status, created.stderr.slice(-3_000)).toBe(0);

  const services = Object.keys(compose.services);
  const state = new Map<string, { startedAt: number; readyAt?: number }>();
  const jobs = services.filter((s) => compose.services[s]?.restart === 'no');
  const healthy = new Set<string>();
  const completed = new Set<string>();
  const failed = new Map<string, string>();
  const retried = new Set<string>();
  const satisfied = (service: string) =>
    Object.entries(compose.services[service]?.depends_on ?? {}).every(([dependency, { condition }]) =>
      condition === 'service_healthy'
        ? healthy.has(dependency)
        : condition === 'service_completed_successfully'
          ? completed.has(dependency)
          : state.has(dependency),
    );
  const logs = (service: string) => {
    const result = inStackNetwork('podman', [...podman.globalArgs, 'logs', '--tail', '25', container(service)]);
    return `${result.stdout}${result.stderr}`;
  };

  try {
    await waitFor(
      async () => {
        for (const service of services.filter((s) => !state.has(s) && satisfied(s))) {
          const start = await podmanAsync(['start', container(service)]);
          expect(start.status, `podman start ${service}`).toBe(0);
          state.set(service, { startedAt: Date.now() });
        }
        await Promise.all(
          services
            .filter((s) => state.has(s) && !healthy.has(s) && !completed.has(s))
            .map(async (service) => {
              if (jobs.includes(service)) {
                const inspected = await podmanAsync([
                  'inspect',
                  container(service),
                  '--format',
                  '{{.State.Status}} {{.State.ExitCode}}',
                ]);
                const [status, code] = inspected.stdout.trim().split(' ');
                if (status !== 'exited') return;
                if (code !== '0') {
                  const output = logs(service);
                  // aardvark-dns 1.4 (Debian 12's) can drop a lookup while it reloads for a container
                  // that starts at that moment: a job that failed on that alone runs once more.
                  if (/EAI_AGAIN/.test(output) && !retried.has(service)) {
                    retried.add(service);
                    process.stdout.write(`[compose] ${service} failed on a DNS lookup (EAI_AGAIN); running it again\n`);
                    await podmanAsync(['start', container(service)]);
                    return;
                  }
                  failed.set(service, `${service} exited ${code}:\n${output}`);
                  return;
                }
                completed.add(service);
              } else if ((await podmanAsync(['healthcheck', 'run', container(service)])).status === 0) {
                healthy.add(service);
              } else {
                return;
              }
              const entry = state.get(service);
              if (entry) entry.readyAt = Date.now();
            }),
        );
        return failed.size > 0 || healthy.size + completed.size === services.length;
      },
      { timeoutMs: 240_000, intervalMs: 1_000, description: 'every compose service healthy or done' },
    );
  } catch (error) {
    for (const service of services.filter((s) => !healthy.has(s) && !completed.has(s))) {
      process.stderr.write(
        `[compose] ${service} (${state.has(service) ? 'started' : 'not started'}):\n${logs(service)}\n`,
      );
    }
    throw error;
  }
  expect([...failed.values()]).toEqual([]);
  const at = (ms: number) => `${((ms - started) / 1000).toFixed(1)} s`;
  process.stdout.write(
    `[compose] ${[...state]
      .sort((a, b) => a[1].startedAt - b[1].startedAt)
      .map(
        ([s, t]) => `${s} started ${at(t.startedAt)}, ${jobs.includes(s) ? 'done' : 'healthy'} ${at(t.readyAt ?? 0)}`,
      )
      .join('; ')}\n`,
  );
  // The order the file asks for: nothing started before what it depends on was healthy or done.
  for (const [service, { startedAt }] of state) {
    for (const dependency of Object.keys(compose.services[service]?.depends_on ?? {})) {
      expect(state.get(dependency)?.readyAt, `${dependency} before ${service}`).toBeLessThanOrEqual(startedAt);
    }
  }
  expect(jobs.sort()).toEqual(['migrate', 'schemas', 'topics']);

  // The README's example, verbatim: every curl line of its compose block, in the stack's namespace.
  const readme = readFileSync(join(root, 'README.md'), 'utf8');
  const block = /<!-- compose-example[^>]*-->\s*```sh\n([\s\S]*?)```/.exec(readme)?.[1];
  expect(block, 'the compose example in README.md').toBeDefined();
  const indent = /^ */.exec(block ?? '')?.[0].length ?? 0;
  const script = (block ?? '')
    .split('\n')
    .map((line) => line.slice(indent))
    .join('\n')
    .split(/\n(?!\s)/)
    .filter((command) => command.startsWith('curl '));
  expect(script.length).toBe(2);
  const posted = inStackNetwork('sh', ['-c', script[0] ?? '']);
  expect(posted.status, posted.stderr).toBe(0);
  expect(JSON.parse(posted.stdout)).toMatchObject({ requestId: 'compose-1' });
  const status = await waitFor(
    () => {
      const answer = inStackNetwork('sh', ['-c', script[1] ?? '']);
      const body = JSON.parse(answer.stdout || '{}') as { status?: string };
      return body.status === 'sent' ? body : undefined;
    },
    { timeoutMs: 60_000, intervalMs: 500, description: 'the request to be sent' },
  );
  expect(status).toMatchObject({ status: 'sent' });
  const search = inStackNetwork('curl', ['-sS', 'http://127.0.0.1:8025/api/v1/search?query=to:ada@example.com']);
  const found = JSON.parse(search.stdout) as {
    total: number;
    messages_count: number;
    messages: Array<{ Subject: string; To: Array<{ Address: string }> }>;
  };
  expect(found.total).toBe(1);
  expect(found.messages_count).toBe(1);
  expect(found.messages[0]).toMatchObject({ Subject: 'Hello Ada', To: [{ Address: 'ada@example.com' }] });
  // A data-subject export (ADR 014) through the planner, which asks the sender, experiment and
  // liveness services for their parts at compose's SENDER_URL, EXPERIMENT_URL and LIVENESS_URL with
  // its tokens: every part answers (a peer it cannot reach or whose token is refused is a 503), and
  // the sender's holds the send just made.
  const exported = inStackNetwork('curl', [
    '-sS',
    '-w',
    '\n%{http_code}',
    'http://127.0.0.1:8081/v1/subjects/cand-1042',
    '-H',
    'authorization: Bearer dev-token',
  ]);
  const [exportBody = '', exportCode] = exported.stdout.split(/\n(?=\d{3}$)/);
  expect(exportCode, exportBody.slice(0, 500)).toBe('200');
  const document = JSON.parse(exportBody) as Record<string, unknown>;
  expect(Object.keys(document)).toEqual(expect.arrayContaining(['planner', 'sender', 'experiment', 'liveness', 'log']));
  expect(JSON.stringify(document.sender)).toContain('ada@example.com');
  process.stdout.write(`[compose] up and one email delivered in ${at(Date.now())}\n`);
  composeUp = true;
});

it("runs the dev overlay's Deployments and Jobs with podman kube play, on the compose stack's network", async () => {
  expect(composeUp, 'the compose stack is up').toBe(true);
  const started = Date.now();
  // The pods take the compose services' consumer groups and tables over: those stop first (SIGTERM).
  for (const service of ['planner', 'sender', 'experiment', 'liveness', 'console']) {
    expect((await podmanAsync(['stop', '--time', '40', container(service)])).status, service).toBe(0);
  }
  const rendered = spawnSync('kubectl', ['kustomize', join(root, 'test', 'container', 'kube')], { encoding: 'utf8' });
  expect(rendered.status, rendered.stderr).toBe(0);
  // What the platform creates out of band (docs/operations.md): one database role here, so every key
  // holds the compose PostgreSQL's password; one token in every scope.
  const token = randomBytes(16).toString('hex');
  kube = forPodman(rendered.stdout, {
    'outreach-api-tokens': { publish: token, operate: token, read: token, dsn: token, erase: token },
    'outreach-db-passwords': Object.fromEntries(
      ['planner', 'sender', 'experiment', 'liveness', 'console', 'outreach_migrator'].map((role) => [role, 'postgres']),
    ),
    // The console's tokens, session key and local user (compose's development one).
    'outreach-console': {
      'read-token': token,
      'operate-token': token,
      'session-key': randomBytes(32).toString('hex'),
      users: readFileSync(join(root, 'deploy', 'docker', 'console-dev-users'), 'utf8'),
    },
    'outreach-email-hash-key': { key: randomBytes(32).toString('hex'), id: 'kube' },
    'outreach-identifier-key': { key: randomBytes(32).toString('hex'), id: 'kube' },
    'outreach-secrets': { EXPERIMENT_TOKEN: token, SENDER_TOKEN: token, LIVENESS_TOKEN: token },
    'outreach-suppression-key': { key: randomBytes(32).toString('hex') },
  });
  // What podman leaves out and how each pod's Secrets are bridged: test/container/kube.unit.test.ts.
  expect(kube.jobs.sort()).toEqual(['outreach-migrate', 'outreach-topics']);
  for (const [name, content] of Object.entries(kube.secrets)) {
    const file = join(scratch, `${name}.json`);
    writeFileSync(file, content, { mode: 0o600 });
    inStackNetwork('podman', ['secret', 'rm', name]);
    expect(inStackNetwork('podman', ['secret', 'create', name, file]).status, name).toBe(0);
  }
  writeFileSync(join(scratch, 'dev.yaml'), kube.yaml);
  const played = inStackNetwork('podman', [
    ...podman.globalArgs,
    'kube',
    'play',
    '--network',
    `${project}_default`,
    join(scratch, 'dev.yaml'),
  ]);
  expect(played.status, `${played.stderr.slice(-3_000)}`).toBe(0);

  const containersOf = async (pod: string) =>
    (
      await podmanAsync(['ps', '--all', '--filter', `pod=${pod}`, '--format', '{{.Names}} {{.Status}} {{.IsInfra}}'])
    ).stdout
      .trim()
      .split('\n')
      .map((line) => line.split(' '))
      .filter((fields) => fields.at(-1) === 'false');
  // The Jobs: every container (the schemas init container included) exited 0.
  for (const job of kube.jobs) {
    await waitFor(
      async () => {
        const states = await containersOf(job);
        const failed = states.filter(([, status, code]) => status === 'Exited' && !/^\(0\)$/.test(code ?? ''));
        expect(
          failed.map(([name]) => name),
          `${job}: ${JSON.stringify(states)}`,
        ).toEqual([]);
        return states.length > 0 && states.every(([, status]) => status === 'Exited');
      },
      { timeoutMs: 120_000, intervalMs: 1_000, description: `the ${job} Job's containers to exit 0` },
    );
  }
  // The Deployments: each pod ready as its readinessProbe asks (GET /health/ready on its port 8080),
  // from the stack's network; its container as the securityContext says.
  const addresses: Record<string, string> = {};
  for (const deployment of kube.deployments) {
    const pod = `${deployment}-pod-0`;
    const infra = (await podmanAsync(['pod', 'inspect', pod, '--format', '{{.InfraContainerID}}'])).stdout.trim();
    const ip = (
      await podmanAsync([
        'inspect',
        infra,
        '--format',
        `{{(index .NetworkSettings.Networks "${project}_default").IPAddress}}`,
      ])
    ).stdout.trim();
    expect(ip, `${pod}'s address`).toMatch(/^\d+\.\d+\.\d+\.\d+$/);
    addresses[deployment] = ip;
    await waitFor(() => inStackNetwork('curl', ['-fsS', `http://${ip}:8080/health/ready`]).status === 0, {
      timeoutMs: 120_000,
      intervalMs: 1_000,
      description: `${deployment} ready`,
    }).catch((error: unknown) => {
      const logs = inStackNetwork('podman', [...podman.globalArgs, 'pod', 'logs', '--tail', '30', pod]);
      process.stderr.write(`[kube] ${deployment}:\n${logs.stdout}${logs.stderr}\n`);
      throw error;
    });
    const [app] = await containersOf(pod);
    const [inspected] = JSON.parse((await podmanAsync(['inspect', app?.[0] ?? ''])).stdout) as Array<{
      HostConfig: { ReadonlyRootfs: boolean };
      Config: { User: string };
      EffectiveCaps: string[] | null;
    }>;
    if (!inspected) throw new Error(`no container in ${pod}`);
    expect(inspected.HostConfig.ReadonlyRootfs, deployment).toBe(true);
    expect(inspected.Config.User, deployment).toBe('10001:10001');
    expect(inspected.EffectiveCaps ?? [], deployment).toEqual([]);
  }
  // A request through the planner pod, with the token from the Secret; the dev overlay's sender
  // uses the null provider, so `sent` is as far as it goes.
  const planner = addresses['outreach-planner'];
  const posted = inStackNetwork('curl', [
    '-sS',
    '-X',
    'POST',
    `http://${planner}:8080/v1/outreach-requests`,
    '-H',
    `authorization: Bearer ${token}`,
    '-H',
    'content-type: application/json',
    '-d',
    JSON.stringify({
      requestId: 'kube-1',
      campaignId: 'kube-check',
      candidateId: 'cand-kube',
      email: 'grace@example.com',
      step: 'intro',
      contents: [{ subject: 'Hello Grace', body: 'From the dev overlay.' }],
    }),
  ]);
  expect(posted.status, posted.stderr).toBe(0);
  expect(JSON.parse(posted.stdout)).toMatchObject({ requestId: 'kube-1' });
  await waitFor(
    () => {
      const answer = inStackNetwork('curl', [
        '-sS',
        `http://${planner}:8080/v1/outreach-requests/kube-1`,
        '-H',
        `authorization: Bearer ${token}`,
      ]);
      return (JSON.parse(answer.stdout || '{}') as { status?: string }).status === 'sent';
    },
    { timeoutMs: 60_000, intervalMs: 500, description: 'the request through the dev overlay to be sent' },
  );
  process.stdout.write(
    `[kube] ${kube.jobs.length} Jobs done and ${kube.deployments.length} Deployments ready, one request sent, in ` +
      `${((Date.now() - started) / 1000).toFixed(1)} s; left to the manifest checker: ${JSON.stringify(kube.left)}\n`,
  );
});
