/**
 * The deployment artefacts, checked where no Docker engine or cluster runs: the Kustomize overlays
 * rendered by `kubectl kustomize` and every object validated against the Kubernetes schemas
 * (kubernetes-models), each service's environment in every overlay and in docker-compose.yml checked
 * against its config schema, probes against the routes the services serve, and the image's commands
 * against the package scripts and sources.
 */
import { spawnSync } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { BaseConfigSchema, buildHttpApp, createLogger, declaredTopics, loadConfig } from '@outreach/shared';
import type { TObject } from '@sinclair/typebox';
import { parseAllDocuments, parse as parseYaml } from 'yaml';
import { beforeAll, describe, expect, it } from 'vitest';
import { ConfigSchema as experimentConfig } from '../../services/experiment/src/config.js';
import { ConfigSchema as livenessConfig } from '../../services/liveness/src/config.js';
import { ConfigSchema as plannerConfig, type Config as PlannerConfig } from '../../services/planner/src/config.js';
import { checkConfig as checkSenderConfig, ConfigSchema as senderConfig } from '../../services/sender/src/config.js';
import type { Config as SenderConfig } from '../../services/sender/src/config.js';
import { STRIMZI_CLUSTER, STRIMZI_REPLICAS, strimziTopicsFile, strimziTopicsYaml } from '../../scripts/deploy.js';

const root = join(import.meta.dirname, '..', '..');
const kubernetesDir = join(root, 'deploy', 'kubernetes');
const overlays = ['dev', 'production', 'production-strimzi'] as const;
const services = {
  planner: plannerConfig,
  sender: senderConfig,
  experiment: experimentConfig,
  liveness: livenessConfig,
};
type Service = keyof typeof services;
const serviceNames = Object.keys(services) as Service[];
const hasKubectl = !spawnSync('kubectl', ['version', '--client'], { encoding: 'utf8' }).error;

// Plain objects as kubectl prints them; only the fields the checks read are typed.
interface EnvVar {
  name: string;
  value?: string;
  valueFrom?: { secretKeyRef?: { name: string; key: string }; configMapKeyRef?: { name: string; key: string } };
}
interface Container {
  name: string;
  image: string;
  args?: string[];
  ports?: Array<{ name?: string; containerPort: number }>;
  env?: EnvVar[];
  envFrom?: Array<{ configMapRef?: { name: string }; secretRef?: { name: string } }>;
  startupProbe?: { httpGet?: { path: string; port: string | number } };
  livenessProbe?: { httpGet?: { path: string; port: string | number } };
  readinessProbe?: { httpGet?: { path: string; port: string | number } };
  lifecycle?: { preStop?: { sleep?: { seconds: number } } };
  resources?: { requests?: Record<string, string>; limits?: Record<string, string> };
  securityContext?: Record<string, unknown>;
}
interface PodSpec {
  containers: Container[];
  securityContext?: Record<string, unknown>;
  terminationGracePeriodSeconds?: number;
}
interface K8sObject {
  apiVersion: string;
  kind: string;
  metadata: { name: string; namespace?: string; labels?: Record<string, string> };
  data?: Record<string, string>;
  spec?: {
    replicas?: number;
    minReplicas?: number;
    maxReplicas?: number;
    scaleTargetRef?: { name: string };
    template?: { metadata?: { annotations?: Record<string, string> }; spec: PodSpec };
    selector?: { matchLabels?: Record<string, string> };
    topicName?: string;
    partitions?: number;
    config?: Record<string, string>;
  };
}

function render(overlay: string): K8sObject[] {
  const result = spawnSync('kubectl', ['kustomize', join(kubernetesDir, 'overlays', overlay)], { encoding: 'utf8' });
  if (result.status !== 0) throw new Error(`kubectl kustomize ${overlay} failed:\n${result.stderr}`);
  return parseAllDocuments(result.stdout).map((d) => d.toJSON() as K8sObject);
}

/** The model class of an apiVersion/kind from kubernetes-models, e.g. apps/v1 Deployment. */
async function modelFor(apiVersion: string, kind: string): Promise<{ new (data: unknown): { validate(): void } }> {
  const module = (await import(`kubernetes-models/${apiVersion}/${kind}`)) as Record<string, unknown>;
  return module[kind] as { new (data: unknown): { validate(): void } };
}

/** A container's environment as the pod would see it; secret references become placeholders. */
function containerEnv(container: Container, objects: readonly K8sObject[]): Record<string, string> {
  const env: Record<string, string> = {};
  for (const source of container.envFrom ?? []) {
    const name = source.configMapRef?.name;
    const configMap = objects.find((o) => o.kind === 'ConfigMap' && o.metadata.name === name);
    if (configMap) Object.assign(env, configMap.data);
    else if (name && name in outOfBand) Object.assign(env, outOfBand[name]);
    else throw new Error(`${container.name}: envFrom names ConfigMap ${name}, which the overlay lacks`);
  }
  for (const variable of container.env ?? []) {
    const secret = variable.valueFrom?.secretKeyRef;
    if (secret) env[variable.name] = placeholderFor(variable.name);
    else if (variable.value !== undefined) env[variable.name] = variable.value;
    else throw new Error(`${container.name}: ${variable.name} has neither a value nor a secret reference`);
  }
  return env;
}

/** ConfigMaps an operator creates out of band (docs/operations.md), with the documented example. */
const outOfBand: Record<string, Record<string, string>> = {
  'outreach-sender-identity': {
    MAIL_FROM: 'Recruiting <recruiting@mail.acme-corp.com>',
    MESSAGE_ID_DOMAIN: 'mail.acme-corp.com',
    UNSUBSCRIBE_MAILTO: 'unsubscribe@mail.acme-corp.com',
    UNSUBSCRIBE_URL: 'https://outreach.acme-corp.com/v1/unsubscribe',
  },
};

function placeholderFor(name: string): string {
  return name === 'DATABASE_URL' ? 'postgres://secret@db:5432/outreach' : 'secret';
}

/**
 * Validates `env` as the service would at start; also rejects variables the service does not know.
 * `migrateOnly`: the `migrate` command loads the schema but builds no app, so the sender's rules
 * between settings (checkConfig, its identity in production) do not apply to the migrate Job.
 */
function checkServiceEnv(service: Service, env: Record<string, string>, where: string, migrateOnly = false): void {
  const schema = services[service] as TObject;
  const config = loadConfig(schema, env);
  if (service === 'sender' && !migrateOnly) checkSenderConfig(config as SenderConfig);
  const known = new Set([...Object.keys(BaseConfigSchema.properties), ...Object.keys(schema.properties)]);
  const unknown = Object.keys(env).filter((k) => !known.has(k));
  expect(unknown, `${where}: variables ${service} does not read (typos?)`).toEqual([]);
}

function deployments(objects: readonly K8sObject[]): K8sObject[] {
  return objects.filter((o) => o.kind === 'Deployment');
}

function mainContainer(object: K8sObject): Container {
  const container = object.spec?.template?.spec.containers[0];
  if (!container) throw new Error(`${object.metadata.name} has no container`);
  return container;
}

const commands = JSON.parse(readFileSync(join(root, 'deploy', 'docker', 'commands.json'), 'utf8')) as Record<
  string,
  { script: string; run: string[][] }
>;

describe.skipIf(!hasKubectl)('Kubernetes overlays (rendered with kubectl kustomize)', () => {
  const rendered = new Map<string, K8sObject[]>();
  beforeAll(() => {
    for (const overlay of overlays) rendered.set(overlay, render(overlay));
  });
  const objectsOf = (overlay: string) => rendered.get(overlay) ?? [];

  it.each(overlays)('%s: every object is valid against its Kubernetes schema', async (overlay) => {
    const problems: string[] = [];
    for (const object of objectsOf(overlay)) {
      if (object.apiVersion === 'kafka.strimzi.io/v1beta2') continue; // checked in its own test below
      const Model = await modelFor(object.apiVersion, object.kind);
      try {
        new Model(object).validate();
      } catch (error) {
        problems.push(`${object.kind}/${object.metadata.name}: ${(error as Error).message}`);
      }
    }
    expect(problems).toEqual([]);
    expect(objectsOf(overlay).every((o) => o.metadata.namespace === (overlay === 'dev' ? 'outreach-dev' : 'outreach')));
  });

  it.each(overlays)('%s: a Deployment, Service and PodDisruptionBudget per service, and both setup jobs', (overlay) => {
    const objects = objectsOf(overlay);
    const named = (kind: string) => objects.filter((o) => o.kind === kind).map((o) => o.metadata.name);
    for (const service of serviceNames) {
      expect(named('Deployment')).toContain(`outreach-${service}`);
      expect(named('Service')).toContain(`outreach-${service}`);
      expect(named('PodDisruptionBudget')).toContain(`outreach-${service}`);
    }
    expect(named('Job')).toEqual(
      overlay === 'production-strimzi' ? ['outreach-migrate'] : ['outreach-migrate', 'outreach-topics'],
    );
    expect(named('NetworkPolicy').length).toBeGreaterThanOrEqual(1);
    // No secret values are committed: the Secret is referenced, never defined.
    expect(named('Secret')).toEqual([]);
  });

  it.each(['production', 'production-strimzi'])(
    '%s: ships no sender identity, and the sender refuses to start without one',
    (overlay) => {
      const objects = objectsOf(overlay);
      expect(
        objects.some((o) => o.kind === 'ConfigMap' && o.metadata.name.startsWith('outreach-sender-identity')),
      ).toBe(false);
      const sender = deployments(objects).find((d) => d.metadata.name === 'outreach-sender');
      if (!sender) throw new Error('no sender Deployment');
      const env = containerEnv(mainContainer(sender), objects);
      for (const name of Object.keys(outOfBand['outreach-sender-identity'] ?? {})) delete env[name];
      expect(() => checkSenderConfig(loadConfig(senderConfig, env) as SenderConfig)).toThrow(/MAIL_FROM must be set/);
    },
  );

  it.each(overlays)("%s: each service's environment satisfies its config schema", (overlay) => {
    const objects = objectsOf(overlay);
    for (const deployment of deployments(objects)) {
      const container = mainContainer(deployment);
      const service = container.args?.[0] as Service;
      expect(serviceNames, `${deployment.metadata.name} runs ${service}`).toContain(service);
      checkServiceEnv(service, containerEnv(container, objects), `${overlay}/${deployment.metadata.name}`);
    }
    // The migration job runs every service's `server.js migrate`, which loads each service's config.
    const migrate = objects.find((o) => o.kind === 'Job' && o.metadata.name === 'outreach-migrate');
    const migrateEnv = containerEnv(mainContainer(migrate as K8sObject), objects);
    for (const service of serviceNames) checkServiceEnv(service, migrateEnv, `${overlay}/outreach-migrate`, true);
  });

  it.each(overlays)('%s: probes use the routes every service serves, on the port it listens on', async (overlay) => {
    const app = await buildHttpApp({
      name: 'probe-check',
      logger: createLogger({ name: 'probe-check', level: 'silent' }),
    });
    try {
      const objects = objectsOf(overlay);
      for (const deployment of deployments(objects)) {
        const container = mainContainer(deployment);
        const env = containerEnv(container, objects);
        const port = container.ports?.find((p) => p.name === 'http')?.containerPort;
        expect(port, `${deployment.metadata.name}: container port = HTTP_PORT`).toBe(Number(env.HTTP_PORT));
        const probes = [container.startupProbe, container.livenessProbe, container.readinessProbe];
        expect(probes.every(Boolean), `${deployment.metadata.name} has startup, liveness and readiness probes`).toBe(
          true,
        );
        for (const probe of probes) {
          expect(probe?.httpGet?.port).toBe('http');
          expect(app.hasRoute({ method: 'GET', url: probe?.httpGet?.path ?? '' }), probe?.httpGet?.path).toBe(true);
        }
        expect(container.readinessProbe?.httpGet?.path).toBe('/health/ready');
        expect(container.livenessProbe?.httpGet?.path).toBe('/health/live');
        const annotations = deployment.spec?.template?.metadata?.annotations ?? {};
        expect(annotations['prometheus.io/scrape']).toBe('true');
        expect(Number(annotations['prometheus.io/port'])).toBe(port);
        expect(app.hasRoute({ method: 'GET', url: annotations['prometheus.io/path'] ?? '' })).toBe(true);
      }
    } finally {
      await app.close();
    }
  });

  it.each(overlays)('%s: graceful termination outlasts the shutdown it waits for', (overlay) => {
    const objects = objectsOf(overlay);
    for (const deployment of deployments(objects)) {
      const pod = deployment.spec?.template?.spec as PodSpec;
      const container = mainContainer(deployment);
      const env = containerEnv(container, objects);
      const preStopMs = (container.lifecycle?.preStop?.sleep?.seconds ?? 0) * 1000;
      const graceMs = (pod.terminationGracePeriodSeconds ?? 30) * 1000;
      const shutdownMs = Number(env.SHUTDOWN_TIMEOUT_MS);
      expect(preStopMs, `${deployment.metadata.name}: a preStop pause while endpoints drop the pod`).toBeGreaterThan(0);
      expect(preStopMs + shutdownMs, `${deployment.metadata.name}: preStop + SHUTDOWN_TIMEOUT_MS < grace`).toBeLessThan(
        graceMs,
      );
      if (container.args?.[0] === 'sender') {
        const config = loadConfig(senderConfig, env);
        expect(config.PROVIDER_TIMEOUT_MS, 'a provider call ends before the shutdown deadline').toBeLessThan(
          shutdownMs,
        );
      }
    }
  });

  it.each(overlays)('%s: pods run as non-root on a read-only root filesystem, with resources', (overlay) => {
    const objects = objectsOf(overlay).filter((o) => o.kind === 'Deployment' || o.kind === 'Job');
    for (const object of objects) {
      const pod = object.spec?.template?.spec as PodSpec;
      expect(pod.securityContext?.runAsNonRoot, object.metadata.name).toBe(true);
      for (const container of pod.containers) {
        expect(container.securityContext).toMatchObject({
          allowPrivilegeEscalation: false,
          readOnlyRootFilesystem: true,
          capabilities: { drop: ['ALL'] },
        });
        expect(container.resources?.requests?.cpu, object.metadata.name).toBeDefined();
        expect(container.resources?.requests?.memory, object.metadata.name).toBeDefined();
        expect(container.resources?.limits?.memory, object.metadata.name).toBeDefined();
        expect(Object.keys(commands), `${object.metadata.name} runs an image command`).toContain(container.args?.[0]);
      }
    }
  });

  it.each(overlays)('%s: autoscaling only planner and sender, never past the partitions they consume', (overlay) => {
    const objects = objectsOf(overlay);
    const hpas = objects.filter((o) => o.kind === 'HorizontalPodAutoscaler');
    expect(hpas.map((h) => h.spec?.scaleTargetRef?.name).sort()).toEqual(['outreach-planner', 'outreach-sender']);
    const partitions = {
      'outreach-planner': declaredTopics().find((t) => t.name === 'outreach.requested.v1')?.partitions ?? 0,
      'outreach-sender': declaredTopics().find((t) => t.name === 'outreach.send-requested.v1')?.partitions ?? 0,
    } as Record<string, number>;
    for (const hpa of hpas) {
      const target = hpa.spec?.scaleTargetRef?.name ?? '';
      expect(hpa.spec?.maxReplicas, target).toBeLessThanOrEqual(partitions[target] ?? 0);
      expect(hpa.spec?.minReplicas, target).toBeLessThanOrEqual(hpa.spec?.maxReplicas ?? 0);
    }
  });

  it('production-strimzi: one KafkaTopic per declared topic, with its partitions and configuration', () => {
    const kafkaTopics = objectsOf('production-strimzi').filter((o) => o.kind === 'KafkaTopic');
    const declared = declaredTopics('', undefined, STRIMZI_REPLICAS);
    expect(kafkaTopics.map((t) => t.spec?.topicName).sort()).toEqual(declared.map((t) => t.name).sort());
    for (const topic of declared) {
      const resource = kafkaTopics.find((t) => t.spec?.topicName === topic.name) as K8sObject;
      // Strimzi's KafkaTopic v1beta2: spec.partitions and spec.replicas integers, spec.config strings.
      expect(resource.metadata.labels?.['strimzi.io/cluster']).toBe(STRIMZI_CLUSTER);
      expect(resource.spec).toEqual({
        topicName: topic.name,
        partitions: topic.partitions,
        replicas: STRIMZI_REPLICAS,
        config: topic.config,
      });
    }
  });
});

describe('generated and image files', () => {
  it('the Strimzi topics file is what the topic declaration generates (npm run deploy:gen)', () => {
    expect(readFileSync(strimziTopicsFile, 'utf8')).toBe(strimziTopicsYaml());
  });

  it("every image command has its package script and its entry point's source", () => {
    const rootScripts = (JSON.parse(readFileSync(join(root, 'package.json'), 'utf8')) as { scripts: object }).scripts;
    for (const [command, { script, run }] of Object.entries(commands)) {
      const [workspace, name] = script.split('#') as [string, string];
      const scripts = workspace
        ? (JSON.parse(readFileSync(join(root, workspace, 'package.json'), 'utf8')) as { scripts: object }).scripts
        : rootScripts;
      expect(Object.keys(scripts), `${command}: script ${script}`).toContain(name);
      for (const [file] of run) {
        const source = (file ?? '').replace('/dist/', '/src/').replace(/\.js$/, '.ts');
        expect(existsSync(join(root, source)), `${command}: ${source}`).toBe(true);
      }
    }
  });

  it('the Dockerfile: pinned Node 24 base, non-root user, the entrypoint and every file it copies', () => {
    const dockerfile = readFileSync(join(root, 'Dockerfile'), 'utf8');
    expect(dockerfile).toMatch(/^ARG NODE_IMAGE=node:24\.\d+\.\d+-[a-z]+-slim$/m);
    expect(dockerfile).toMatch(/^USER 10001:10001$/m);
    expect(dockerfile).toContain('ENTRYPOINT ["node", "/app/deploy/docker/entrypoint.mjs"]');
    for (const match of dockerfile.matchAll(/^COPY (?!--from)(.+) (\S+)$/gm)) {
      for (const source of (match[1] ?? '').split(' ')) expect(existsSync(join(root, source)), source).toBe(true);
    }
    // Every service's package.json, dist and migrations reach the runtime stage.
    for (const service of serviceNames) {
      for (const part of ['package.json', 'dist', 'migrations']) {
        expect(dockerfile).toContain(`COPY --from=build /app/services/${service}/${part} services/${service}/`);
      }
    }
    const dockerignore = readFileSync(join(root, '.dockerignore'), 'utf8').split('\n');
    for (const ignored of ['.git', '.infra', '**/node_modules', '**/dist']) expect(dockerignore).toContain(ignored);
  });

  it('one Node.js version: .node-version, .nvmrc, the image, scripts/use-node.sh, engines and @types/node (ADR 008)', () => {
    const version = readFileSync(join(root, '.node-version'), 'utf8').trim();
    expect(version).toMatch(/^24\.\d+\.\d+$/);
    expect(readFileSync(join(root, '.nvmrc'), 'utf8').trim()).toBe(version);
    expect(readFileSync(join(root, 'Dockerfile'), 'utf8')).toContain(`ARG NODE_IMAGE=node:${version}-bookworm-slim\n`);
    expect(readFileSync(join(root, 'scripts', 'use-node.sh'), 'utf8')).toContain(`pinned_version="${version}"`);
    const manifest = JSON.parse(readFileSync(join(root, 'package.json'), 'utf8')) as {
      engines: { node: string };
      devDependencies: Record<string, string>;
    };
    // engines admits the 24 LTS line from its first LTS release; the pinned version is inside it.
    const [, lowestMinor] = /^>=24\.(\d+) <25$/.exec(manifest.engines.node) ?? [];
    expect(lowestMinor, manifest.engines.node).toBeDefined();
    expect(Number(version.split('.')[1])).toBeGreaterThanOrEqual(Number(lowestMinor));
    expect(manifest.devDependencies['@types/node']).toMatch(/^24\./);
  });

  it('the entrypoint runs a command, rejects an unknown one with the list, and migrates named services only', () => {
    const entrypoint = join(root, 'deploy', 'docker', 'entrypoint.mjs');
    const unknown = spawnSync(process.execPath, [entrypoint, 'mailer'], { encoding: 'utf8' });
    expect(unknown.status).toBe(64);
    expect(unknown.stderr).toContain('unknown command "mailer". Commands: planner, sender');
    const badMigrate = spawnSync(process.execPath, [entrypoint, 'migrate', 'mailer'], { encoding: 'utf8' });
    expect(badMigrate.status).toBe(64);
    expect(badMigrate.stderr).toContain('migrate: no service named mailer');
    const help = spawnSync(process.execPath, [entrypoint, '--help'], { encoding: 'utf8' });
    expect(help.status).toBe(0);
  });
});

describe('docker-compose.yml', () => {
  const compose = parseYaml(readFileSync(join(root, 'docker-compose.yml'), 'utf8'), { merge: true }) as {
    services: Record<
      string,
      {
        image?: string;
        command?: string[];
        environment?: Record<string, string>;
        healthcheck?: { test?: string[]; disable?: boolean };
        depends_on?: Record<string, { condition: string }>;
        read_only?: boolean;
        user?: string;
      }
    >;
  };
  /** `${VAR:-default}` as compose resolves it with VAR unset. */
  const resolved = (env: Record<string, string> = {}) =>
    Object.fromEntries(Object.entries(env).map(([k, v]) => [k, String(v).replace(/\$\{[A-Z_]+:-([^}]*)\}/g, '$1')]));

  it('runs Kafka (KRaft), PostgreSQL, Mailpit, the setup jobs and the four services', () => {
    expect(Object.keys(compose.services).sort()).toEqual(
      [
        'apicurio',
        'experiment',
        'kafka',
        'liveness',
        'mailpit',
        'migrate',
        'planner',
        'postgres',
        'schemas',
        'sender',
        'topics',
      ].sort(),
    );
    // ADR 011: the registry is Apicurio, at the version `npm run infra:up` runs.
    expect(compose.services.apicurio?.image).toBe('apicurio/apicurio-registry:3.3.3');
    expect(compose.services.kafka?.image).toMatch(/^apache\/kafka:\d+\.\d+\.\d+$/);
    expect(compose.services.kafka?.environment?.KAFKA_PROCESS_ROLES).toBe('broker,controller');
    expect(compose.services.mailpit?.image).toMatch(/^axllent\/mailpit:v\d/);
  });

  it("each service's environment satisfies its config schema, and the setup jobs' too", () => {
    for (const service of serviceNames) {
      const definition = compose.services[service];
      expect(definition?.command).toEqual([service]);
      checkServiceEnv(service, resolved(definition?.environment), `compose/${service}`);
    }
    const migrateEnv = resolved(compose.services.migrate?.environment);
    for (const service of serviceNames) checkServiceEnv(service, migrateEnv, 'compose/migrate', true);
    expect(compose.services.topics?.environment?.KAFKA_BROKERS).toBe(
      compose.services.sender?.environment?.KAFKA_BROKERS,
    );
    const planner = loadConfig(plannerConfig, resolved(compose.services.planner?.environment)) as PlannerConfig;
    expect(planner.EXPERIMENT_URL).toBe('http://experiment:8080');
    expect(compose.services.sender?.environment?.SMTP_HOST).toBe('mailpit');
  });

  it('services wait for healthy infrastructure and finished setup jobs, and have healthchecks', () => {
    for (const service of serviceNames) {
      const definition = compose.services[service];
      expect(definition?.depends_on).toMatchObject({
        kafka: { condition: 'service_healthy' },
        postgres: { condition: 'service_healthy' },
        topics: { condition: 'service_completed_successfully' },
        migrate: { condition: 'service_completed_successfully' },
      });
      expect(definition?.healthcheck?.test).toEqual([
        'CMD',
        'node',
        '/app/deploy/docker/healthcheck.mjs',
        '/health/ready',
      ]);
      expect(definition?.read_only).toBe(true);
      expect(definition?.user).toBe('10001:10001');
    }
    expect(compose.services.planner?.depends_on?.experiment).toEqual({ condition: 'service_healthy' });
    expect(compose.services.sender?.depends_on?.mailpit).toEqual({ condition: 'service_healthy' });
    for (const job of ['topics', 'migrate', 'schemas']) {
      expect(Object.keys(commands)).toContain(compose.services[job]?.command?.[0]);
    }
  });
});
