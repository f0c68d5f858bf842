/**
 * The checks the deployment tests run on rendered Kubernetes manifests (deploy.unit.test.ts). Pure
 * functions of the objects, so the tests also feed them crafted, broken manifests and see each problem
 * named. Each returns its problems as lines, `<Kind>/<name>/<container>: what is wrong`; [] is clean.
 *
 * What they check, per container, with the command it runs (its args):
 * - credentials: no password, secret, token or key as an environment variable, whether a plain value,
 *   from a ConfigMap or from a Secret (`*_FILE` and a mounted Secret instead); no URL with a password;
 *   no `envFrom` of a Secret; no PEM in the environment;
 * - mounts: every file a `*_FILE` variable the command reads names is in a Secret or ConfigMap volume the
 *   container mounts, under a key it projects, readable by the pod's non-root user; a Secret Strimzi's
 *   User Operator writes has the keys of its KafkaUser's authentication type;
 * - start-up: the environment as the command reads it at start: the service's config schema (and
 *   nothing it does not read), the Kafka security settings and the PostgreSQL settings through the real
 *   parsers (kafkaSecurityFromEnv, resolvePgSettings, pgClientConfig) with files read from the mounts;
 *   the Kafka principal is the container's own (its role in packages/shared/src/kafka/acls.ts), and so
 *   is the Secret its credentials come from;
 * - network: the NetworkPolicies selecting the pod allow egress to every host and port the command
 *   connects to (KAFKA_BROKERS, DATABASE_URL, SMTP_HOST:SMTP_PORT, SCHEMA_REGISTRY_URL, the AWS
 *   credentials agent; a `to:` namespaceSelector reaches only in-cluster Services of its namespace),
 *   and least privilege: no pod may reach, beyond the platform's pods, a port none of its containers
 *   connects to (DNS aside), and a mail port only if it runs the sender;
 * - Strimzi: only kafka.strimzi.io/v1, each resource valid against its v1 schema, and each KafkaUser's
 *   ACLs exactly those the role table generates.
 */
import { BlockList, isIP } from 'node:net';
import { BaseConfigSchema, KafkaSecurityConfigSchema, loadConfig } from '@outreach/shared';
import {
  loadEmailHashKey,
  loadSuppressionKey,
  scopedTokensFrom,
  type SuppressionKeyConfig,
  isKafkaRole,
  kafkaAcls,
  kafkaSecurityFromEnv,
  pgClientConfig,
  pgSettingsFromEnv,
  resolvePgSettings,
  type AclBinding,
  type KafkaRoleName,
} from '@outreach/shared';
import { selfSignedCertificate } from '@outreach/testkit';
import type { TObject } from '@sinclair/typebox';
import {
  ConfigSchema as consoleConfig,
  loadConfig as loadConsoleConfig,
  loadMigrateConfig as loadConsoleMigrateConfig,
  MigrateConfigSchema as consoleMigrateConfig,
} from '../../services/console/src/config.js';
import { ConfigSchema as experimentConfig } from '../../services/experiment/src/config.js';
import { ConfigSchema as livenessConfig } from '../../services/liveness/src/config.js';
import { experimentToken, peerToken } from '../../services/planner/src/adapters/experiment-token.js';
import { ConfigSchema as plannerConfig, type Config as PlannerConfig } from '../../services/planner/src/config.js';
import {
  checkConfig as checkSenderConfig,
  ConfigSchema as senderConfig,
  identifierKeyring,
} from '../../services/sender/src/config.js';
import type { Config as SenderConfig } from '../../services/sender/src/config.js';
import {
  bindingsOfRules,
  STRIMZI_API_VERSION,
  STRIMZI_CLUSTER,
  STRIMZI_USER_SECRET_KEYS,
  type StrimziAclRule,
  type StrimziAuthentication,
} from '../../scripts/lib/strimzi.js';
import { strimziSchemaErrors } from './strimzi-v1.js';

// ------------------------------------------------------------------ the objects, as kubectl prints them

export interface EnvVar {
  name: string;
  value?: string;
  valueFrom?: {
    secretKeyRef?: { name: string; key: string; optional?: boolean };
    configMapKeyRef?: { name: string; key: string; optional?: boolean };
  };
}
export interface VolumeMount {
  name: string;
  mountPath: string;
  subPath?: string;
  readOnly?: boolean;
}
interface KeyToPath {
  key: string;
  path: string;
  mode?: number;
}
interface SecretSource {
  secretName?: string;
  name?: string;
  items?: KeyToPath[];
  optional?: boolean;
  defaultMode?: number;
}
export interface Volume {
  name: string;
  secret?: SecretSource;
  configMap?: { name: string; items?: KeyToPath[]; optional?: boolean; defaultMode?: number };
  projected?: {
    defaultMode?: number;
    sources: Array<{
      secret?: { name: string; items?: KeyToPath[]; optional?: boolean };
      configMap?: { name: string; items?: KeyToPath[]; optional?: boolean };
    }>;
  };
  emptyDir?: object;
}
export interface Container {
  name: string;
  image: string;
  args?: string[];
  ports?: Array<{ name?: string; containerPort: number }>;
  env?: EnvVar[];
  envFrom?: Array<{ configMapRef?: { name: string; optional?: boolean }; secretRef?: { name: string } }>;
  volumeMounts?: VolumeMount[];
  startupProbe?: { httpGet?: { path: string; port: string | number } };
  livenessProbe?: { httpGet?: { path: string; port: string | number } };
  readinessProbe?: { httpGet?: { path: string; port: string | number } };
  lifecycle?: { preStop?: { sleep?: { seconds: number } } };
  resources?: { requests?: Record<string, string>; limits?: Record<string, string> };
  securityContext?: Record<string, unknown>;
}
export interface PodSpec {
  containers: Container[];
  initContainers?: Container[];
  volumes?: Volume[];
  serviceAccountName?: string;
  securityContext?: { runAsNonRoot?: boolean; runAsUser?: number; fsGroup?: number } & Record<string, unknown>;
  terminationGracePeriodSeconds?: number;
}
interface NetworkPolicyPort {
  protocol?: string;
  port?: number | string;
  endPort?: number;
}
export interface LabelSelector {
  matchLabels?: Record<string, string>;
  matchExpressions?: Array<{ key: string; operator: string; values?: string[] }>;
}
interface NetworkPolicyPeer {
  podSelector?: LabelSelector;
  namespaceSelector?: LabelSelector;
  ipBlock?: { cidr: string; except?: string[] };
}
interface NetworkPolicyRule {
  to?: NetworkPolicyPeer[];
  from?: NetworkPolicyPeer[];
  ports?: NetworkPolicyPort[];
}
export interface K8sObject {
  apiVersion: string;
  kind: string;
  metadata: { name: string; namespace?: string; labels?: Record<string, string> };
  data?: Record<string, string>;
  spec?: {
    replicas?: number;
    minReplicas?: number;
    maxReplicas?: number;
    scaleTargetRef?: { name: string };
    template?: { metadata?: { labels?: Record<string, string>; annotations?: Record<string, string> }; spec: PodSpec };
    selector?: { matchLabels?: Record<string, string> };
    podSelector?: LabelSelector;
    policyTypes?: string[];
    egress?: NetworkPolicyRule[];
    ingress?: NetworkPolicyRule[];
    topicName?: string;
    partitions?: number;
    config?: Record<string, string>;
    authentication?: { type: string };
    authorization?: { type: string; acls: StrimziAclRule[] };
  };
}

// ------------------------------------------------------------------ pods, commands, environments

export const services = {
  planner: plannerConfig,
  sender: senderConfig,
  experiment: experimentConfig,
  liveness: livenessConfig,
  console: consoleConfig,
} as const;
export type Service = keyof typeof services;
export const serviceNames = Object.keys(services) as Service[];
const isService = (name: string | undefined): name is Service => name !== undefined && name in services;
/**
 * The services on Kafka, each its own principal. The console (ADR 015) is on Kafka only for its
 * dead-letter pages, as principal `console`, where an overlay gives it KAFKA_BROKERS (production).
 */
export const kafkaServiceNames = serviceNames.filter((s): s is Exclude<Service, 'console'> => s !== 'console');
export const isKafkaService = (name: string | undefined): name is Exclude<Service, 'console'> =>
  name !== undefined && (kafkaServiceNames as readonly string[]).includes(name);

/**
 * A service's configuration as it loads it at start: the four through the shared loader (the base
 * settings and theirs), the console through its own (its settings alone; with `migrate`, PostgreSQL's).
 */
export function loadServiceConfig(service: Service, env: Record<string, string>, migrateOnly = false): unknown {
  if (service === 'console') return migrateOnly ? loadConsoleMigrateConfig(env) : loadConsoleConfig(env);
  return loadConfig(services[service] as TObject, env);
}

/** The variables a service reads (with `migrate`, for the console, PostgreSQL's alone). */
export function serviceReads(service: Service, migrateOnly = false): string[] {
  if (service === 'console') return keysOf(migrateOnly ? consoleMigrateConfig : consoleConfig);
  return [...keysOf(BaseConfigSchema), ...keysOf(services[service] as TObject)];
}

export interface Pod {
  readonly object: K8sObject;
  readonly spec: PodSpec;
  readonly labels: Record<string, string>;
}

/** The pods a Deployment or Job makes. */
export function podsOf(objects: readonly K8sObject[]): Pod[] {
  return objects
    .filter((o) => (o.kind === 'Deployment' || o.kind === 'Job') && o.spec?.template)
    .map((object) => ({
      object,
      spec: object.spec?.template?.spec as PodSpec,
      labels: object.spec?.template?.metadata?.labels ?? {},
    }));
}

export const containersOf = (pod: Pod): Container[] => [...(pod.spec.initContainers ?? []), ...pod.spec.containers];
const at = (pod: Pod, container: Container) => `${pod.object.kind}/${pod.object.metadata.name}/${container.name}`;

const keysOf = (schema: TObject) => Object.keys(schema.properties);
const topicsEnsureReads = [...keysOf(KafkaSecurityConfigSchema), 'KAFKA_BROKERS', 'TOPIC_PREFIX'].concat([
  'TOPIC_PARTITIONS',
  'TOPIC_REPLICATION_FACTOR',
]);

/** What a container's command reads and connects to, from its args (deploy/docker/commands.json). */
export interface Command {
  readonly reads: ReadonlySet<string>;
  /** The services whose config it loads (a service, or `migrate` of some). */
  readonly services: readonly Service[];
  readonly migrateOnly: boolean;
  /** Its Kafka principal, when it connects to Kafka. */
  readonly role?: KafkaRoleName;
  /** It parses the Kafka security settings at start (every service process does, `migrate` too). */
  readonly kafkaSettings: boolean;
  readonly postgres: boolean;
  readonly registry: boolean;
  readonly smtp: boolean;
}

export function commandOf(container: Container): Command | undefined {
  const [command, ...rest] = container.args ?? [];
  if (command === 'console') {
    // PostgreSQL (its audit table) and the four services' APIs; Kafka as its own principal and the
    // registry only for its dead-letter pages, when KAFKA_BROKERS and SCHEMA_REGISTRY_URL are set.
    return {
      reads: new Set(serviceReads('console')),
      services: ['console'],
      migrateOnly: false,
      role: 'console',
      kafkaSettings: true,
      postgres: true,
      registry: true,
      smtp: false,
    };
  }
  if (isKafkaService(command)) {
    return {
      reads: new Set(serviceReads(command)),
      services: [command],
      migrateOnly: false,
      role: command,
      kafkaSettings: true,
      postgres: true,
      registry: true,
      smtp: command === 'sender',
    };
  }
  if (command === 'migrate') {
    const list = rest.length > 0 ? rest.filter(isService) : serviceNames;
    return {
      // Every container of the migrate Job shares outreach-config: the base settings are read (and
      // ignored by `migrate`) whatever the service.
      reads: new Set([...keysOf(BaseConfigSchema), ...list.flatMap((s) => serviceReads(s, true))]),
      services: list,
      migrateOnly: true,
      kafkaSettings: true,
      postgres: true,
      registry: false,
      smtp: false,
    };
  }
  if (command === 'topics:ensure') {
    return {
      reads: new Set(topicsEnsureReads),
      services: [],
      migrateOnly: false,
      role: 'topics-admin',
      kafkaSettings: true,
      postgres: false,
      registry: false,
      smtp: false,
    };
  }
  if (command === 'schemas:register') {
    return {
      // cli/schemas-register.ts's own schema.
      reads: new Set(['SCHEMA_REGISTRY_URL', 'SCHEMA_REGISTRY_AUTH', 'SCHEMA_REGISTRY_TIMEOUT_MS', 'TOPIC_PREFIX']),
      services: [],
      migrateOnly: false,
      kafkaSettings: false,
      postgres: false,
      registry: true,
      smtp: false,
    };
  }
  return undefined;
}

export type EnvOrigin =
  | { kind: 'value' }
  | { kind: 'configMap'; name: string }
  | { kind: 'configMapKey'; name: string; key: string }
  | { kind: 'secret'; name: string; key: string };

export interface ResolvedEnv {
  readonly env: Record<string, string>;
  readonly origin: Record<string, EnvOrigin>;
  readonly problems: string[];
}

/** A value standing for a Secret's content in the environment (which the credentials check refuses). */
function placeholderFor(name: string): string {
  return name === 'DATABASE_URL' ? 'postgres://from-a-secret@db:5432/outreach' : 'secret';
}

/**
 * A container's environment as the pod sees it: envFrom in order, then env (which wins). ConfigMaps
 * the overlay lacks are looked up in `outOfBand` (the ones an operator creates, docs/operations.md).
 */
export function containerEnv(
  container: Container,
  objects: readonly K8sObject[],
  outOfBand: Record<string, Record<string, string>> = {},
): ResolvedEnv {
  const env: Record<string, string> = {};
  const origin: Record<string, EnvOrigin> = {};
  const problems: string[] = [];
  const configMap = (name: string) => {
    const found = objects.find((o) => o.kind === 'ConfigMap' && o.metadata.name === name);
    if (found) return found.data ?? {};
    return Object.hasOwn(outOfBand, name) ? outOfBand[name] : undefined;
  };
  for (const source of container.envFrom ?? []) {
    if (source.secretRef) {
      problems.push(`envFrom Secret ${source.secretRef.name} puts every key of it in the environment`);
      continue;
    }
    const name = source.configMapRef?.name ?? '';
    const data = configMap(name);
    if (!data) {
      if (!source.configMapRef?.optional) problems.push(`envFrom names ConfigMap ${name}, which the overlay lacks`);
      continue;
    }
    for (const [key, value] of Object.entries(data)) {
      env[key] = value;
      origin[key] = { kind: 'configMap', name };
    }
  }
  for (const variable of container.env ?? []) {
    const secret = variable.valueFrom?.secretKeyRef;
    const fromConfigMap = variable.valueFrom?.configMapKeyRef;
    if (secret) {
      env[variable.name] = placeholderFor(variable.name);
      origin[variable.name] = { kind: 'secret', name: secret.name, key: secret.key };
    } else if (fromConfigMap) {
      const value = configMap(fromConfigMap.name)?.[fromConfigMap.key];
      if (value === undefined) {
        if (!fromConfigMap.optional)
          problems.push(
            `${variable.name} names key ${fromConfigMap.key} of ConfigMap ${fromConfigMap.name}, which lacks it`,
          );
        continue;
      }
      env[variable.name] = value;
      origin[variable.name] = { kind: 'configMapKey', name: fromConfigMap.name, key: fromConfigMap.key };
    } else if (variable.value !== undefined) {
      env[variable.name] = variable.value;
      origin[variable.name] = { kind: 'value' };
    } else {
      problems.push(`${variable.name} has neither a value nor a reference`);
    }
  }
  return { env, origin, problems };
}

// ------------------------------------------------------------------ credentials

/** Variables naming a file (read by the command), rather than holding a value. */
export const isFileVariable = (name: string) => name.endsWith('_FILE') || name === 'SCHEMA_REGISTRY_AUTH';

/** A variable whose value is a credential: a password, secret, token or key (never a public key or a URL). */
export function isCredentialVariable(name: string): boolean {
  if (isFileVariable(name) || /PUBLIC_KEY|TOKEN_ENDPOINT/.test(name)) return false;
  return /PASSWORD|SECRET|TOKEN|(^|_)KEY$/.test(name);
}

export interface CredentialOptions {
  /** Variables allowed from a Secret as an environment variable, with the reason (no `_FILE` form). */
  readonly allowFromSecret?: Readonly<Record<string, string>>;
}

/** No credential in the environment of any container: every one a mounted file. */
export function credentialProblems(
  objects: readonly K8sObject[],
  outOfBand: Record<string, Record<string, string>> = {},
  options: CredentialOptions = {},
): string[] {
  const problems: string[] = [];
  for (const pod of podsOf(objects)) {
    for (const container of containersOf(pod)) {
      const { env, origin, problems: envProblems } = containerEnv(container, objects, outOfBand);
      problems.push(
        ...envProblems.filter((p) => p.startsWith('envFrom Secret')).map((p) => `${at(pod, container)}: ${p}`),
      );
      for (const [name, value] of Object.entries(env)) {
        const from = origin[name];
        const where = `${at(pod, container)}: ${name}`;
        if (isCredentialVariable(name) && value !== '') {
          if (from?.kind === 'secret') {
            if (!options.allowFromSecret?.[name])
              problems.push(
                `${where} comes from Secret ${from.name} (key ${from.key}) as an environment variable: mount it and set ${name}_FILE`,
              );
          } else {
            const source =
              from?.kind === 'value' ? 'a plain value' : `ConfigMap ${from && 'name' in from ? from.name : '?'}`;
            problems.push(`${where} is a credential in ${source}: mount it from a Secret and set ${name}_FILE`);
          }
        }
        if (from?.kind === 'secret' && /_URL$/.test(name))
          problems.push(
            `${where} comes from Secret ${from.name}: a URL in a Secret is there for its password; put the URL in a ConfigMap and the password in a file`,
          );
        if (urlPassword(value)) problems.push(`${where} carries a password in its URL`);
        if (value.includes('-----BEGIN ')) problems.push(`${where} holds a PEM block: mount it as a file`);
      }
    }
  }
  return problems;
}

function urlPassword(value: string): boolean {
  if (!/^[a-z][a-z0-9+.-]*:\/\//i.test(value)) return false;
  try {
    return new URL(value).password !== '';
  } catch {
    return false;
  }
}

// ------------------------------------------------------------------ mounted files

export interface MountedFile {
  readonly kind: 'secret' | 'configMap';
  readonly name: string;
  readonly key: string;
}

/** Where a file a container reads comes from: a key of a Secret or ConfigMap it mounts, or why not. */
export function resolveFile(pod: Pod, container: Container, path: string): MountedFile | { problem: string } {
  const mounts = (container.volumeMounts ?? [])
    .filter((m) => path === m.mountPath || path.startsWith(`${m.mountPath.replace(/\/$/, '')}/`))
    .sort((a, b) => b.mountPath.length - a.mountPath.length);
  const mount = mounts[0];
  if (!mount) return { problem: `${path} is under no volumeMount of the container` };
  const volume = pod.spec.volumes?.find((v) => v.name === mount.name);
  if (!volume) return { problem: `${path}: the container mounts volume ${mount.name}, which the pod lacks` };
  const relative =
    path === mount.mountPath ? (mount.subPath ?? '') : path.slice(mount.mountPath.replace(/\/$/, '').length + 1);
  const fsGroup = pod.spec.securityContext?.fsGroup;
  const readable = (mode: number, what: string): { problem: string } | undefined =>
    (mode & 0o004) !== 0 || ((mode & 0o040) !== 0 && fsGroup !== undefined)
      ? undefined
      : {
          problem: `${path} (${what}) has mode 0${mode.toString(8)}: the non-root user cannot read it without fsGroup`,
        };
  const pick = (
    kind: 'secret' | 'configMap',
    name: string,
    items: KeyToPath[] | undefined,
    defaultMode: number,
  ): MountedFile | { problem: string } | undefined => {
    const item = items ? items.find((i) => i.path === relative) : { key: relative, path: relative };
    if (!item) return undefined;
    if (item.key.includes('/') || item.key === '') return undefined;
    return readable(item.mode ?? defaultMode, `${kind} ${name}`) ?? { kind, name, key: item.key };
  };
  if (volume.secret) {
    const name = volume.secret.secretName ?? volume.secret.name ?? '';
    return (
      pick('secret', name, volume.secret.items, volume.secret.defaultMode ?? 0o644) ?? {
        problem: `${path}: volume ${volume.name} projects no file ${relative} from Secret ${name}`,
      }
    );
  }
  if (volume.configMap) {
    const { name } = volume.configMap;
    return (
      pick('configMap', name, volume.configMap.items, volume.configMap.defaultMode ?? 0o644) ?? {
        problem: `${path}: volume ${volume.name} projects no file ${relative} from ConfigMap ${name}`,
      }
    );
  }
  if (volume.projected) {
    const mode = volume.projected.defaultMode ?? 0o644;
    for (const source of volume.projected.sources) {
      const found = source.secret
        ? pick('secret', source.secret.name, source.secret.items, mode)
        : source.configMap
          ? pick('configMap', source.configMap.name, source.configMap.items, mode)
          : undefined;
      if (found) return found;
    }
    return { problem: `${path}: projected volume ${volume.name} has no file ${relative}` };
  }
  return { problem: `${path} is on volume ${volume.name}, which is no Secret or ConfigMap` };
}

/** The KafkaUser whose Secret (named after it) a file comes from, if the overlay has one. */
function kafkaUserOf(objects: readonly K8sObject[], file: MountedFile): K8sObject | undefined {
  return file.kind === 'secret'
    ? objects.find((o) => o.kind === 'KafkaUser' && o.metadata.name === file.name)
    : undefined;
}

/** Every file a `*_FILE` variable names is mounted from a Secret or ConfigMap key the container can read. */
export function mountProblems(
  objects: readonly K8sObject[],
  outOfBand: Record<string, Record<string, string>> = {},
): string[] {
  const problems: string[] = [];
  for (const pod of podsOf(objects)) {
    for (const container of containersOf(pod)) {
      const command = commandOf(container);
      if (!command) continue;
      const { env } = containerEnv(container, objects, outOfBand);
      for (const [name, path] of Object.entries(env)) {
        if (!isFileVariable(name) || path === '' || !command.reads.has(name)) continue;
        const file = resolveFile(pod, container, path);
        if ('problem' in file) {
          problems.push(`${at(pod, container)}: ${name}: ${file.problem}`);
          continue;
        }
        const user = kafkaUserOf(objects, file);
        const type = user?.spec?.authentication?.type as StrimziAuthentication | undefined;
        if (user && type && !STRIMZI_USER_SECRET_KEYS[type]?.includes(file.key))
          problems.push(
            `${at(pod, container)}: ${name}: Secret ${file.name} is the User Operator's for a ${type} KafkaUser: it has no key ${file.key} (it has ${STRIMZI_USER_SECRET_KEYS[type]?.join(', ')})`,
          );
      }
    }
  }
  return problems;
}

// ------------------------------------------------------------------ start-up, through the real parsers

/** Whose credentials a Secret holds: the KafkaUser it is named after, or outreach-kafka-<principal>. */
function credentialOwner(objects: readonly K8sObject[], file: MountedFile): string | undefined {
  if (kafkaUserOf(objects, file)) return file.name;
  const match = /^outreach-kafka-(.+)$/.exec(file.name);
  return match && match[1] !== 'ca' ? match[1] : undefined;
}

const certificates = new Map<string, { cert: string; key: string }>();
/** What a mounted file would hold: a certificate (CN = whose Secret it is) and its key, a secret. */
function fakeContent(objects: readonly K8sObject[], file: MountedFile): string {
  const owner = credentialOwner(objects, file) ?? file.name;
  const pair = (): { cert: string; key: string } => {
    const cached = certificates.get(owner);
    if (cached) return cached;
    const made = selfSignedCertificate({ commonName: owner, keyType: 'ec' });
    const fresh = {
      cert: made.certificatePem,
      key: made.privateKey.export({ type: 'pkcs8', format: 'pem' }).toString(),
    };
    certificates.set(owner, fresh);
    return fresh;
  };
  // A certificate and the key beside it in one Secret are a pair: services check that they fit.
  if (/\.(crt|pem)$/.test(file.key)) return pair().cert;
  if (/\.key$/.test(file.key)) return pair().key;
  if (file.key === 'username') return owner;
  // One printable word: it may be a bearer token, a key or a password.
  return `the-${file.key}-of-${file.name}`;
}

const configVerdicts = new Map<string, string>();
/**
 * What the service says of this environment at start ('' when it starts): its schema, and for the
 * sender its rules between settings. Remembered, since compiling the schema is the slow part and the
 * tests ask of the same environments again.
 */
function serviceConfigProblem(service: Service, env: Record<string, string>, migrateOnly: boolean): string {
  const key = JSON.stringify([service, migrateOnly, Object.entries(env).sort()]);
  const known = configVerdicts.get(key);
  if (known !== undefined) return known;
  let verdict = '';
  try {
    const config = loadServiceConfig(service, env, migrateOnly);
    if (service === 'sender' && !migrateOnly) checkSenderConfig(config as SenderConfig);
  } catch (error) {
    verdict = (error as Error).message;
  }
  configVerdicts.set(key, verdict);
  return verdict;
}

/**
 * The secrets a service reads at start, through the code that reads them, from the mounts: its API
 * tokens (every scope's file), and the emailHash and identifier keys where it holds them.
 */
function secretProblems(service: Service, env: Record<string, string>, readFile: (path: string) => string): string[] {
  if (service === 'console') return consoleSecretProblems(env, readFile);
  const config = loadConfig(services[service] as TObject, env);
  const checks: Array<[string, () => unknown]> = [['API tokens', () => scopedTokensFrom(config, readFile)]];
  if (service === 'sender' || service === 'planner')
    checks.push(['emailHash key', () => loadEmailHashKey(config as SenderConfig, readFile)]);
  if (service === 'sender')
    checks.push(['identifier key', () => identifierKeyring(config as SenderConfig, Date.now(), readFile)]);
  // Data-subject requests (ADR 014): each of the four holds the suppression key and an erase scope.
  checks.push([
    'suppression key',
    () => {
      if (!loadSuppressionKey(config as unknown as SuppressionKeyConfig, readFile))
        throw new Error('SUPPRESSION_KEY_FILE is not set: mount Secret outreach-suppression-key');
    },
  ]);
  checks.push([
    'erase scope',
    () => {
      if (config.API_TOKENS_ERASE_FILE === '' && config.API_TOKENS_ERASE === '')
        throw new Error('API_TOKENS_ERASE_FILE is not set: the planner could not ask for its part of an erasure');
    },
  ]);
  // The planner's tokens for the peers it asks for their parts (and the experiment's assignments).
  if (service === 'planner')
    for (const name of ['EXPERIMENT_TOKEN', 'SENDER_TOKEN', 'LIVENESS_TOKEN'] as const)
      checks.push([
        name,
        () => {
          const plannerSettings = config as unknown as PlannerConfig;
          const token =
            name === 'EXPERIMENT_TOKEN'
              ? experimentToken(plannerSettings, undefined, readFile)
              : peerToken(name, plannerSettings, undefined, readFile);
          token.stop();
          if (token.current() === undefined) throw new Error(`${name}_FILE is not set`);
        },
      ]);
  return checks.flatMap(([what, check]) => {
    try {
      check();
      return [];
    } catch (error) {
      return [`${service}: ${what}: ${(error as Error).message}`];
    }
  });
}

/**
 * The console's secrets: its two tokens and its session key are files it can read, and it has a
 * sign-in (local users, or the OIDC proxy's CIDRs with the proxy's secret), else it refuses to start.
 */
function consoleSecretProblems(env: Record<string, string>, readFile: (path: string) => string): string[] {
  const problems: string[] = [];
  for (const name of ['CONSOLE_READ_TOKEN', 'CONSOLE_OPERATE_TOKEN', 'CONSOLE_SESSION_KEY']) {
    const file = env[`${name}_FILE`] ?? '';
    if (file === '' && (env[name] ?? '') === '') problems.push(`console: neither ${name} nor ${name}_FILE is set`);
    if (file === '') continue;
    try {
      readFile(file);
    } catch (error) {
      problems.push(`console: ${name}_FILE: ${(error as Error).message}`);
    }
  }
  const users = env.CONSOLE_USERS_FILE ?? '';
  const proxy = (env.CONSOLE_PROXY_CIDRS ?? '').trim() !== '';
  if (users === '' && !proxy) problems.push('console: no sign-in: set CONSOLE_USERS_FILE or CONSOLE_PROXY_CIDRS');
  for (const name of [
    ...(users === '' ? [] : ['CONSOLE_USERS_FILE']),
    ...(proxy ? ['CONSOLE_PROXY_SECRET_FILE'] : []),
  ]) {
    const file = env[name] ?? '';
    if (file === '') {
      problems.push(`console: ${name} is not set`);
      continue;
    }
    try {
      readFile(file);
    } catch (error) {
      problems.push(`console: ${name}: ${(error as Error).message}`);
    }
  }
  return problems;
}

/**
 * Each container's environment as its command reads it at start: the service's config schema (also
 * refusing variables it does not read), the sender's rules between settings, and the Kafka and
 * PostgreSQL settings through the code that reads them, with every file read from the mounts. The
 * Kafka principal must be the container's role, and its credentials that role's Secret; a KafkaUser's
 * Secret must fit the mechanism (SCRAM password, or a tls user's certificate).
 */
export function startupProblems(
  objects: readonly K8sObject[],
  outOfBand: Record<string, Record<string, string>> = {},
): string[] {
  const problems: string[] = [];
  const iamAccounts = new Map<string, Set<string>>();
  for (const pod of podsOf(objects)) {
    for (const container of containersOf(pod)) {
      const where = at(pod, container);
      const command = commandOf(container);
      if (!command) {
        problems.push(`${where}: runs ${container.args?.[0] ?? 'nothing'}, which is no command of the image`);
        continue;
      }
      const { env, problems: envProblems } = containerEnv(container, objects, outOfBand);
      problems.push(...envProblems.filter((p) => !p.startsWith('envFrom Secret')).map((p) => `${where}: ${p}`));
      const read: MountedFile[] = [];
      const readFile = (path: string): string => {
        const file = resolveFile(pod, container, path);
        if ('problem' in file) throw Object.assign(new Error(file.problem), { code: 'ENOENT' });
        read.push(file);
        return fakeContent(objects, file);
      };
      for (const service of command.services) {
        const problem = serviceConfigProblem(service, env, command.migrateOnly);
        if (problem) problems.push(`${where}: ${service}: ${problem}`);
        else if (!command.migrateOnly)
          problems.push(...secretProblems(service, env, readFile).map((p) => `${where}: ${p}`));
      }
      // Public topics are written in the Confluent wire format unless a deployment opts out (ADR 011):
      // a service without the registry's URL refuses to start.
      // (The console writes no event of its own: it decodes dead letters, with the registry when it has one.)
      if (command.registry && command.services.length > 0 && !command.migrateOnly && command.role !== 'console') {
        if ((env.EVENT_WIRE_FORMAT ?? 'confluent') === 'confluent' && !env.SCHEMA_REGISTRY_URL)
          problems.push(
            `${where}: writes public topics in the Confluent wire format (EVENT_WIRE_FORMAT's default) but sets no SCHEMA_REGISTRY_URL`,
          );
      }
      const unknown = command.services.length > 0 ? Object.keys(env).filter((k) => !command.reads.has(k)) : [];
      if (unknown.length > 0) problems.push(`${where}: sets ${unknown.join(', ')}, which it does not read (typos?)`);
      if (command.kafkaSettings) {
        read.length = 0;
        try {
          const security = kafkaSecurityFromEnv(env, readFile);
          const role = command.migrateOnly ? undefined : command.role;
          if (role && security.principal !== undefined && security.principal !== role)
            problems.push(`${where}: connects to Kafka as "${security.principal}", not as its principal "${role}"`);
          for (const file of read) {
            const owner = credentialOwner(objects, file);
            if (role && owner !== undefined && owner !== role)
              problems.push(
                `${where}: reads its Kafka credentials from Secret ${file.name}, which holds ${owner}'s, not ${role}'s`,
              );
            const user = kafkaUserOf(objects, file);
            const type = user?.spec?.authentication?.type;
            if (type === 'scram-sha-512' && env.KAFKA_SASL_MECHANISM !== 'scram-sha-512')
              problems.push(
                `${where}: mounts KafkaUser ${file.name}'s SCRAM Secret but KAFKA_SASL_MECHANISM is "${env.KAFKA_SASL_MECHANISM ?? ''}"`,
              );
            if (type === 'tls' && (env.KAFKA_SASL_MECHANISM ?? '') !== '')
              problems.push(`${where}: KafkaUser ${file.name} is a tls user, but KAFKA_SASL_MECHANISM is set`);
          }
          if (role && env.KAFKA_OAUTH_PROVIDER === 'aws-msk-iam') {
            const account = pod.spec.serviceAccountName ?? 'default';
            iamAccounts.set(account, new Set([...(iamAccounts.get(account) ?? []), role]));
          }
        } catch (error) {
          problems.push(`${where}: kafka: ${(error as Error).message}`);
        }
      }
      if (command.postgres) {
        for (const name of ['DATABASE_URL', 'DATABASE_SESSION_URL']) {
          const url = env[name];
          if (!url) continue;
          try {
            const settings = resolvePgSettings(url, pgSettingsFromEnv(env));
            const client = pgClientConfig(url, settings, readFile);
            if (typeof client.password === 'function') client.password();
          } catch (error) {
            problems.push(`${where}: postgres (${name}): ${(error as Error).message}`);
          }
        }
      }
    }
  }
  // With IAM the principal is the pod's ServiceAccount's role: one account per principal.
  for (const [account, roles] of iamAccounts) {
    if (roles.size > 1)
      problems.push(
        `ServiceAccount ${account} is the AWS IAM identity of ${[...roles].join(', ')}: one account per principal`,
      );
  }
  return problems;
}

// ------------------------------------------------------------------ network

interface Connection {
  readonly port: number;
  /** The host it connects to, as the setting names it (a Service's name, a DNS name or an address). */
  readonly host?: string | undefined;
  readonly what: string;
}

function parseUrl(value: string): URL | undefined {
  try {
    return new URL(value);
  } catch {
    return undefined;
  }
}

function urlPort(url: URL, fallback: number): number {
  return url.port ? Number(url.port) : url.protocol === 'https:' ? 443 : url.protocol === 'http:' ? 80 : fallback;
}

const unbracket = (host: string) => host.replace(/^\[(.*)\]$/, '$1');

/** The TCP connections a container's command opens outside the pod network of the platform. */
export function connectionsOf(command: Command, env: Record<string, string>): Connection[] {
  const out: Connection[] = [];
  if (command.kafkaSettings && command.role && !command.migrateOnly) {
    for (const broker of (env.KAFKA_BROKERS ?? '').split(',').filter(Boolean)) {
      const colon = broker.lastIndexOf(':');
      out.push({
        port: Number(broker.slice(colon + 1)),
        host: unbracket(broker.slice(0, colon)),
        what: `KAFKA_BROKERS ${broker}`,
      });
    }
    if (env.KAFKA_OAUTH_PROVIDER === 'aws-msk-iam')
      out.push({
        port: 80,
        host: EKS_POD_IDENTITY_AGENT,
        what: 'the EKS Pod Identity agent (AWS credentials for MSK IAM)',
      });
  }
  if (command.postgres) {
    for (const name of ['DATABASE_URL', 'DATABASE_SESSION_URL']) {
      const url = env[name] ? parseUrl(env[name]) : undefined;
      if (url) out.push({ port: urlPort(url, 5432), host: unbracket(url.hostname) || undefined, what: name });
    }
  }
  if (command.smtp && (env.MAIL_PROVIDER ?? 'smtp') === 'smtp')
    out.push({
      port: Number(env.SMTP_PORT ?? 1025),
      host: env.SMTP_HOST || undefined,
      what: `SMTP_PORT of ${env.SMTP_HOST ?? '?'}`,
    });
  if (command.registry && env.SCHEMA_REGISTRY_URL) {
    const url = parseUrl(env.SCHEMA_REGISTRY_URL);
    if (url) out.push({ port: urlPort(url, 80), host: unbracket(url.hostname), what: 'SCHEMA_REGISTRY_URL' });
  }
  return out;
}

const EKS_POD_IDENTITY_AGENT = '169.254.170.23';
/** The label every namespace carries with its own name (what a namespaceSelector can pin). */
const NAMESPACE_NAME = 'kubernetes.io/metadata.name';

/** Whether a label selector selects these labels (matchLabels and matchExpressions, as Kubernetes reads them). */
export function selects(selector: LabelSelector | undefined, labels: Record<string, string>): boolean {
  const byLabel = Object.entries(selector?.matchLabels ?? {}).every(([k, v]) => labels[k] === v);
  return (
    byLabel &&
    (selector?.matchExpressions ?? []).every(({ key, operator, values = [] }) => {
      const has = Object.hasOwn(labels, key);
      if (operator === 'In') return has && values.includes(labels[key] ?? '');
      if (operator === 'NotIn') return !has || !values.includes(labels[key] ?? '');
      if (operator === 'Exists') return has;
      if (operator === 'DoesNotExist') return !has;
      return false;
    })
  );
}

/**
 * The namespace of a host that is an in-cluster Service: `<service>` (the pod's own namespace) or
 * `<service>.<namespace>.svc[.cluster.local]`; undefined for an address or any other name.
 */
export function clusterNamespace(host: string, own: string): string | undefined {
  const name = host.toLowerCase().replace(/\.$/, '');
  if (isIP(name) !== 0) return undefined;
  if (!name.includes('.')) return own;
  return /^[a-z0-9-]+\.([a-z0-9-]+)\.svc(\.cluster\.local)?$/.exec(name)?.[1];
}

/** Whether a namespaceSelector selects a namespace, judged by the one label the checks know it has. */
function selectsNamespace(selector: LabelSelector, namespace: string): boolean {
  const byName: LabelSelector = {
    matchLabels: Object.fromEntries(Object.entries(selector.matchLabels ?? {}).filter(([k]) => k === NAMESPACE_NAME)),
    matchExpressions: (selector.matchExpressions ?? []).filter((e) => e.key === NAMESPACE_NAME),
  };
  return selects(byName, { [NAMESPACE_NAME]: namespace });
}

function inBlock(ipBlock: { cidr: string; except?: string[] }, address: string): boolean {
  const family = (ip: string) => (isIP(ip) === 6 ? 'ipv6' : 'ipv4');
  const listOf = (cidrs: readonly string[]) => {
    const list = new BlockList();
    for (const cidr of cidrs) {
      const [network = '', prefix = ''] = cidr.split('/');
      list.addSubnet(network, Number(prefix), family(network));
    }
    return list;
  };
  return (
    listOf([ipBlock.cidr]).check(address, family(address)) &&
    !listOf(ipBlock.except ?? []).check(address, family(address))
  );
}

/**
 * Whether a `to:` peer of a policy in namespace `own` reaches `host`. Without a host, whether it reaches
 * beyond the namespace's own pods. A namespaceSelector (with or without a podSelector) reaches only
 * in-cluster Services, of the namespace it names (when it names one by kubernetes.io/metadata.name); a
 * podSelector alone only those of the policy's namespace; an ipBlock an address in it, or any name
 * (whose addresses are not known here).
 */
function peerReaches(peer: NetworkPolicyPeer, host: string | undefined, own: string): boolean {
  if (peer.ipBlock) return host === undefined || isIP(host) === 0 || inBlock(peer.ipBlock, host);
  if (host === undefined) return peer.namespaceSelector !== undefined;
  const namespace = clusterNamespace(host, own);
  if (namespace === undefined) return false;
  return peer.namespaceSelector ? selectsNamespace(peer.namespaceSelector, namespace) : namespace === own;
}

/** A rule's peers reach beyond the namespace's own pods: no `to:`, or an ipBlock or namespaceSelector. */
const reachesBeyondOwnPods = (rule: NetworkPolicyRule) =>
  !rule.to || rule.to.length === 0 || rule.to.some((peer) => peer.ipBlock || peer.namespaceSelector);

/** The NetworkPolicies that isolate a pod's egress. */
function egressPolicies(objects: readonly K8sObject[], labels: Record<string, string>): K8sObject[] {
  return objects.filter(
    (o) =>
      o.kind === 'NetworkPolicy' &&
      (o.spec?.policyTypes ?? (o.spec?.egress ? ['Egress'] : [])).includes('Egress') &&
      selects(o.spec?.podSelector, labels),
  );
}

/**
 * Whether the NetworkPolicies selecting a pod let it open a TCP connection to `port` of `host`; without
 * a host, to `port` anywhere outside the namespace's pods.
 */
export function egressAllowed(
  objects: readonly K8sObject[],
  labels: Record<string, string>,
  port: number,
  host?: string,
): boolean {
  const policies = egressPolicies(objects, labels);
  if (policies.length === 0) return true; // no policy isolates the pod's egress
  return policies.some((policy) =>
    (policy.spec?.egress ?? []).some((rule) => {
      const own = policy.metadata.namespace ?? '';
      const reaches = !rule.to || rule.to.length === 0 || rule.to.some((peer) => peerReaches(peer, host, own));
      const portAllowed =
        !rule.ports ||
        rule.ports.length === 0 ||
        rule.ports.some(
          (p) =>
            (p.protocol ?? 'TCP') === 'TCP' &&
            (p.port === undefined || (typeof p.port === 'number' && port >= p.port && port <= (p.endPort ?? p.port))),
        );
      return reaches && portAllowed;
    }),
  );
}

/** The ports of mail servers: submission, implicit TLS, relay, and the usual alternative. */
const MAIL_PORTS: ReadonlySet<number> = new Set([25, 465, 587, 2525]);

/**
 * Least privilege: what the policies selecting a pod let it reach beyond the platform's pods, on ports
 * none of its containers connects to (`needed`) nor DNS. A mail port is named as such when the pod runs
 * no sender: only the sender may speak to a mail server (issue 16).
 */
function excessEgress(
  objects: readonly K8sObject[],
  pod: Pod,
  needed: ReadonlySet<number>,
  sender: boolean,
  mailPorts: ReadonlySet<number>,
): string[] {
  const problems = new Set<string>();
  const where = `${pod.object.kind}/${pod.object.metadata.name}`;
  for (const policy of egressPolicies(objects, pod.labels)) {
    const lets = `${where}: NetworkPolicy ${policy.metadata.name} lets it reach`;
    const excess = (port: number, protocol: string) => {
      if (port === 53 && (protocol === 'UDP' || protocol === 'TCP')) return false; // DNS
      return protocol !== 'TCP' || !needed.has(port);
    };
    for (const rule of policy.spec?.egress ?? []) {
      if (!reachesBeyondOwnPods(rule)) continue;
      if (!rule.ports || rule.ports.length === 0) {
        problems.add(`${lets} every port beyond the platform's pods (a rule without ports)`);
        if (!sender) problems.add(`${lets} the mail ports beyond the platform's pods, but it runs no sender`);
        continue;
      }
      for (const entry of rule.ports) {
        const protocol = entry.protocol ?? 'TCP';
        if (entry.port === undefined || typeof entry.port === 'string') {
          problems.add(
            `${lets} ${entry.port === undefined ? `every ${protocol} port` : `the named port "${entry.port}"`} beyond the platform's pods`,
          );
          if (!sender && protocol === 'TCP')
            problems.add(`${lets} the mail ports beyond the platform's pods, but it runs no sender`);
          continue;
        }
        const last = entry.endPort ?? entry.port;
        const over: number[] = [];
        for (let port = entry.port; port <= last; port++) if (excess(port, protocol)) over.push(port);
        for (const port of over.filter((p) => !sender && protocol === 'TCP' && mailPorts.has(p)))
          problems.add(
            `${lets} the mail port ${port} beyond the platform's pods, but it runs no sender: only the sender may reach a mail server`,
          );
        const rest = over.filter((p) => sender || protocol !== 'TCP' || !mailPorts.has(p));
        if (rest.length > 8)
          problems.add(
            `${lets} ${protocol} ports ${entry.port}-${last} beyond the platform's pods, most of which none of its containers connects to`,
          );
        else
          for (const port of rest)
            problems.add(
              `${lets} ${protocol === 'TCP' ? '' : `${protocol} `}port ${port} beyond the platform's pods, which none of its containers connects to`,
            );
      }
    }
  }
  return [...problems];
}

/**
 * Every connection each container opens is allowed by the egress NetworkPolicies of its pod (its port,
 * and its host when a `to:` pins the destinations), and no pod may reach more than its containers
 * connect to: no port beyond the platform's pods that none of them uses, no mail port unless it runs
 * the sender.
 */
export function networkProblems(
  objects: readonly K8sObject[],
  outOfBand: Record<string, Record<string, string>> = {},
): string[] {
  const problems: string[] = [];
  // The mail ports, with the one each sender is configured for.
  const mailPorts = new Set(MAIL_PORTS);
  const pods = podsOf(objects).map((pod) => {
    const needed = new Set<number>();
    let sender = false;
    for (const container of containersOf(pod)) {
      const command = commandOf(container);
      if (!command) continue;
      const { env } = containerEnv(container, objects, outOfBand);
      if (command.smtp) {
        sender = true;
        if (env.SMTP_PORT) mailPorts.add(Number(env.SMTP_PORT));
      }
      for (const { port, host, what } of connectionsOf(command, env)) {
        needed.add(port);
        if (!egressAllowed(objects, pod.labels, port, host))
          problems.push(
            `${at(pod, container)}: no NetworkPolicy allows egress to port ${port}${host === undefined ? '' : ` of ${host}`} (${what})`,
          );
      }
    }
    return { pod, needed, sender };
  });
  for (const { pod, needed, sender } of pods) problems.push(...excessEgress(objects, pod, needed, sender, mailPorts));
  problems.push(...serviceCallProblems(objects, outOfBand));
  return problems;
}

/**
 * The settings naming the services a service calls, and whose Deployment each must name: the console
 * calls all four; the planner the experiment service (assignments, and its part of a data-subject
 * request), the sender and the liveness service (their parts, ADR 014).
 */
const SERVICE_CALLS: Readonly<Partial<Record<Service, Readonly<Record<string, string>>>>> = {
  console: {
    PLANNER_URL: 'outreach-planner',
    SENDER_URL: 'outreach-sender',
    EXPERIMENT_URL: 'outreach-experiment',
    LIVENESS_URL: 'outreach-liveness',
  },
  planner: {
    EXPERIMENT_URL: 'outreach-experiment',
    SENDER_URL: 'outreach-sender',
    LIVENESS_URL: 'outreach-liveness',
  },
};

/** The NetworkPolicies that isolate a pod's ingress. */
function ingressPolicies(objects: readonly K8sObject[], labels: Record<string, string>): K8sObject[] {
  return objects.filter(
    (o) =>
      o.kind === 'NetworkPolicy' &&
      // Without policyTypes a policy always isolates ingress.
      (o.spec?.policyTypes ?? ['Ingress']).includes('Ingress') &&
      selects(o.spec?.podSelector, labels),
  );
}

/** Whether a pod of the namespace with `from` labels may open a connection to `port` of pods labelled `to`. */
export function ingressAllowedFrom(
  objects: readonly K8sObject[],
  to: Record<string, string>,
  from: Record<string, string>,
  port: number,
): boolean {
  const policies = ingressPolicies(objects, to);
  if (policies.length === 0) return true;
  return policies.some((policy) =>
    (policy.spec?.ingress ?? []).some(
      (rule) =>
        (!rule.from ||
          rule.from.length === 0 ||
          rule.from.some((peer) => !peer.namespaceSelector && !peer.ipBlock && selects(peer.podSelector, from))) &&
        (!rule.ports ||
          rule.ports.length === 0 ||
          rule.ports.some((p) => (p.protocol ?? 'TCP') === 'TCP' && (p.port === undefined || p.port === port))),
    ),
  );
}

/**
 * A service reaches the services it calls: each URL names that service's Kubernetes Service (in the
 * pod's namespace), an egress rule of its pod lets it reach the Service's pods on their port (a policy
 * sees the pod's port, not the Service's), and the callee's ingress policies let it in.
 */
export function serviceCallProblems(
  objects: readonly K8sObject[],
  outOfBand: Record<string, Record<string, string>> = {},
): string[] {
  const problems: string[] = [];
  for (const pod of podsOf(objects)) {
    for (const container of containersOf(pod)) {
      const command = commandOf(container);
      const calls = command && !command.migrateOnly ? SERVICE_CALLS[command.services[0] as Service] : undefined;
      if (!calls) continue;
      const { env } = containerEnv(container, objects, outOfBand);
      for (const [name, target] of Object.entries(calls)) {
        const where = `${at(pod, container)}: ${name}`;
        const url = parseUrl(env[name] ?? '');
        const service = objects.find((o) => o.kind === 'Service' && o.metadata.name === target);
        const deployment = objects.find((o) => o.kind === 'Deployment' && o.metadata.name === target);
        if (!url || unbracket(url.hostname) !== target || !service || !deployment) {
          problems.push(`${where} is ${env[name] ?? 'unset'}, not the Service ${target} of this overlay`);
          continue;
        }
        const labels = deployment.spec?.template?.metadata?.labels ?? {};
        const ports = (deployment.spec?.template?.spec.containers ?? []).flatMap((c) =>
          (c.ports ?? []).map((p) => p.containerPort),
        );
        const reached = egressPolicies(objects, pod.labels).some((policy) =>
          (policy.spec?.egress ?? []).some(
            (rule) =>
              (rule.to ?? []).some(
                (peer) => !peer.namespaceSelector && !peer.ipBlock && selects(peer.podSelector, labels),
              ) &&
              ports.some((port) => (rule.ports ?? []).some((p) => (p.protocol ?? 'TCP') === 'TCP' && p.port === port)),
          ),
        );
        if (!reached) problems.push(`${where}: no NetworkPolicy lets it reach the pods of ${target} on their port`);
        else if (!ports.some((port) => ingressAllowedFrom(objects, labels, pod.labels, port)))
          problems.push(`${where}: no NetworkPolicy lets it into the pods of ${target} on their port (ingress)`);
      }
    }
  }
  return problems;
}

// ------------------------------------------------------------------ Strimzi

const aclKey = (a: AclBinding) =>
  `${a.operation} on ${a.resourceType.toLowerCase()} ${a.resourceName} (${a.patternType.toLowerCase()})`;

/**
 * Strimzi resources: kafka.strimzi.io/v1 only, valid against the v1 schema, on our cluster; each
 * KafkaUser a principal of the role table whose ACLs are exactly the generated ones (no topic prefix).
 */
export function strimziProblems(objects: readonly K8sObject[]): string[] {
  const problems: string[] = [];
  for (const object of objects.filter((o) => o.apiVersion.startsWith('kafka.strimzi.io/'))) {
    const where = `${object.kind}/${object.metadata.name}`;
    if (object.apiVersion !== STRIMZI_API_VERSION) {
      problems.push(`${where}: ${object.apiVersion}; Strimzi 1.0 serves only ${STRIMZI_API_VERSION}`);
      continue;
    }
    problems.push(...strimziSchemaErrors(object).map((e) => `${where}: ${e}`));
    if (object.metadata.labels?.['strimzi.io/cluster'] !== STRIMZI_CLUSTER)
      problems.push(`${where}: strimzi.io/cluster is not ${STRIMZI_CLUSTER}`);
    if (object.kind !== 'KafkaUser') continue;
    const role = object.metadata.name;
    if (!isKafkaRole(role)) {
      problems.push(`${where}: no principal of that name in the role table (packages/shared/src/kafka/acls.ts)`);
      continue;
    }
    if (object.spec?.authorization?.type !== 'simple') {
      problems.push(`${where}: authorization is not simple: its ACLs would not be managed`);
      continue;
    }
    const granted = new Set(bindingsOfRules(role, object.spec.authorization.acls ?? []).map(aclKey));
    const generated = new Set(kafkaAcls({ roles: [role] }).map(aclKey));
    for (const extra of [...granted].filter((k) => !generated.has(k)))
      problems.push(`${where}: grants ${extra}, which the role table does not (npm run deploy:gen)`);
    for (const missing of [...generated].filter((k) => !granted.has(k)))
      problems.push(`${where}: lacks ${missing}, which the role table grants (npm run deploy:gen)`);
    for (const rule of object.spec.authorization.acls ?? []) {
      if ((rule as { type?: string }).type === 'deny' || (rule as { host?: string }).host !== undefined)
        problems.push(`${where}: a rule with type or host: the generated ACLs allow from any host`);
    }
  }
  return problems;
}

/** What no ingress may route: the probes, the metrics and the API docs (docs/operations.md, "The HTTP surface"). */
const NEVER_ROUTED = ['/health/live', '/health/ready', '/metrics', '/docs', '/docs/json'];

/** Whether a request path is matched by an Ingress or HTTPRoute path of `type` (Prefix: by whole segments). */
function routeMatches(type: string, routePath: string, path: string): boolean {
  if (type === 'Exact') return routePath === path;
  if (type === 'RegularExpression') return new RegExp(`^${routePath}`).test(path);
  // Prefix, PathPrefix and ImplementationSpecific (which controllers treat as a prefix).
  const prefix = routePath.replace(/\/+$/, '');
  return prefix === '' || path === prefix || path.startsWith(`${prefix}/`);
}

/**
 * Ingresses and Gateway API HTTPRoutes: none may route a probe, /metrics or /docs to any service, and
 * only the sender (the public routes) may be behind one.
 */
export function ingressProblems(objects: readonly K8sObject[]): string[] {
  const problems: string[] = [];
  const ours = new Set(serviceNames.map((s) => `outreach-${s}`));
  for (const object of objects) {
    const where = `${object.kind} ${object.metadata.name}`;
    const routes: Array<{ type: string; path: string; service: string }> = [];
    if (object.kind === 'Ingress') {
      const spec = object.spec as unknown as {
        defaultBackend?: { service?: { name: string } };
        rules?: Array<{
          http?: { paths?: Array<{ path?: string; pathType?: string; backend?: { service?: { name: string } } }> };
        }>;
      };
      if (spec.defaultBackend?.service)
        routes.push({ type: 'Prefix', path: '/', service: spec.defaultBackend.service.name });
      for (const rule of spec.rules ?? [])
        for (const p of rule.http?.paths ?? [])
          routes.push({
            type: p.pathType ?? 'ImplementationSpecific',
            path: p.path ?? '/',
            service: p.backend?.service?.name ?? '',
          });
    } else if (object.kind === 'HTTPRoute') {
      const spec = object.spec as unknown as {
        rules?: Array<{
          matches?: Array<{ path?: { type?: string; value?: string } }>;
          backendRefs?: Array<{ name: string }>;
        }>;
      };
      for (const rule of spec.rules ?? []) {
        const matches = rule.matches?.length ? rule.matches : [{}];
        for (const match of matches)
          for (const backend of rule.backendRefs ?? [])
            routes.push({
              type: match.path?.type ?? 'PathPrefix',
              path: match.path?.value ?? '/',
              service: backend.name,
            });
      }
    } else continue;
    for (const route of routes) {
      if (!ours.has(route.service)) continue;
      if (route.service !== 'outreach-sender')
        problems.push(
          `${where}: routes ${route.path} to ${route.service}; only the sender's public routes go through an ingress`,
        );
      const exposed = NEVER_ROUTED.filter((path) => routeMatches(route.type, route.path, path));
      if (exposed.length > 0)
        problems.push(`${where}: ${route.type} ${route.path} to ${route.service} also routes ${exposed.join(', ')}`);
    }
  }
  return problems;
}
