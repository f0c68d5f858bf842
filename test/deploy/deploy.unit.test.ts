/**
 * The deployment artefacts, checked where no Docker engine or cluster runs: the Kustomize overlays
 * rendered by `kubectl kustomize` and every object validated against the Kubernetes schemas
 * (kubernetes-models) and Strimzi's v1 schemas, each container's environment in every overlay and in
 * docker-compose.yml checked against the config schema of what it runs, with its credentials as mounted
 * files, its Kafka principal and ACLs as generated, and its egress allowed (manifest-checks.ts, which the
 * last block attacks with crafted manifests); probes against the routes the services serve, and the
 * image's commands against the package scripts and sources.
 */
import { execFile, spawnSync } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { promisify } from 'node:util';
import {
  BaseConfigSchema,
  buildHttpApp,
  createLogger,
  declaredTopics,
  kafkaAcls,
  loadConfig,
  renderStrimziKafkaUsers,
} from '@outreach/shared';
import { parseAllDocuments, parse as parseYaml } from 'yaml';
import { beforeAll, describe, expect, it } from 'vitest';
import { ConfigSchema as plannerConfig, type Config as PlannerConfig } from '../../services/planner/src/config.js';
import { checkConfig as checkSenderConfig, ConfigSchema as senderConfig } from '../../services/sender/src/config.js';
import type { Config as SenderConfig } from '../../services/sender/src/config.js';
import { parseUsers, verifyLogin } from '../../services/console/src/security/users.js';
import { generatedFiles, STRIMZI_CLUSTER, STRIMZI_REPLICAS } from '../../scripts/deploy.js';
import { STRIMZI_USER_ROLES, strimziKafkaUsers } from '../../scripts/lib/strimzi.js';
import {
  commandOf,
  connectionsOf,
  containerEnv,
  credentialProblems,
  egressAllowed,
  ingressProblems,
  isKafkaService,
  kafkaServiceNames,
  loadServiceConfig,
  mountProblems,
  networkProblems,
  podsOf,
  resolveFile,
  serviceCallProblems,
  serviceNames,
  serviceReads,
  startupProblems,
  strimziProblems,
  type Container,
  type K8sObject,
  type PodSpec,
  type Service,
} from './manifest-checks.js';

const root = join(import.meta.dirname, '..', '..');
const kubernetesDir = join(root, 'deploy', 'kubernetes');
const productionOverlays = [
  'production',
  'production-strimzi',
  'production-strimzi-mtls',
  'production-msk-iam',
  'production-confluent',
  'production-aiven',
] as const;
const overlays = ['dev', ...productionOverlays] as const;
const strimziOverlays = ['production-strimzi', 'production-strimzi-mtls'] as const;
const hasKubectl = !spawnSync('kubectl', ['version', '--client'], { encoding: 'utf8' }).error;

const renders = new Map<string, Promise<K8sObject[]>>();
/** An overlay as `kubectl kustomize` renders it; each once, the overlays side by side. */
function render(overlay: string): Promise<K8sObject[]> {
  const cached = renders.get(overlay);
  if (cached) return cached;
  const rendering = promisify(execFile)('kubectl', ['kustomize', join(kubernetesDir, 'overlays', overlay)], {
    encoding: 'utf8',
    maxBuffer: 16 * 1024 * 1024,
  }).then(
    ({ stdout }) => parseAllDocuments(stdout).map((d) => d.toJSON() as K8sObject),
    (error: { stderr?: string }) => {
      throw new Error(`kubectl kustomize ${overlay} failed:\n${error.stderr ?? String(error)}`);
    },
  );
  renders.set(overlay, rendering);
  return rendering;
}
/** Rendering and the start-up checks (a config schema compiled per container) take seconds on a busy machine. */
const slow = { timeout: 60_000 };

/** The model class of an apiVersion/kind from kubernetes-models, e.g. apps/v1 Deployment. */
async function modelFor(apiVersion: string, kind: string): Promise<{ new (data: unknown): { validate(): void } }> {
  const module = (await import(`kubernetes-models/${apiVersion}/${kind}`)) as Record<string, unknown>;
  return module[kind] as { new (data: unknown): { validate(): void } };
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

/** A container's environment as the pod would see it; secret references become placeholders. */
const envOf = (container: Container, objects: readonly K8sObject[]) => containerEnv(container, objects, outOfBand).env;

/**
 * Validates `env` as the service would at start; also rejects variables the service does not know.
 * `migrateOnly`: the `migrate` command loads the schema but builds no app, so the sender's rules
 * between settings (checkConfig, its identity in production) do not apply to the migrate Job.
 */
function checkServiceEnv(service: Service, env: Record<string, string>, where: string, migrateOnly = false): void {
  const config = loadServiceConfig(service, env, migrateOnly);
  if (service === 'sender' && !migrateOnly) checkSenderConfig(config as SenderConfig);
  // The migrate job's one environment serves every service: the base settings are known to all there.
  const known = new Set([
    ...serviceReads(service, migrateOnly),
    ...(migrateOnly ? Object.keys(BaseConfigSchema.properties) : []),
  ]);
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

/** Every check of manifest-checks.ts over one rendered overlay. */
function allProblems(objects: readonly K8sObject[]): string[] {
  return [
    ...credentialProblems(objects, outOfBand),
    ...mountProblems(objects, outOfBand),
    ...startupProblems(objects, outOfBand),
    ...networkProblems(objects, outOfBand),
    ...strimziProblems(objects),
    ...ingressProblems(objects),
  ];
}

describe.skipIf(!hasKubectl)('Kubernetes overlays (rendered with kubectl kustomize)', slow, () => {
  const rendered = new Map<string, K8sObject[]>();
  beforeAll(async () => {
    const all = await Promise.all(overlays.map((overlay) => render(overlay)));
    overlays.forEach((overlay, i) => rendered.set(overlay, all[i] ?? []));
  }, slow.timeout);
  const objectsOf = (overlay: string) => rendered.get(overlay) ?? [];

  it.each(overlays)('%s: every object is valid against its Kubernetes or Strimzi v1 schema', async (overlay) => {
    const problems: string[] = [];
    for (const object of objectsOf(overlay)) {
      if (object.apiVersion.startsWith('kafka.strimzi.io/')) continue; // strimziProblems, below
      const Model = await modelFor(object.apiVersion, object.kind);
      try {
        new Model(object).validate();
      } catch (error) {
        problems.push(`${object.kind}/${object.metadata.name}: ${(error as Error).message}`);
      }
    }
    expect(problems).toEqual([]);
    expect(strimziProblems(objectsOf(overlay))).toEqual([]);
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
      overlay.startsWith('production-strimzi') ? ['outreach-migrate'] : ['outreach-migrate', 'outreach-topics'],
    );
    expect(named('NetworkPolicy')).toEqual(
      expect.arrayContaining(['outreach-egress', 'outreach-egress-kafka', 'outreach-egress-postgres']),
    );
    // Only the sender sends mail (dev's null provider: none).
    const smtp = objects.find((o) => o.kind === 'NetworkPolicy' && o.metadata.name === 'outreach-egress-smtp');
    if (overlay === 'dev') expect(smtp).toBeUndefined();
    else expect(smtp?.spec?.podSelector).toEqual({ matchLabels: { 'app.kubernetes.io/name': 'outreach-sender' } });
    // No secret values are committed: Secrets are referenced, never defined.
    expect(named('Secret')).toEqual([]);
  });

  it.each(productionOverlays)(
    '%s: ships no sender identity, and the sender refuses to start without one',
    (overlay) => {
      const objects = objectsOf(overlay);
      expect(
        objects.some((o) => o.kind === 'ConfigMap' && o.metadata.name.startsWith('outreach-sender-identity')),
      ).toBe(false);
      const sender = deployments(objects).find((d) => d.metadata.name === 'outreach-sender');
      if (!sender) throw new Error('no sender Deployment');
      const env = envOf(mainContainer(sender), objects);
      for (const name of Object.keys(outOfBand['outreach-sender-identity'] ?? {})) delete env[name];
      expect(() => checkSenderConfig(loadConfig(senderConfig, env) as SenderConfig)).toThrow(/MAIL_FROM must be set/);
    },
  );

  it.each(overlays)(
    '%s: the sender believes X-Forwarded-For one hop deep behind the production ingress; the others never',
    (overlay) => {
      const objects = objectsOf(overlay);
      for (const deployment of deployments(objects)) {
        const env = envOf(mainContainer(deployment), objects);
        const expected = overlay !== 'dev' && deployment.metadata.name === 'outreach-sender' ? '1' : '';
        expect(env.TRUST_PROXY ?? '', deployment.metadata.name).toBe(expected);
      }
      expect(ingressProblems(objects)).toEqual([]);
    },
  );

  it.each(overlays)(
    "%s: each container's environment is what its command reads at start, files from its mounts",
    (overlay) => {
      const objects = objectsOf(overlay);
      for (const deployment of deployments(objects)) {
        const command = commandOf(mainContainer(deployment));
        expect(command?.services, `${deployment.metadata.name} runs a service`).toHaveLength(1);
      }
      // The migrate Job runs every service's `server.js migrate`, one container each.
      const migrate = objects.find((o) => o.kind === 'Job' && o.metadata.name === 'outreach-migrate');
      const migrated = (migrate?.spec?.template?.spec.containers ?? []).flatMap((c) => commandOf(c)?.services ?? []);
      expect(migrated.sort()).toEqual([...serviceNames].sort());
      expect(startupProblems(objects, outOfBand)).toEqual([]);
      expect(mountProblems(objects, outOfBand)).toEqual([]);
    },
  );

  it.each(overlays)(
    '%s: the console reaches the four services and PostgreSQL, Kafka and the registry only for its dead-letter pages (production), never mail',
    (overlay) => {
      const objects = objectsOf(overlay);
      const console = deployments(objects).find((d) => d.metadata.name === 'outreach-console');
      if (!console) throw new Error('no console Deployment');
      const labels = console.spec?.template?.metadata?.labels ?? {};
      expect(serviceCallProblems(objects, outOfBand)).toEqual([]);
      const container = mainContainer(console);
      const env = envOf(container, objects);
      const db = new URL(env.DATABASE_URL ?? '');
      expect(egressAllowed(objects, labels, Number(db.port || 5432), db.hostname)).toBe(true);
      const shared = envOf(
        mainContainer(deployments(objects).find((d) => d.metadata.name === 'outreach-sender') as K8sObject),
        objects,
      );
      if (overlay === 'dev') {
        // The dead-letter pages are off: no brokers, no registry, no egress to either.
        for (const other of ['KAFKA_BROKERS', 'SCHEMA_REGISTRY_URL']) expect(env[other], other).toBeUndefined();
      } else {
        // On, with the services' brokers and registry (so an overlay that moves them moves the console's),
        // as its own principal: its credentials from its own Secret or KafkaUser.
        expect(env.KAFKA_BROKERS).toBe(shared.KAFKA_BROKERS);
        expect(env.SCHEMA_REGISTRY_URL).toBe(shared.SCHEMA_REGISTRY_URL);
        expect(env.KAFKA_SSL).toBe('true');
        const client = console.spec?.template?.spec.volumes?.find((v) => v.name === 'kafka-client')?.secret?.secretName;
        if (env.KAFKA_OAUTH_PROVIDER !== 'aws-msk-iam')
          expect(client).toBe(overlay.startsWith('production-strimzi') ? 'console' : 'outreach-kafka-console');
        else expect(console.spec?.template?.spec.serviceAccountName).toBe('outreach-console');
      }
      // Beyond the platform's pods: only the ports it connects to (and DNS); never mail or HTTPS.
      const command = commandOf(container);
      if (!command) throw new Error('the console runs no command');
      const used = new Set(connectionsOf(command, env).map((c) => c.port));
      if (overlay !== 'dev') expect(used.size, 'PostgreSQL, the brokers and the registry').toBeGreaterThanOrEqual(3);
      for (const port of [9092, 9093, 9094, 9096, 9098, 8080, 8081, 25, 465, 587, 443].filter((p) => !used.has(p)))
        expect(egressAllowed(objects, labels, port), `port ${port}`).toBe(false);
      // Its API tokens are its own Secret's, not the services' token lists.
      const volumes = console.spec?.template?.spec.volumes ?? [];
      expect(volumes.map((v) => v.secret?.secretName).filter(Boolean)).not.toContain('outreach-api-tokens');
      if (overlay !== 'dev') {
        expect(env.CONSOLE_USERS_FILE ?? '', 'production signs in through the proxy').toBe('');
        expect(env.CONSOLE_PROXY_SECRET_FILE).toBe('/etc/outreach/console/proxy-secret');
        expect(env.CONSOLE_COOKIE_SECURE ?? 'true').toBe('true');
      }
    },
  );

  it.each(overlays)(
    '%s: data-subject requests (ADR 014): one suppression key in the four, an erase scope, the planner reaching its peers',
    (overlay) => {
      const objects = objectsOf(overlay);
      const keys = new Set<string>();
      for (const pod of podsOf(deployments(objects))) {
        const container = pod.spec.containers[0] as Container;
        const command = commandOf(container);
        if (!isKafkaService(command?.services[0])) continue;
        const env = envOf(container, objects);
        const file = resolveFile(pod, container, env.SUPPRESSION_KEY_FILE ?? '');
        expect(file, `${pod.object.metadata.name}: SUPPRESSION_KEY_FILE`).not.toHaveProperty('problem');
        if (!('problem' in file)) keys.add(`${file.kind} ${file.name} ${file.key}`);
        expect(env.API_TOKENS_ERASE_FILE, pod.object.metadata.name).toBe('/etc/outreach/api-tokens/erase');
      }
      expect([...keys]).toEqual(['secret outreach-suppression-key key']);
      const planner = deployments(objects).find((d) => d.metadata.name === 'outreach-planner');
      const env = envOf(mainContainer(planner as K8sObject), objects);
      expect(env).toMatchObject({
        SENDER_URL: 'http://outreach-sender',
        LIVENESS_URL: 'http://outreach-liveness',
        EXPERIMENT_URL: 'http://outreach-experiment',
        SENDER_TOKEN_FILE: '/etc/outreach/sender-token/token',
        LIVENESS_TOKEN_FILE: '/etc/outreach/liveness-token/token',
      });
      // The console holds no erase token and no suppression key.
      const console = mainContainer(
        deployments(objects).find((d) => d.metadata.name === 'outreach-console') as K8sObject,
      );
      expect(Object.keys(envOf(console, objects)).filter((k) => /ERASE|SUPPRESSION/.test(k))).toEqual([]);
      expect(serviceCallProblems(objects, outOfBand)).toEqual([]);
    },
  );

  it.each(overlays)('%s: no credential in any environment variable: each is a file from a Secret', (overlay) => {
    expect(credentialProblems(objectsOf(overlay), outOfBand)).toEqual([]);
  });

  it.each(overlays)('%s: the egress NetworkPolicies allow every port the pods connect to', (overlay) => {
    expect(networkProblems(objectsOf(overlay), outOfBand)).toEqual([]);
  });

  it.each(productionOverlays)(
    '%s: secured: Kafka over TLS, PostgreSQL verify-full as runtime roles, migrations as the migrator, SMTP with TLS',
    (overlay) => {
      const objects = objectsOf(overlay);
      for (const pod of podsOf(objects)) {
        for (const container of [...(pod.spec.initContainers ?? []), ...pod.spec.containers]) {
          const command = commandOf(container);
          const env = envOf(container, objects);
          const where = `${pod.object.metadata.name}/${container.name}`;
          if (command?.role && !command.migrateOnly) {
            expect(env.KAFKA_SSL, `${where}: KAFKA_SSL`).toBe('true');
            // A principal of its own: SASL, a client certificate or an IAM token.
            expect(env.KAFKA_SASL_MECHANISM || env.KAFKA_SSL_CERT_FILE, `${where}: authenticates`).toBeTruthy();
          }
          if (!command?.postgres) continue;
          expect(env.DATABASE_SSL_MODE, `${where}: DATABASE_SSL_MODE`).toBe('verify-full');
          expect(env.DATABASE_SSL_CA_FILE, `${where}: DATABASE_SSL_CA_FILE`).not.toBe('');
          const user = decodeURIComponent(new URL(env.DATABASE_URL ?? '').username);
          if (command.migrateOnly) {
            expect(user, `${where}: migrates as the migrator`).toBe('outreach_migrator');
            expect(env.DATABASE_RUNTIME_ROLE, `${where}: grants its service's runtime role`).toBe(command.services[0]);
          } else {
            expect(user, `${where}: runs as its runtime role`).toBe(command.services[0]);
            expect(env.MIGRATE_ON_START, `${where}: a runtime role has no DDL`).toBe('false');
          }
          if (command.smtp) {
            expect(env.SMTP_REQUIRE_TLS ?? 'true', `${where}: STARTTLS required`).toBe('true');
            expect(env.SMTP_PASSWORD_FILE, `${where}: SMTP password from a file`).toBe('/etc/outreach/smtp/password');
            expect(env.SMTP_TLS_CA_FILE, `${where}: the relay's CA`).toBe('/etc/outreach/smtp/ca.crt');
          }
        }
      }
    },
  );

  it.each(productionOverlays)(
    '%s: the first apply of a rollout (docs/operations.md, section 1) holds the setup Jobs and what they use, no service',
    (overlay) => {
      // kubectl apply -k . -l 'app.kubernetes.io/name notin (outreach-planner, ...)': a set-based `notin`
      // also selects objects without the label.
      const services = new Set(serviceNames.map((s) => `outreach-${s}`));
      const first = objectsOf(overlay).filter(
        (o) => !services.has(o.metadata.labels?.['app.kubernetes.io/name'] ?? ''),
      );
      expect(first.filter((o) => o.kind === 'Deployment')).toEqual([]);
      const jobs = first.filter((o) => o.kind === 'Job');
      expect(jobs.map((j) => j.metadata.name)).toContain('outreach-migrate');
      for (const pod of podsOf(jobs)) {
        for (const container of [...(pod.spec.initContainers ?? []), ...pod.spec.containers]) {
          expect(containerEnv(container, first, outOfBand).problems, container.name).toEqual([]);
        }
      }
    },
  );

  it.each(strimziOverlays)(
    '%s: a KafkaUser per service, the console and the publisher, with the generated ACLs, and each pod its own',
    (overlay) => {
      const objects = objectsOf(overlay);
      const users = objects.filter((o) => o.kind === 'KafkaUser');
      expect(users.map((u) => u.metadata.name).sort()).toEqual([...STRIMZI_USER_ROLES].sort());
      const type = overlay === 'production-strimzi' ? 'scram-sha-512' : 'tls';
      // Exactly the generated resources (the ACLs are also compared one by one in strimziProblems).
      for (const expected of strimziKafkaUsers(type)) {
        const { namespace: _namespace, ...metadata } = users.find((u) => u.metadata.name === expected.metadata.name)
          ?.metadata ?? { name: '' };
        expect({ ...users.find((u) => u.metadata.name === expected.metadata.name), metadata }).toEqual(expected);
      }
      // Each service's pod reads its Kafka credentials from its own user's Secret.
      for (const deployment of deployments(objects)) {
        const role = mainContainer(deployment).args?.[0];
        if (!isKafkaService(role) && role !== 'console') continue;
        const volume = deployment.spec?.template?.spec.volumes?.find((v) => v.name === 'kafka-client');
        expect(volume?.secret?.secretName, deployment.metadata.name).toBe(role);
      }
    },
  );

  it.each(overlays)('%s: probes use the routes every service serves, on the port it listens on', async (overlay) => {
    const app = await buildHttpApp({
      name: 'probe-check',
      logger: createLogger({ name: 'probe-check', level: 'silent' }),
    });
    try {
      const objects = objectsOf(overlay);
      for (const deployment of deployments(objects)) {
        const container = mainContainer(deployment);
        const env = envOf(container, objects);
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
      const env = envOf(container, objects);
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
    for (const { object, spec: pod } of podsOf(objectsOf(overlay))) {
      expect(pod.securityContext?.runAsNonRoot, object.metadata.name).toBe(true);
      for (const container of [...(pod.initContainers ?? []), ...pod.containers]) {
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

  it.each(strimziOverlays)(
    '%s: one KafkaTopic (v1) per declared topic, with its partitions and configuration',
    (overlay) => {
      const kafkaTopics = objectsOf(overlay).filter((o) => o.kind === 'KafkaTopic');
      const declared = declaredTopics('', undefined, STRIMZI_REPLICAS);
      expect(kafkaTopics.map((t) => t.spec?.topicName).sort()).toEqual(declared.map((t) => t.name).sort());
      for (const topic of declared) {
        const resource = kafkaTopics.find((t) => t.spec?.topicName === topic.name) as K8sObject;
        // Strimzi's KafkaTopic v1: spec.partitions and spec.replicas integers, spec.config strings.
        expect(resource.apiVersion).toBe('kafka.strimzi.io/v1');
        expect(resource.metadata.labels?.['strimzi.io/cluster']).toBe(STRIMZI_CLUSTER);
        expect(resource.spec).toEqual({
          topicName: topic.name,
          partitions: topic.partitions,
          replicas: STRIMZI_REPLICAS,
          config: topic.config,
        });
      }
    },
  );
});

/**
 * The checks are only as good as their power to fail: each attack below takes a rendered overlay,
 * breaks it the way a careless or hostile change would, and expects the problem named.
 */
describe.skipIf(!hasKubectl)('the manifest checks, given crafted manifests', slow, () => {
  const pristine = new Map<string, K8sObject[]>();
  beforeAll(async () => {
    for (const overlay of overlays) pristine.set(overlay, await render(overlay));
  }, slow.timeout);
  /** A deep copy of an overlay, to break. */
  const copyOf = (overlay: string): K8sObject[] => structuredClone(pristine.get(overlay) ?? []);
  const deployment = (objects: K8sObject[], name: string) => {
    const found = objects.find((o) => o.kind === 'Deployment' && o.metadata.name === `outreach-${name}`);
    if (!found) throw new Error(`no Deployment outreach-${name}`);
    return found;
  };
  const configMap = (objects: K8sObject[], prefix: string) => {
    const found = objects.find((o) => o.kind === 'ConfigMap' && o.metadata.name.startsWith(`${prefix}-`));
    if (!found?.data) throw new Error(`no ConfigMap ${prefix}`);
    return found.data;
  };

  it('the pristine overlays pass every check', () => {
    for (const [overlay, objects] of pristine) expect(allProblems(objects), overlay).toEqual([]);
  });

  it('the console: a service it cannot reach, a URL that is no Service of the overlay, Kafka egress, no sign-in, a token it cannot read', () => {
    const withoutPolicy = copyOf('production').filter(
      (o) => !(o.kind === 'NetworkPolicy' && o.metadata.name === 'outreach-egress-console'),
    );
    expect(serviceCallProblems(withoutPolicy)).toEqual(
      expect.arrayContaining([
        expect.stringMatching(/PLANNER_URL: no NetworkPolicy lets it reach the pods of outreach-planner/),
      ]),
    );
    const elsewhere = copyOf('production');
    configMap(elsewhere, 'outreach-console-config').SENDER_URL = 'http://sender.example.com';
    expect(serviceCallProblems(elsewhere)).toEqual([
      expect.stringMatching(/SENDER_URL is http:\/\/sender\.example\.com, not the Service outreach-sender/),
    ]);
    // Dev ships the dead-letter pages off: Kafka egress for the console there is a port it never uses.
    const kafka = copyOf('dev');
    const policy = kafka.find((o) => o.kind === 'NetworkPolicy' && o.metadata.name === 'outreach-egress-kafka');
    policy?.spec?.podSelector?.matchExpressions?.[0]?.values?.push('outreach-console');
    expect(networkProblems(kafka, outOfBand)).toEqual(
      expect.arrayContaining([
        expect.stringMatching(
          /^Deployment\/outreach-console: NetworkPolicy outreach-egress-kafka lets it reach port 9092/,
        ),
      ]),
    );
    // Production turns them on: without the console in the Kafka egress, its brokers are unreachable.
    const unreachable = copyOf('production');
    const narrowed = unreachable.find((o) => o.kind === 'NetworkPolicy' && o.metadata.name === 'outreach-egress-kafka')
      ?.spec?.podSelector?.matchExpressions?.[0];
    if (narrowed) narrowed.values = (narrowed.values ?? []).filter((v) => v !== 'outreach-console');
    expect(networkProblems(unreachable, outOfBand)).toEqual(
      expect.arrayContaining([expect.stringMatching(/outreach-console.*KAFKA_BROKERS/)]),
    );
    // ... and with another principal's credentials, it would act as that principal.
    const borrowed = copyOf('production');
    const client = deployment(borrowed, 'console').spec?.template?.spec.volumes?.find((v) => v.name === 'kafka-client');
    if (client?.secret) client.secret.secretName = 'outreach-kafka-sender';
    expect(startupProblems(borrowed, outOfBand)).toEqual(
      expect.arrayContaining([
        expect.stringMatching(
          /outreach-console\/console: reads its Kafka credentials from Secret outreach-kafka-sender, which holds sender's, not console's/,
        ),
      ]),
    );
    const noSignIn = copyOf('production');
    configMap(noSignIn, 'outreach-console-config').CONSOLE_PROXY_CIDRS = '';
    expect(startupProblems(noSignIn, outOfBand)).toEqual(
      expect.arrayContaining([expect.stringMatching(/console: no sign-in/)]),
    );
    const unmounted = copyOf('dev');
    const container = mainContainer(deployment(unmounted, 'console'));
    container.volumeMounts = (container.volumeMounts ?? []).filter((m) => m.name !== 'console');
    expect(mountProblems(unmounted, outOfBand)).toEqual(
      expect.arrayContaining([
        expect.stringMatching(/outreach-console\/console: CONSOLE_READ_TOKEN_FILE: .* is under no volumeMount/),
      ]),
    );
  });

  it("data-subject wiring (ADR 014): the planner's peers unreachable or elsewhere, a service without the suppression key, the erase scope or a peer token", () => {
    const withoutPolicy = copyOf('production').filter(
      (o) => !(o.kind === 'NetworkPolicy' && o.metadata.name === 'outreach-egress-subject-parts'),
    );
    expect(serviceCallProblems(withoutPolicy)).toEqual([
      expect.stringMatching(
        /outreach-planner\/planner: SENDER_URL: no NetworkPolicy lets it reach the pods of outreach-sender/,
      ),
      expect.stringMatching(
        /outreach-planner\/planner: LIVENESS_URL: no NetworkPolicy lets it reach the pods of outreach-liveness/,
      ),
    ]);
    // The callee's ingress: outreach-http narrowed to the ingress controller's namespace.
    const noIngress = copyOf('production');
    const http = noIngress.find((o) => o.kind === 'NetworkPolicy' && o.metadata.name === 'outreach-http');
    if (http?.spec?.ingress?.[0]?.from) http.spec.ingress[0].from = http.spec.ingress[0].from.slice(1);
    expect(serviceCallProblems(noIngress)).toEqual(
      expect.arrayContaining([
        expect.stringMatching(
          /outreach-planner\/planner: SENDER_URL: no NetworkPolicy lets it into the pods of outreach-sender/,
        ),
      ]),
    );
    const elsewhere = copyOf('production');
    configMap(elsewhere, 'outreach-planner-config').LIVENESS_URL = 'http://liveness.example.com';
    expect(serviceCallProblems(elsewhere)).toEqual([
      expect.stringMatching(
        /outreach-planner\/planner: LIVENESS_URL is http:\/\/liveness\.example\.com, not the Service outreach-liveness/,
      ),
    ]);
    const unwired = copyOf('production');
    const liveness = mainContainer(deployment(unwired, 'liveness'));
    liveness.env = (liveness.env ?? []).filter((e) => e.name !== 'SUPPRESSION_KEY_FILE');
    const sender = mainContainer(deployment(unwired, 'sender'));
    sender.env = (sender.env ?? []).filter((e) => e.name !== 'API_TOKENS_ERASE_FILE');
    const planner = mainContainer(deployment(unwired, 'planner'));
    planner.env = (planner.env ?? []).filter((e) => e.name !== 'LIVENESS_TOKEN_FILE');
    const experiment = deployment(unwired, 'experiment').spec?.template?.spec;
    if (experiment) experiment.volumes = (experiment.volumes ?? []).filter((v) => v.name !== 'suppression-key');
    const problems = startupProblems(unwired, outOfBand);
    expect(problems).toHaveLength(4);
    expect(problems).toEqual(
      expect.arrayContaining([
        expect.stringMatching(/outreach-planner\/planner: planner: LIVENESS_TOKEN: LIVENESS_TOKEN_FILE is not set/),
        expect.stringMatching(/outreach-sender\/sender: sender: erase scope: API_TOKENS_ERASE_FILE is not set/),
        expect.stringMatching(
          /outreach-experiment\/experiment: experiment: suppression key: .*SUPPRESSION_KEY_FILE cannot be read/,
        ),
        expect.stringMatching(
          /outreach-liveness\/liveness: liveness: suppression key: SUPPRESSION_KEY_FILE is not set/,
        ),
      ]),
    );
  });

  it('a password as a plain env value, from a Secret, or in a ConfigMap is named', () => {
    const objects = copyOf('production');
    const sender = mainContainer(deployment(objects, 'sender'));
    sender.env = [
      ...(sender.env ?? []),
      { name: 'KAFKA_SASL_PASSWORD', value: 'hunter2' },
      { name: 'MAILGUN_API_KEY', valueFrom: { secretKeyRef: { name: 'outreach-secrets', key: 'mailgun' } } },
    ];
    configMap(objects, 'outreach-experiment-config').SMTP_PASSWORD = 'in-a-configmap';
    const problems = credentialProblems(objects, outOfBand);
    expect(problems).toEqual(
      expect.arrayContaining([
        expect.stringMatching(/outreach-sender\/sender: KAFKA_SASL_PASSWORD is a credential in a plain value/),
        expect.stringMatching(/outreach-sender\/sender: MAILGUN_API_KEY comes from Secret outreach-secrets .*_FILE/),
        expect.stringMatching(/outreach-experiment\/experiment: SMTP_PASSWORD is a credential in ConfigMap/),
      ]),
    );
  });

  it('a database URL with a password, a whole Secret as envFrom, and a PEM in the environment are named', () => {
    const objects = copyOf('production');
    configMap(objects, 'outreach-liveness-config').DATABASE_URL = 'postgres://liveness:s3cret@postgres.db.svc:5432/o';
    const planner = mainContainer(deployment(objects, 'planner'));
    planner.envFrom = [...(planner.envFrom ?? []), { secretRef: { name: 'outreach-secrets' } }];
    configMap(objects, 'outreach-sender-config').SMTP_TLS_SERVERNAME = '-----BEGIN CERTIFICATE-----';
    const problems = credentialProblems(objects, outOfBand);
    expect(problems).toEqual(
      expect.arrayContaining([
        expect.stringMatching(/outreach-liveness\/liveness: DATABASE_URL carries a password in its URL/),
        expect.stringMatching(/outreach-planner\/planner: envFrom Secret outreach-secrets/),
        expect.stringMatching(/outreach-sender\/sender: SMTP_TLS_SERVERNAME holds a PEM block/),
      ]),
    );
  });

  it("the planner's token for the experiment service is a file; as an environment variable, from a Secret or a value, it is named", () => {
    const pristineEnv = mainContainer(deployment(copyOf('production'), 'planner')).env ?? [];
    expect(pristineEnv.map((e) => e.name)).toContain('EXPERIMENT_TOKEN_FILE');
    expect(pristineEnv.map((e) => e.name)).not.toContain('EXPERIMENT_TOKEN');
    // No exception is left: the token from its Secret as a variable is refused like any credential.
    for (const variable of [
      { name: 'EXPERIMENT_TOKEN', valueFrom: { secretKeyRef: { name: 'outreach-secrets', key: 'EXPERIMENT_TOKEN' } } },
      { name: 'EXPERIMENT_TOKEN', value: 'plain' },
    ]) {
      const objects = copyOf('production');
      const planner = mainContainer(deployment(objects, 'planner'));
      planner.env = [...(planner.env ?? []), variable];
      expect(credentialProblems(objects, outOfBand)).toEqual([
        'valueFrom' in variable
          ? 'Deployment/outreach-planner/planner: EXPERIMENT_TOKEN comes from Secret outreach-secrets (key EXPERIMENT_TOKEN) as an environment variable: mount it and set EXPERIMENT_TOKEN_FILE'
          : 'Deployment/outreach-planner/planner: EXPERIMENT_TOKEN is a credential in a plain value: mount it from a Secret and set EXPERIMENT_TOKEN_FILE',
      ]);
    }
  });

  it("the sender's identifier key and DSN hook token are mounted; without them its start is refused by name", () => {
    const pristine = mainContainer(deployment(copyOf('production'), 'sender')).env ?? [];
    expect(pristine.map((e) => e.name)).toEqual(expect.arrayContaining(['IDENTIFIER_KEY_FILE', 'API_TOKENS_DSN_FILE']));
    const objects = copyOf('production');
    const sender = mainContainer(deployment(objects, 'sender'));
    // The identifier key dropped, and the DSN token file pointing outside every mount.
    sender.env = (sender.env ?? [])
      .filter((e) => e.name !== 'IDENTIFIER_KEY_FILE')
      .map((e) => (e.name === 'API_TOKENS_DSN_FILE' ? { ...e, value: '/run/dsn-token' } : e));
    expect(startupProblems(objects, outOfBand)).toEqual(
      expect.arrayContaining([
        expect.stringMatching(/outreach-sender\/sender: sender: API tokens: API_TOKENS_DSN_FILE: cannot read/),
      ]),
    );
    sender.env = sender.env.map((e) =>
      e.name === 'API_TOKENS_DSN_FILE' ? { ...e, value: '/etc/outreach/api-tokens/dsn' } : e,
    );
    expect(startupProblems(objects, outOfBand)).toEqual([
      expect.stringMatching(/outreach-sender\/sender: sender: identifier key: .*IDENTIFIER_KEY_FILE is required/),
    ]);
    // A rotation as docs/operations.md (section 11a) has it: the three settings merged into the config.
    const rotating = copyOf('production');
    Object.assign(configMap(rotating, 'outreach-sender-config'), {
      IDENTIFIER_PREVIOUS_KEY_FILE: '/etc/outreach/identifier-key/previous-key',
      IDENTIFIER_PREVIOUS_KEY_ID: '2026-01',
      IDENTIFIER_PREVIOUS_KEY_UNTIL: new Date(Date.now() + 30 * 86_400_000).toISOString(),
    });
    expect(allProblems(rotating)).toEqual([]);
    configMap(rotating, 'outreach-sender-config').IDENTIFIER_PREVIOUS_KEY_UNTIL = 'next month';
    expect(startupProblems(rotating, outOfBand)).toEqual([
      expect.stringMatching(/identifier key: .*IDENTIFIER_PREVIOUS_KEY_UNTIL must be an ISO 8601 instant/),
    ]);
  });

  it('a *_FILE path no volume mounts, a key the volume does not project, an emptyDir, an unreadable mode', () => {
    const objects = copyOf('production');
    const sender = deployment(objects, 'sender');
    const pod = sender.spec?.template?.spec as PodSpec;
    // The SMTP Secret's mount removed; the password file then points nowhere.
    const container = mainContainer(sender);
    container.volumeMounts = (container.volumeMounts ?? []).filter((m) => m.name !== 'smtp');
    // The database password volume projects only `password`; ask for another file in it.
    const passwordFile = mainContainer(deployment(objects, 'planner')).env?.find(
      (e) => e.name === 'DATABASE_PASSWORD_FILE',
    );
    if (passwordFile) passwordFile.value = '/etc/outreach/db/other';
    // The Kafka CA from an emptyDir instead of the Secret.
    const experimentPod = deployment(objects, 'experiment').spec?.template?.spec as PodSpec;
    experimentPod.volumes = (experimentPod.volumes ?? []).map((v) =>
      v.name === 'kafka-ca' ? { name: v.name, emptyDir: {} } : v,
    );
    // Files readable by the owner (root) only.
    const liveness = deployment(objects, 'liveness').spec?.template?.spec as PodSpec;
    const secretVolume = liveness.volumes?.find((v) => v.name === 'db-password');
    if (secretVolume?.secret) secretVolume.secret.defaultMode = 0o400;
    expect(pod.volumes?.some((v) => v.name === 'smtp')).toBe(true);
    const problems = mountProblems(objects, outOfBand);
    expect(problems).toEqual(
      expect.arrayContaining([
        expect.stringMatching(
          /outreach-sender\/sender: SMTP_PASSWORD_FILE: \/etc\/outreach\/smtp\/password is under no volumeMount/,
        ),
        expect.stringMatching(/outreach-sender\/sender: SMTP_TLS_CA_FILE: .* is under no volumeMount/),
        expect.stringMatching(
          /outreach-planner\/planner: DATABASE_PASSWORD_FILE: .*projects no file other from Secret outreach-db-passwords/,
        ),
        expect.stringMatching(
          /outreach-experiment\/experiment: KAFKA_SSL_CA_FILE: .* volume kafka-ca, which is no Secret or ConfigMap/,
        ),
        expect.stringMatching(/outreach-liveness\/liveness: DATABASE_PASSWORD_FILE: .*mode 0400/),
      ]),
    );
    // The start-up check, reading through the real parsers, fails on the same files.
    expect(startupProblems(objects, outOfBand)).toEqual(
      expect.arrayContaining([
        expect.stringMatching(/outreach-experiment\/experiment: kafka: .*KAFKA_SSL_CA_FILE .* cannot be read/),
        expect.stringMatching(
          /outreach-planner\/planner: postgres \(DATABASE_URL\): .*DATABASE_PASSWORD_FILE .* cannot be read/,
        ),
      ]),
    );
  });

  it('a KafkaUser with an extra ACL, one lacking an ACL, an old apiVersion and the removed `operation` field', () => {
    const objects = copyOf('production-strimzi');
    const user = (name: string) => {
      const found = objects.find((o) => o.kind === 'KafkaUser' && o.metadata.name === name);
      if (!found?.spec?.authorization) throw new Error(`no KafkaUser ${name}`);
      return found;
    };
    // The sender may publish outreach requests: the attack issue 16 names.
    user('sender').spec?.authorization?.acls.push({
      resource: { type: 'topic', name: 'outreach.requested.v1', patternType: 'literal' },
      operations: ['Write'],
    });
    const experiment = user('experiment').spec?.authorization;
    if (experiment) experiment.acls = experiment.acls.slice(1);
    user('liveness').apiVersion = 'kafka.strimzi.io/v1beta2';
    const publisherRule = user('publisher').spec?.authorization?.acls.find(
      (r) => r.resource.name === 'outreach.requested.v1',
    ) as unknown as Record<string, unknown>;
    publisherRule.operation = publisherRule.operations;
    delete publisherRule.operations;
    const problems = strimziProblems(objects);
    expect(problems).toEqual(
      expect.arrayContaining([
        'KafkaUser/sender: grants WRITE on topic outreach.requested.v1 (literal), which the role table does not (npm run deploy:gen)',
        expect.stringMatching(/^KafkaUser\/experiment: lacks READ on topic outreach.send-recorded.v1 \(literal\)/),
        'KafkaUser/liveness: kafka.strimzi.io/v1beta2; Strimzi 1.0 serves only kafka.strimzi.io/v1',
        expect.stringMatching(
          /^KafkaUser\/publisher: \/spec\/authorization\/acls\/\d+\/operation: Unexpected property/,
        ),
        expect.stringMatching(/^KafkaUser\/publisher: \/spec\/authorization\/acls\/\d+\/operations: Expected array/),
      ]),
    );
    // A prefix pattern where the generator has a literal is a wider grant, named too.
    const widened = copyOf('production-strimzi');
    const rule = widened
      .find((o) => o.kind === 'KafkaUser' && o.metadata.name === 'publisher')
      ?.spec?.authorization?.acls.find((r) => r.resource.name === 'outreach.requested.v1');
    if (rule) rule.resource.patternType = 'prefix';
    expect(strimziProblems(widened)).toEqual(
      expect.arrayContaining([
        expect.stringMatching(/^KafkaUser\/publisher: grants WRITE on topic outreach.requested.v1 \(prefixed\)/),
      ]),
    );
  });

  it("a pod with another principal's Kafka Secret, user name or certificate is named", () => {
    // SCRAM: the sender mounts the planner's Secret (its password), or logs in as the planner.
    const scram = copyOf('production-strimzi');
    const senderPod = deployment(scram, 'sender').spec?.template?.spec as PodSpec;
    const volume = senderPod.volumes?.find((v) => v.name === 'kafka-client');
    if (volume?.secret) volume.secret.secretName = 'planner';
    configMap(scram, 'outreach-liveness-kafka').KAFKA_SASL_USERNAME = 'planner';
    expect(startupProblems(scram, outOfBand)).toEqual(
      expect.arrayContaining([
        expect.stringMatching(
          /outreach-sender\/sender: reads its Kafka credentials from Secret planner, which holds planner's, not sender's/,
        ),
        expect.stringMatching(
          /outreach-liveness\/liveness: connects to Kafka as "planner", not as its principal "liveness"/,
        ),
      ]),
    );
    // mTLS: the certificate in the experiment's mount is the planner's (CN=planner).
    const mtls = copyOf('production-strimzi-mtls');
    const experimentPod = deployment(mtls, 'experiment').spec?.template?.spec as PodSpec;
    const client = experimentPod.volumes?.find((v) => v.name === 'kafka-client');
    if (client?.secret) client.secret.secretName = 'planner';
    expect(startupProblems(mtls, outOfBand)).toEqual(
      expect.arrayContaining([
        expect.stringMatching(
          /outreach-experiment\/experiment: connects to Kafka as "planner", not as its principal "experiment"/,
        ),
      ]),
    );
    // A SCRAM user's Secret has no certificate; a tls user's Secret is no SCRAM password.
    const mixed = copyOf('production-strimzi');
    configMap(mixed, 'outreach-planner-kafka').KAFKA_SSL_CERT_FILE = '/etc/outreach/kafka-client/user.crt';
    configMap(mixed, 'outreach-planner-kafka').KAFKA_SSL_KEY_FILE = '/etc/outreach/kafka-client/user.key';
    expect(mountProblems(mixed, outOfBand)).toEqual(
      expect.arrayContaining([
        expect.stringMatching(
          /outreach-planner\/planner: KAFKA_SSL_CERT_FILE: Secret planner is the User Operator's for a scram-sha-512 KafkaUser: it has no key user.crt/,
        ),
      ]),
    );
  });

  it('a broker, database or SMTP port the egress policies do not allow is named', () => {
    const objects = copyOf('production');
    const outreachConfig = configMap(objects, 'outreach-config');
    outreachConfig.KAFKA_BROKERS = 'b-1.msk.example:9096,b-2.msk.example:9096';
    configMap(objects, 'outreach-sender-config').DATABASE_URL = 'postgres://sender@postgres.db.svc:6432/outreach';
    configMap(objects, 'outreach-sender-config').SMTP_PORT = '2525';
    const problems = networkProblems(objects, outOfBand);
    expect(problems).toEqual(
      expect.arrayContaining([
        'Deployment/outreach-planner/planner: no NetworkPolicy allows egress to port 9096 of b-1.msk.example (KAFKA_BROKERS b-1.msk.example:9096)',
        'Job/outreach-topics/topics: no NetworkPolicy allows egress to port 9096 of b-2.msk.example (KAFKA_BROKERS b-2.msk.example:9096)',
        'Deployment/outreach-sender/sender: no NetworkPolicy allows egress to port 6432 of postgres.db.svc (DATABASE_URL)',
        'Deployment/outreach-sender/sender: no NetworkPolicy allows egress to port 2525 of smtp-relay.mail.svc (SMTP_PORT of smtp-relay.mail.svc)',
        // And the ports left open that no pod uses any more: least privilege.
        "Job/outreach-topics: NetworkPolicy outreach-egress-kafka lets it reach port 9093 beyond the platform's pods, which none of its containers connects to",
      ]),
    );
    // A rule that reaches only the namespace's own pods does not count for an outside broker.
    const inside = copyOf('production');
    const kafkaPolicy = inside.find((o) => o.kind === 'NetworkPolicy' && o.metadata.name === 'outreach-egress-kafka');
    const rule = kafkaPolicy?.spec?.egress?.[0];
    if (rule) rule.to = [{ podSelector: {} }];
    expect(networkProblems(inside, outOfBand)).toEqual(
      expect.arrayContaining([
        expect.stringMatching(/outreach-sender\/sender: no NetworkPolicy allows egress to port 9093/),
      ]),
    );
  });

  /** A NetworkPolicy of the overlay, to break. */
  const policy = (objects: K8sObject[], name: string) => {
    const found = objects.find((o) => o.kind === 'NetworkPolicy' && o.metadata.name === name);
    if (!found?.spec) throw new Error(`no NetworkPolicy ${name}`);
    return found;
  };
  const egressPolicy = (name: string, podSelector: object, egress: object[]): K8sObject =>
    ({
      apiVersion: 'networking.k8s.io/v1',
      kind: 'NetworkPolicy',
      metadata: { name, namespace: 'outreach' },
      spec: { podSelector, policyTypes: ['Egress'], egress },
    }) as K8sObject;
  const mailPort = (pod: string, policyName: string, port: number) =>
    `${pod}: NetworkPolicy ${policyName} lets it reach the mail port ${port} beyond the platform's pods, but it runs no sender: only the sender may reach a mail server`;
  const unusedPort = (pod: string, policyName: string, port: number) =>
    `${pod}: NetworkPolicy ${policyName} lets it reach port ${port} beyond the platform's pods, which none of its containers connects to`;

  it('issue 16: the old egress policies (every pod to the mail, database and registry ports, anywhere) are named pod by pod', () => {
    const objects = copyOf('production');
    const partOf = { matchLabels: { 'app.kubernetes.io/part-of': 'outreach' } };
    const tcp = (...ports: number[]) => ports.map((port) => ({ protocol: 'TCP', port }));
    // The policies as they were: every pod, no `to:`.
    const old = [
      egressPolicy('outreach-egress', partOf, [
        { ports: [{ protocol: 'UDP', port: 53 }, ...tcp(53)] },
        { to: [{ podSelector: partOf }], ports: tcp(8080) },
        { ports: tcp(5432, 587, 465, 25, 8080, 8081) },
      ]),
      egressPolicy('outreach-egress-kafka', partOf, [{ ports: tcp(9093) }]),
    ];
    const broken = [...objects.filter((o) => !old.some((p) => p.metadata.name === o.metadata.name)), ...old];
    const problems = networkProblems(broken, outOfBand);
    expect(problems).toEqual(
      expect.arrayContaining([
        mailPort('Deployment/outreach-experiment', 'outreach-egress', 587),
        mailPort('Deployment/outreach-experiment', 'outreach-egress', 465),
        mailPort('Deployment/outreach-experiment', 'outreach-egress', 25),
        mailPort('Deployment/outreach-planner', 'outreach-egress', 587),
        mailPort('Deployment/outreach-liveness', 'outreach-egress', 587),
        mailPort('Job/outreach-migrate', 'outreach-egress', 587),
        mailPort('Job/outreach-topics', 'outreach-egress', 587),
        unusedPort('Job/outreach-topics', 'outreach-egress', 5432),
        unusedPort('Job/outreach-topics', 'outreach-egress', 8080),
        unusedPort('Job/outreach-migrate', 'outreach-egress-kafka', 9093),
        unusedPort('Deployment/outreach-experiment', 'outreach-egress', 8081),
        unusedPort('Deployment/outreach-sender', 'outreach-egress', 465),
      ]),
    );
    // The sender may reach a mail port: the only pod not named for one.
    expect(problems.filter((p) => p.startsWith('Deployment/outreach-sender:') && p.includes('mail port'))).toEqual([]);
    // Every connection was allowed all along: only the least-privilege rule sees the issue.
    expect(problems.filter((p) => p.includes('no NetworkPolicy allows'))).toEqual([]);
  });

  it('an experiment pod allowed to reach 587, by a widened SMTP policy or a policy of its own, is named', () => {
    // The SMTP policy selecting every pod of the platform instead of the sender's.
    const widened = copyOf('production');
    policy(widened, 'outreach-egress-smtp').spec = {
      ...policy(widened, 'outreach-egress-smtp').spec,
      podSelector: { matchLabels: { 'app.kubernetes.io/part-of': 'outreach' } },
    };
    const problems = networkProblems(widened, outOfBand);
    expect(problems).toContain(mailPort('Deployment/outreach-experiment', 'outreach-egress-smtp', 587));
    expect(problems).toContain(mailPort('Job/outreach-topics', 'outreach-egress-smtp', 587));
    expect(problems.filter((p) => p.startsWith('Deployment/outreach-sender:'))).toEqual([]);
    // A policy of its own: 587 to any address, a range over the mail ports, a rule without ports.
    const experiment = { matchLabels: { 'app.kubernetes.io/name': 'outreach-experiment' } };
    for (const [rule, expected] of [
      [
        { to: [{ ipBlock: { cidr: '0.0.0.0/0' } }], ports: [{ protocol: 'TCP', port: 587 }] },
        [mailPort('Deployment/outreach-experiment', 'debug', 587)],
      ],
      [
        { ports: [{ protocol: 'TCP', port: 1, endPort: 1024 }] },
        [
          mailPort('Deployment/outreach-experiment', 'debug', 25),
          mailPort('Deployment/outreach-experiment', 'debug', 465),
          mailPort('Deployment/outreach-experiment', 'debug', 587),
          "Deployment/outreach-experiment: NetworkPolicy debug lets it reach TCP ports 1-1024 beyond the platform's pods, most of which none of its containers connects to",
        ],
      ],
      [
        {},
        [
          "Deployment/outreach-experiment: NetworkPolicy debug lets it reach every port beyond the platform's pods (a rule without ports)",
          "Deployment/outreach-experiment: NetworkPolicy debug lets it reach the mail ports beyond the platform's pods, but it runs no sender",
        ],
      ],
      [
        { to: [{ namespaceSelector: {} }], ports: [{ protocol: 'TCP' }] },
        [
          "Deployment/outreach-experiment: NetworkPolicy debug lets it reach every TCP port beyond the platform's pods",
          "Deployment/outreach-experiment: NetworkPolicy debug lets it reach the mail ports beyond the platform's pods, but it runs no sender",
        ],
      ],
    ] as const) {
      const objects = [...copyOf('production'), egressPolicy('debug', experiment, [rule])];
      expect(networkProblems(objects, outOfBand), JSON.stringify(rule)).toEqual(expected);
    }
    // Towards the platform's own pods only, a port is no reach beyond them: not named.
    const inside = [
      ...copyOf('production'),
      egressPolicy('debug', experiment, [{ to: [{ podSelector: {} }], ports: [{ protocol: 'TCP', port: 587 }] }]),
    ];
    expect(networkProblems(inside, outOfBand)).toEqual([]);
  });

  it('a `to:` that pins the wrong destination, or a selector that misses a pod, is named', () => {
    // Strimzi's brokers pinned by namespace and pods; brokers, database and relay moved elsewhere.
    const objects = copyOf('production-strimzi');
    configMap(objects, 'outreach-config').KAFKA_BROKERS = 'kafka.example.com:9093';
    configMap(objects, 'outreach-planner-config').DATABASE_URL =
      'postgres://planner@postgres.other-db.svc:5432/outreach';
    configMap(objects, 'outreach-sender-config').SMTP_HOST = 'smtp.example.com';
    expect(networkProblems(objects, outOfBand)).toEqual(
      expect.arrayContaining([
        'Deployment/outreach-experiment/experiment: no NetworkPolicy allows egress to port 9093 of kafka.example.com (KAFKA_BROKERS kafka.example.com:9093)',
        'Deployment/outreach-planner/planner: no NetworkPolicy allows egress to port 5432 of postgres.other-db.svc (DATABASE_URL)',
        'Deployment/outreach-sender/sender: no NetworkPolicy allows egress to port 587 of smtp.example.com (SMTP_PORT of smtp.example.com)',
      ]),
    );
    // An outside broker (Aiven) left with production's in-cluster `to:`.
    const aiven = copyOf('production-aiven');
    const rule = policy(aiven, 'outreach-egress-kafka').spec?.egress?.[0];
    if (rule) rule.to = [{ namespaceSelector: { matchLabels: { 'kubernetes.io/metadata.name': 'kafka' } } }];
    expect(networkProblems(aiven, outOfBand)).toContainEqual(
      expect.stringMatching(
        /outreach-sender\/sender: no NetworkPolicy allows egress to port 24949 of outreach-kafka-acme/,
      ),
    );
    // The AWS credentials agent outside the ipBlock.
    const iam = copyOf('production-msk-iam');
    const agent = policy(iam, 'outreach-egress-aws-credentials').spec?.egress?.[0];
    if (agent) agent.to = [{ ipBlock: { cidr: '169.254.170.0/24', except: ['169.254.170.23/32'] } }];
    expect(networkProblems(iam, outOfBand)).toContain(
      'Job/outreach-topics/topics: no NetworkPolicy allows egress to port 80 of 169.254.170.23 (the EKS Pod Identity agent (AWS credentials for MSK IAM))',
    );
    // The database policy's expression turned around: the services lose PostgreSQL, the topics Job gains it.
    const notIn = copyOf('production');
    const expression = policy(notIn, 'outreach-egress-postgres').spec?.podSelector?.matchExpressions?.[0];
    if (expression) expression.operator = 'NotIn';
    expect(networkProblems(notIn, outOfBand)).toEqual(
      expect.arrayContaining([
        'Deployment/outreach-liveness/liveness: no NetworkPolicy allows egress to port 5432 of postgres.db.svc (DATABASE_URL)',
        'Job/outreach-migrate/migrate-planner: no NetworkPolicy allows egress to port 5432 of postgres.db.svc (DATABASE_URL)',
        unusedPort('Job/outreach-topics', 'outreach-egress-postgres', 5432),
      ]),
    );
  });

  it('a service running as the migrator, or with a setting it does not read, is named', () => {
    const objects = copyOf('production');
    configMap(objects, 'outreach-experiment-config').KAFKA_SASL_PASWORD_FILE = '/etc/outreach/kafka-client/password';
    configMap(objects, 'outreach-experiment-kafka').KAFKA_SASL_MECHANISM = 'plain ';
    expect(startupProblems(objects, outOfBand)).toEqual(
      expect.arrayContaining([
        expect.stringMatching(/outreach-experiment\/experiment: sets KAFKA_SASL_PASWORD_FILE, which it does not read/),
        expect.stringMatching(
          /outreach-experiment\/experiment: experiment: invalid configuration: .*KAFKA_SASL_MECHANISM/,
        ),
      ]),
    );
  });

  it('an ingress that routes a probe, /metrics or /docs, or a service other than the sender, is named', () => {
    const ingress = (paths: Array<{ path: string; pathType: string; service: string }>): K8sObject =>
      ({
        apiVersion: 'networking.k8s.io/v1',
        kind: 'Ingress',
        metadata: { name: 'public' },
        spec: {
          rules: [
            {
              host: 'outreach.acme-corp.com',
              http: {
                paths: paths.map(({ path, pathType, service }) => ({
                  path,
                  pathType,
                  backend: { service: { name: service, port: { name: 'http' } } },
                })),
              },
            },
          ],
        },
      }) as unknown as K8sObject;
    const fine = ingress([
      { path: '/v1/unsubscribe', pathType: 'Prefix', service: 'outreach-sender' },
      { path: '/v1/feedback/ses', pathType: 'Exact', service: 'outreach-sender' },
      { path: '/v1/feedback/sendgrid', pathType: 'Exact', service: 'outreach-sender' },
      { path: '/v1/feedback/mailgun', pathType: 'Exact', service: 'outreach-sender' },
    ]);
    expect(ingressProblems([...copyOf('production'), fine])).toEqual([]);
    const leaky = ingress([
      { path: '/', pathType: 'Prefix', service: 'outreach-sender' },
      { path: '/health', pathType: 'Prefix', service: 'outreach-sender' },
      { path: '/metrics', pathType: 'Exact', service: 'outreach-sender' },
      { path: '/v1', pathType: 'Prefix', service: 'outreach-planner' },
      // A prefix is whole segments: /he is not /health.
      { path: '/he', pathType: 'Prefix', service: 'outreach-sender' },
    ]);
    expect(ingressProblems([leaky])).toEqual([
      'Ingress public: Prefix / to outreach-sender also routes /health/live, /health/ready, /metrics, /docs, /docs/json',
      'Ingress public: Prefix /health to outreach-sender also routes /health/live, /health/ready',
      'Ingress public: Exact /metrics to outreach-sender also routes /metrics',
      "Ingress public: routes /v1 to outreach-planner; only the sender's public routes go through an ingress",
    ]);
    const gateway = {
      apiVersion: 'gateway.networking.k8s.io/v1',
      kind: 'HTTPRoute',
      metadata: { name: 'public' },
      spec: { rules: [{ backendRefs: [{ name: 'outreach-sender', port: 80 }] }] },
    } as unknown as K8sObject;
    expect(ingressProblems([gateway])).toEqual([
      'HTTPRoute public: PathPrefix / to outreach-sender also routes /health/live, /health/ready, /metrics, /docs, /docs/json',
    ]);
  });

  it('a service writing the Confluent wire format (the default) without a registry URL is named; the opt-out is not', () => {
    const objects = copyOf('production');
    delete configMap(objects, 'outreach-config').SCHEMA_REGISTRY_URL;
    const problems = startupProblems(objects, outOfBand);
    for (const service of ['planner', 'sender', 'experiment', 'liveness'])
      expect(problems).toContainEqual(
        expect.stringMatching(
          new RegExp(`outreach-${service}/${service}: writes public topics in the Confluent wire format`),
        ),
      );
    configMap(objects, 'outreach-config').EVENT_WIRE_FORMAT = 'single-object';
    expect(startupProblems(objects, outOfBand).filter((p) => p.includes('Confluent wire format'))).toEqual([]);
  });
});

describe('generated and image files', () => {
  it('`acls:print --format strimzi` prints the KafkaUsers the components ship (v1, the same ACLs)', () => {
    for (const authentication of ['scram-sha-512', 'tls'] as const) {
      const printed = parseAllDocuments(
        renderStrimziKafkaUsers(kafkaAcls({ roles: [...STRIMZI_USER_ROLES] }), {
          cluster: STRIMZI_CLUSTER,
          authentication,
        }),
      ).map((doc) => doc.toJS() as object);
      expect(printed).toEqual(strimziKafkaUsers(authentication));
    }
  });

  it('the Strimzi topics and users files are what the declarations generate (npm run deploy:gen)', () => {
    for (const { file, content } of generatedFiles()) expect(readFileSync(file, 'utf8'), file).toBe(content);
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
    // The console serves its stylesheet from its assets.
    expect(dockerfile).toContain('COPY --from=build /app/services/console/assets services/console/assets');
    // The image's HEALTHCHECK is compose's (docker-compose.yml), so `docker run` reports health the same way.
    expect(dockerfile).toMatch(
      /^HEALTHCHECK .*\\\n\s+CMD \["node", "\/app\/deploy\/docker\/healthcheck\.mjs", "\/health\/ready"\]$/m,
    );
    // The build's CA is an optional secret (a build without it works) used by `npm ci` only.
    const ca = /^RUN --mount=type=secret,id=build_ca,required=false \\\n(?:.*\\\n)*.*npm ci .*$/m.exec(dockerfile);
    expect(ca, 'the npm ci step mounts the build_ca secret').not.toBeNull();
    const instructions = dockerfile.replace(/^#.*\n/gm, '');
    expect(instructions.match(/build_ca/g)?.length).toBe(ca?.[0].match(/build_ca/g)?.length);
    // A new commit changes OUTREACH_COMMIT only: it comes after every COPY, so no layer is rebuilt for it.
    expect(dockerfile.lastIndexOf('\nCOPY ')).toBeLessThan(dockerfile.indexOf('ARG OUTREACH_COMMIT'));
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

  it('the entrypoint prints its usage when asked, rejects an unknown command with the list, and migrates named services only', () => {
    const entrypoint = join(root, 'deploy', 'docker', 'entrypoint.mjs');
    const unknown = spawnSync(process.execPath, [entrypoint, 'mailer'], { encoding: 'utf8' });
    expect(unknown.status).toBe(64);
    expect(unknown.stderr).toContain('unknown command "mailer". Commands: planner, sender');
    const badMigrate = spawnSync(process.execPath, [entrypoint, 'migrate', 'mailer'], { encoding: 'utf8' });
    expect(badMigrate.status).toBe(64);
    expect(badMigrate.stderr).toContain('migrate: no service named mailer');
    // `docker run outreach` (the image's CMD is --help): the usage on stdout, exit 0, no complaint.
    for (const ask of ['--help', '-h', 'help']) {
      const help = spawnSync(process.execPath, [entrypoint, ask], { encoding: 'utf8' });
      expect(help.status, ask).toBe(0);
      expect(help.stdout).toMatch(/^Usage: docker run \[options\] outreach <command>/);
      for (const command of Object.keys(commands)) expect(help.stdout).toContain(command);
      expect(help.stderr).toBe('');
    }
    const none = spawnSync(process.execPath, [entrypoint], { encoding: 'utf8' });
    expect(none.status).toBe(64);
    // Spellings that are no command: the prototype's names, case, whitespace, an invisible character.
    for (const spelling of ['__proto__', 'constructor', 'hasOwnProperty', 'PLANNER', ' planner', 'planner\u200b', '']) {
      const refused = spawnSync(process.execPath, [entrypoint, spelling], { encoding: 'utf8' });
      expect(refused.status, JSON.stringify(spelling)).toBe(64);
      expect(refused.stdout).toBe('');
    }
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
        volumes?: string[];
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
        'console',
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
    const consoleEnv = loadServiceConfig('console', resolved(compose.services.console?.environment)) as Record<
      string,
      unknown
    >;
    for (const service of kafkaServiceNames)
      expect(consoleEnv[`${service.toUpperCase()}_URL`]).toBe(`http://${service}:8080`);
    const planner = loadConfig(plannerConfig, resolved(compose.services.planner?.environment)) as PlannerConfig;
    expect(planner.EXPERIMENT_URL).toBe('http://experiment:8080');
    // Data-subject requests (ADR 014): the planner's peers by their compose names, with tokens; one
    // suppression key and an erase scope in the four.
    expect(planner).toMatchObject({ SENDER_URL: 'http://sender:8080', LIVENESS_URL: 'http://liveness:8080' });
    expect(planner.SENDER_TOKEN && planner.LIVENESS_TOKEN && planner.EXPERIMENT_TOKEN).toBeTruthy();
    const keys = new Set(
      kafkaServiceNames.map((service) => resolved(compose.services[service]?.environment).SUPPRESSION_KEY),
    );
    expect(keys.size).toBe(1);
    expect([...keys][0]?.length).toBeGreaterThanOrEqual(32);
    for (const service of kafkaServiceNames)
      expect(resolved(compose.services[service]?.environment).API_TOKENS_ERASE, service).toBeTruthy();
    expect(compose.services.sender?.environment?.SMTP_HOST).toBe('mailpit');
  });

  it('services wait for healthy infrastructure and finished setup jobs, and have healthchecks', () => {
    for (const service of serviceNames) {
      const definition = compose.services[service];
      expect(definition?.depends_on).toMatchObject({
        postgres: { condition: 'service_healthy' },
        migrate: { condition: 'service_completed_successfully' },
        // The console has no Kafka: it waits for the services whose APIs it calls.
        ...(isKafkaService(service)
          ? { kafka: { condition: 'service_healthy' }, topics: { condition: 'service_completed_successfully' } }
          : Object.fromEntries(kafkaServiceNames.map((s) => [s, { condition: 'service_healthy' }]))),
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
    expect(compose.services.console?.depends_on?.kafka).toBeUndefined();
    for (const job of ['topics', 'migrate', 'schemas']) {
      expect(Object.keys(commands)).toContain(compose.services[job]?.command?.[0]);
    }
  });

  it("the console's development user signs in with the password the file's header names (dev / dev-operator)", async () => {
    const console = compose.services.console;
    const mounted = console?.volumes?.find((v) => v.endsWith(`:${console.environment?.CONSOLE_USERS_FILE}:ro`));
    const users = parseUsers(readFileSync(join(root, (mounted ?? '').split(':')[0] ?? ''), 'utf8'));
    expect(users.map((u) => [u.name, u.role])).toEqual([['dev', 'operator']]);
    expect(await verifyLogin(users, 'dev', 'dev-operator')).toBeDefined();
    expect(await verifyLogin(users, 'dev', 'dev-token')).toBeUndefined();
  });
});
