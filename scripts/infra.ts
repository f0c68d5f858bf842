/**
 * Local infrastructure without Docker: a real single-node Apache Kafka (KRaft) built from its
 * Maven Central artifacts, and PostgreSQL (an existing server, or one this project owns).
 *
 *   npm run infra:up       start (or reuse) both; prints the environment to point services at them
 *   npm run infra:status   what runs, and whether it answers
 *   npm run infra:down     stop only what this checkout started, by pid   [--purge: delete data]
 *
 * `up` also starts a schema registry (ADR 011): Apicurio Registry, its storage a schema of the same
 * PostgreSQL server, in a database of its own (scripts/lib/registry.ts); SCHEMA_REGISTRY_URL uses an existing one, INFRA_REGISTRY=off skips it.
 *
 * `up` also starts the secured stack (ADR 010): a second broker with TLS, SASL, mutual TLS and ACLs,
 * and a PostgreSQL with TLS and password or certificate logins, both trusting a CA made here
 * (scripts/lib/secured.ts, scripts/lib/pki.ts). INFRA_SECURED=off skips it.
 *
 * Everything lives under .infra/ (git-ignored): jars, data, logs, pid files and state.json; except,
 * when run as root, the owned PostgreSQL's files, which live in $TMPDIR/outreach-pg-<hash> (see
 * ownedPostgresHome; `infra:down -- --purge` removes them too).
 * See docs/adr/002-local-infrastructure.md for the choices made here.
 */
import { execFileSync, spawn, spawnSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import {
  chmodSync,
  closeSync,
  existsSync,
  lchownSync,
  lstatSync,
  mkdirSync,
  openSync,
  readFileSync,
  renameSync,
  rmSync,
  writeFileSync,
} from 'node:fs';
import { createConnection, createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { redactUrl, waitForKafka, waitForPostgres, type KafkaSecurity } from '@outreach/shared';
import { ensurePki, PkiError } from './lib/pki.js';
import {
  newPasswords,
  PKI_CLIENTS,
  postgresHba,
  postgresSuperuserUrl,
  scramFormatArgs,
  SECURED_KAFKA_PRINCIPALS,
  securedKafkaProperties,
  superUserSecurity,
  KAFKA_SUPER_USER,
  type SecuredKafkaInfo,
  type SecuredKafkaPorts,
  type SecuredPostgresInfo,
} from './lib/secured.js';
import { ourRegistryPid, ccompatAnswers, RegistryError, startRegistry, stopRegistry } from './lib/registry.js';

const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '..');
const INFRA_DIR = resolve(process.env.INFRA_DIR ?? join(ROOT, '.infra'));
const KAFKA_DIR = join(INFRA_DIR, 'kafka');
const PG_DIR = join(INFRA_DIR, 'postgres');
const SECURED_KAFKA_DIR = join(INFRA_DIR, 'kafka-secured');
const SECURED_PG_DIR = join(INFRA_DIR, 'postgres-tls');
const PKI_DIR = join(INFRA_DIR, 'pki');
const REGISTRY_DIR = join(INFRA_DIR, 'registry');
/** The database (on the plain stack's PostgreSQL) and schema that hold the local registry's tables. */
/**
 * The registry's own database, one per checkout (a hash of its path): two checkouts on one machine
 * (a developer's and a CI clone) each get their own subjects, as they get their own broker.
 */
const REGISTRY_DATABASE = `outreach_registry_${createHash('sha256').update(resolve(INFRA_DIR)).digest('hex').slice(0, 12)}`;
const REGISTRY_DB_SCHEMA = 'apicurio';
const STATE_FILE = join(INFRA_DIR, 'state.json');
const POM = join(ROOT, 'infra', 'kafka', 'pom.xml');
const LOG4J_CONFIG = join(ROOT, 'infra', 'kafka', 'log4j2.yaml');

const KAFKA_HOST = '127.0.0.1';
const KAFKA_PORT = Number(process.env.KAFKA_PORT ?? 9092);
const KAFKA_CONTROLLER_PORT = Number(process.env.KAFKA_CONTROLLER_PORT ?? KAFKA_PORT + 1);
const KAFKA_HEAP = process.env.KAFKA_HEAP_OPTS ?? '-Xms512m -Xmx1g';
const MACHINE_PG_URL = 'postgres://postgres@127.0.0.1:5432/test';
const OWNED_PG_PORT = Number(process.env.OWNED_PG_PORT ?? 54329);
const READY_TIMEOUT_MS = Number(process.env.INFRA_READY_TIMEOUT_MS ?? 90_000);

/** One local broker: its directory (data, logs, pid, config) and ports. Jars are shared. */
export interface KafkaInstance {
  readonly dir: string;
  readonly port: number;
  readonly controllerPort: number;
  /** A secured broker: its own configuration, SCRAM users at format time, and how its probe logs in. */
  readonly secured?: {
    readonly properties: (dataDir: string) => string;
    readonly formatArgs: readonly string[];
    readonly probe: KafkaSecurity;
    /** Listeners beyond `port` and `controllerPort`. */
    readonly extraPorts: readonly number[];
    readonly heap?: string;
  };
}

/** One PostgreSQL server this project owns: its directory and port. */
export interface PostgresInstance {
  readonly dir: string;
  readonly port: number;
  /** ssl=on with these files, this pg_hba.conf, and the URL to reach it by (it refuses plaintext). */
  readonly tls?: {
    readonly cert: string;
    readonly key: string;
    readonly ca: string;
    readonly hba: string;
    readonly url: (database: string) => string;
  };
}

export const defaultKafka: KafkaInstance = { dir: KAFKA_DIR, port: KAFKA_PORT, controllerPort: KAFKA_CONTROLLER_PORT };
export const defaultPostgres: PostgresInstance = { dir: PG_DIR, port: OWNED_PG_PORT };

export interface InfraState {
  readonly kafkaBrokers: string;
  readonly databaseUrl: string;
  readonly kafka: { readonly source: 'env' | 'local'; readonly pid?: number; readonly clusterId?: string };
  readonly postgres: { readonly source: 'env' | 'machine' | 'local'; readonly version?: string };
  /** The secured broker and TLS PostgreSQL (ADR 010), when started. */
  readonly secured?: SecuredInfra;
  /** The schema registry's Confluent-compatible base URL (ADR 011), when started or given. */
  readonly schemaRegistryUrl?: string;
  readonly registry?: { readonly source: 'env' | 'local'; readonly pid?: number };
}

export interface SecuredInfra {
  readonly kafka: SecuredKafkaInfo & { readonly pid: number };
  readonly postgres: SecuredPostgresInfo;
}

export class InfraError extends Error {
  override readonly name = 'InfraError';
}

// ---------------------------------------------------------------- processes

function isAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

function commandLine(pid: number): string {
  try {
    return readFileSync(`/proc/${pid}/cmdline`, 'utf8').replaceAll('\0', ' ');
  } catch {
    return '';
  }
}

function readPid(file: string): number | undefined {
  if (!existsSync(file)) return undefined;
  const pid = Number(readFileSync(file, 'utf8').trim().split('\n')[0]);
  return Number.isInteger(pid) && pid > 0 ? pid : undefined;
}

/** The pid in our pid file, if that process is still the broker we started (pids get reused). */
function ourKafkaPid(instance: KafkaInstance = defaultKafka): number | undefined {
  const pid = readPid(join(instance.dir, 'kafka.pid'));
  if (pid === undefined || !isAlive(pid)) return undefined;
  const cmd = commandLine(pid);
  return cmd.includes('kafka.Kafka') && cmd.includes(join(instance.dir, 'server.properties')) ? pid : undefined;
}

function portInUse(port: number, host = '127.0.0.1'): Promise<boolean> {
  return new Promise((resolvePromise) => {
    const socket = createConnection({ port, host });
    socket.once('connect', () => {
      socket.destroy();
      resolvePromise(true);
    });
    socket.once('error', () => resolvePromise(false));
  });
}

async function waitUntil(condition: () => boolean | Promise<boolean>, timeoutMs: number): Promise<boolean> {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    if (await condition()) return true;
    await new Promise((r) => setTimeout(r, 200));
  }
  return condition();
}

function tail(file: string, lines = 30): string {
  if (!existsSync(file)) return '(no log)';
  return readFileSync(file, 'utf8').split('\n').slice(-lines).join('\n');
}

// ---------------------------------------------------------------- tools

function javaBinary(): string {
  return process.env.JAVA_HOME ? join(process.env.JAVA_HOME, 'bin', 'java') : 'java';
}

function requireJava(): string {
  const java = javaBinary();
  const probe = spawnSync(java, ['-version'], { encoding: 'utf8' });
  if (probe.error || probe.status !== 0) {
    throw new InfraError(
      [
        `Java was not found (tried "${java}"). The local Kafka broker needs Java 17 or newer.`,
        '  Install it:      apt-get install openjdk-17-jre-headless   (or set JAVA_HOME to a JDK 17+)',
        '  Or skip it:      export KAFKA_BROKERS=host:9092             (use an existing broker)',
        '  Or with Docker:  docker compose up -d kafka postgres',
      ].join('\n'),
    );
  }
  const match = /version "(\d+)(?:\.(\d+))?/.exec(probe.stderr);
  const major = match ? Number(match[1] === '1' ? match[2] : match[1]) : 0;
  if (major < 17) {
    throw new InfraError(
      `Java ${major || '(unknown version)'} found at "${java}", but Kafka 4 needs Java 17 or newer. ` +
        'Install a JDK 17+ and set JAVA_HOME, or set KAFKA_BROKERS to an existing broker.',
    );
  }
  return java;
}

function requireMaven(): string {
  const probe = spawnSync('mvn', ['-v'], { encoding: 'utf8' });
  if (probe.error || probe.status !== 0) {
    throw new InfraError(
      [
        'Maven was not found. It fetches the pinned Kafka jars (infra/kafka/pom.xml) once, into .infra/kafka/libs.',
        '  Install it:      apt-get install maven',
        '  Or skip it:      export KAFKA_BROKERS=host:9092   (use an existing broker)',
        '  Or with Docker:  docker compose up -d kafka postgres',
      ].join('\n'),
    );
  }
  return 'mvn';
}

// ---------------------------------------------------------------- kafka

function pomDigest(pom: string): string {
  return createHash('sha256').update(readFileSync(pom)).digest('hex');
}

/** Jars are fetched once per pom.xml content into `libs`; a changed pin fetches again. */
export function ensureMavenLibs(pom: string, libs: string): string {
  const stamp = join(libs, '.pom-sha256');
  if (existsSync(stamp) && readFileSync(stamp, 'utf8') === pomDigest(pom)) return libs;
  const mvn = requireMaven();
  const staging = `${libs}.staging`;
  rmSync(staging, { recursive: true, force: true });
  log(`fetching jars with Maven (${pom}) into ${libs} ...`);
  const result = spawnSync(
    mvn,
    ['-B', '-q', '-f', pom, 'dependency:copy-dependencies', '-DincludeScope=runtime', `-DoutputDirectory=${staging}`],
    { stdio: 'inherit' },
  );
  if (result.status !== 0) throw new InfraError(`Maven could not fetch the jars of ${pom}; see its output above.`);
  rmSync(libs, { recursive: true, force: true });
  renameSync(staging, libs);
  writeFileSync(stamp, pomDigest(pom));
  return libs;
}

function ensureKafkaLibs(): string {
  return ensureMavenLibs(POM, join(KAFKA_DIR, 'libs'));
}

function kafkaProperties(instance: KafkaInstance, dataDir: string): string {
  const listeners = `PLAINTEXT://${KAFKA_HOST}:${instance.port},CONTROLLER://${KAFKA_HOST}:${instance.controllerPort}`;
  return [
    '# Generated by scripts/infra.ts; edit the script, not this file.',
    'process.roles=broker,controller',
    'node.id=1',
    `controller.quorum.bootstrap.servers=${KAFKA_HOST}:${instance.controllerPort}`,
    `listeners=${listeners}`,
    // kafkajs connects to the advertised address, so it must stay on loopback.
    `advertised.listeners=${listeners}`,
    'inter.broker.listener.name=PLAINTEXT',
    'controller.listener.names=CONTROLLER',
    'listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT',
    `log.dirs=${dataDir}`,
    // Single node: the defaults (3 replicas, min ISR 2) leave no group or transaction coordinator.
    'offsets.topic.replication.factor=1',
    'offsets.topic.num.partitions=10',
    'transaction.state.log.replication.factor=1',
    'transaction.state.log.min.isr=1',
    'share.coordinator.state.topic.replication.factor=1',
    'share.coordinator.state.topic.min.isr=1',
    'group.initial.rebalance.delay.ms=0',
    'num.partitions=3',
    // Topics are declared and created explicitly (topics:ensure); a typo must not create one.
    'auto.create.topics.enable=false',
    'log.retention.hours=168',
    // Every partition holds open files (log, index, time index), and test suites create thousands
    // of partitions under unique prefixes: at the process's open-file limit (20,000 on this machine,
    // not raisable) the broker dies. Tests delete their topics when done; a deleted partition's
    // files are closed after this delay, not the default minute.
    'file.delete.delay.ms=1000',
    '',
  ].join('\n');
}

function javaArgs(instance: KafkaInstance, libs: string, main: string, ...args: string[]): string[] {
  return [
    `-Dlog4j2.configurationFile=${LOG4J_CONFIG}`,
    `-Dkafka.logs.dir=${join(instance.dir, 'logs')}`,
    '-cp',
    `${libs}/*`,
    main,
    ...args,
  ];
}

async function kafkaUp(): Promise<InfraState['kafka'] & { brokers: string }> {
  if (process.env.KAFKA_BROKERS) {
    const brokers = process.env.KAFKA_BROKERS;
    log(`kafka: using KAFKA_BROKERS=${brokers}`);
    const { clusterId } = await waitForKafka(brokers.split(','), READY_TIMEOUT_MS);
    return { source: 'env', brokers, clusterId };
  }
  const { brokers, pid, clusterId } = await startKafka(defaultKafka);
  return { source: 'local', brokers, pid, clusterId };
}

/** Starts (or reuses) the broker of `instance`; resolves once it answers a metadata request. */
export async function startKafka(
  instance: KafkaInstance,
): Promise<{ brokers: string; pid: number; clusterId: string }> {
  const brokers = `${KAFKA_HOST}:${instance.port}`;
  const name = instance.secured ? 'kafka (secured)' : 'kafka';
  const probe = instance.secured?.probe;
  const running = ourKafkaPid(instance);
  if (running !== undefined) {
    log(`${name}: already running (pid ${running}), checking it answers ...`);
    const { clusterId } = await waitForKafka([brokers], READY_TIMEOUT_MS, probe);
    return { brokers, pid: running, clusterId };
  }
  for (const port of [instance.port, instance.controllerPort, ...(instance.secured?.extraPorts ?? [])]) {
    if (await portInUse(port)) {
      throw new InfraError(
        `port ${port} is already taken by a process this checkout did not start. ` +
          'Stop it, choose other ports with KAFKA_PORT (and KAFKA_CONTROLLER_PORT), or use it with KAFKA_BROKERS.',
      );
    }
  }
  const java = requireJava();
  const libs = ensureKafkaLibs();
  const dataDir = join(instance.dir, 'data');
  const logsDir = join(instance.dir, 'logs');
  mkdirSync(dataDir, { recursive: true });
  mkdirSync(logsDir, { recursive: true });
  const properties = join(instance.dir, 'server.properties');
  writeFileSync(
    properties,
    instance.secured ? instance.secured.properties(dataDir) : kafkaProperties(instance, dataDir),
  );

  if (!existsSync(join(dataDir, 'meta.properties'))) {
    const clusterId = execFileSync(java, javaArgs(instance, libs, 'kafka.tools.StorageTool', 'random-uuid'), {
      encoding: 'utf8',
    }).trim();
    log(`${name}: formatting ${dataDir} (cluster ${clusterId})`);
    execFileSync(
      java,
      javaArgs(
        instance,
        libs,
        'kafka.tools.StorageTool',
        'format',
        '--standalone',
        '-t',
        clusterId,
        '-c',
        properties,
        ...(instance.secured?.formatArgs ?? []),
      ),
      { stdio: ['ignore', 'ignore', 'inherit'] },
    );
  }

  const stdoutLog = join(logsDir, 'stdout.log');
  const out = openSync(stdoutLog, 'a');
  const heap = instance.secured?.heap ?? KAFKA_HEAP;
  const child = spawn(java, [...heap.split(/\s+/), ...javaArgs(instance, libs, 'kafka.Kafka', properties)], {
    detached: true,
    stdio: ['ignore', out, out],
  });
  closeSync(out);
  if (child.pid === undefined) throw new InfraError('could not start the Kafka broker process');
  const pid = child.pid;
  writeFileSync(join(instance.dir, 'kafka.pid'), `${pid}\n`);
  child.unref();
  log(`${name}: started broker pid ${pid}, waiting for a metadata response on ${brokers} ...`);

  const exited = new Promise<never>((_, reject) =>
    child.once('exit', (code) =>
      reject(
        new InfraError(
          `the Kafka broker exited with code ${code} during start-up. Last lines of ${join(logsDir, 'server.log')}:\n` +
            tail(join(logsDir, 'server.log')) +
            `\n${tail(stdoutLog, 10)}`,
        ),
      ),
    ),
  );
  const { clusterId } = await Promise.race([waitForKafka([brokers], READY_TIMEOUT_MS, probe), exited]);
  child.removeAllListeners('exit');
  return { brokers, pid, clusterId };
}

/** Stops the broker of `instance` (SIGTERM, then SIGKILL after 30 s), only if this checkout started it. */
export async function stopKafka(instance: KafkaInstance = defaultKafka): Promise<void> {
  const pidFile = join(instance.dir, 'kafka.pid');
  const pid = ourKafkaPid(instance);
  if (pid === undefined) {
    rmSync(pidFile, { force: true });
    log('kafka: not running (nothing this checkout started)');
    return;
  }
  log(`kafka: stopping broker pid ${pid} ...`);
  process.kill(pid, 'SIGTERM');
  if (!(await waitUntil(() => !isAlive(pid), 30_000))) {
    log(`kafka: pid ${pid} ignored SIGTERM for 30 s, sending SIGKILL`);
    process.kill(pid, 'SIGKILL');
    await waitUntil(() => !isAlive(pid), 10_000);
  }
  rmSync(pidFile, { force: true });
  log('kafka: stopped');
}

// ---------------------------------------------------------------- postgres

function postgresBinDir(): string | undefined {
  const fromEnv = process.env.PG_BIN_DIR;
  if (fromEnv) return fromEnv;
  const base = '/usr/lib/postgresql';
  if (!existsSync(base)) return undefined;
  const versions = execFileSync('ls', [base], { encoding: 'utf8' })
    .split('\n')
    .filter((v) => /^\d+$/.test(v))
    .sort((a, b) => Number(b) - Number(a));
  for (const version of versions) {
    const dir = join(base, version, 'bin');
    if (existsSync(join(dir, 'initdb'))) return dir;
  }
  return undefined;
}

/** Where commands run as `postgres` start: our own working directory (a 0700 checkout) may be closed to it. */
const POSTGRES_CWD = '/';

/** `runuser` lives in sbin, which a non-login shell's PATH may lack (CI runners, cron). */
function runuserPath(): string {
  const onPath = (process.env.PATH ?? '').split(':').map((dir) => join(dir, 'runuser'));
  return [...onPath, '/usr/sbin/runuser', '/sbin/runuser'].find((path) => existsSync(path)) ?? 'runuser';
}

/** initdb and postgres refuse to run as root; as root we run them as the `postgres` system user. */
function asPostgresUser(command: string, args: string[]): [string, string[]] {
  return process.getuid?.() === 0 ? [runuserPath(), ['-u', 'postgres', '--', command, ...args]] : [command, args];
}

/** The uid and gid of the `postgres` system user, which runs the owned server when we are root. */
function postgresUser(): { uid: number; gid: number } {
  try {
    const id = (flag: string) => Number(execFileSync('id', [flag, 'postgres'], { encoding: 'utf8' }).trim());
    return { uid: id('-u'), gid: id('-g') };
  } catch {
    throw new InfraError(
      'Running as root, the owned PostgreSQL runs as the `postgres` system user, which does not exist here. ' +
        'apt-get install postgresql creates it; or set DATABASE_URL to an existing server.',
    );
  }
}

/**
 * Where an owned server keeps its data, socket and log. Not root: the instance directory itself.
 * As root: initdb and postgres refuse root, so they run as `postgres`, and that user must be able to
 * walk every parent of the data directory. A checkout may sit under a directory only its owner enters
 * (`mktemp -d` makes 0700 ones; issue #22), so as root the files live outside the checkout, in
 * $TMPDIR/outreach-pg-<sha256 of the instance directory>. The name depends only on the instance path,
 * so stop and purge find it again without any recorded state, and two checkouts never share it.
 */
export function ownedPostgresHome(instance: PostgresInstance): string {
  if (process.getuid?.() !== 0) return instance.dir;
  const digest = createHash('sha256').update(resolve(instance.dir)).digest('hex').slice(0, 16);
  return join(tmpdir(), `outreach-pg-${digest}`);
}

/**
 * As root, makes the home of `ownedPostgresHome` a 0700 directory owned by `postgres`, and checks that
 * user can enter it. The temp directory is shared with every local user and the name is predictable,
 * so an existing entry is used only if it is a real directory (not a symlink) owned by postgres or
 * root: the sticky bit of /tmp stops anyone else from swapping such an entry afterwards.
 */
function prepareOwnedHome(home: string): void {
  if (process.getuid?.() !== 0) {
    mkdirSync(join(home, 'run'), { recursive: true });
    return;
  }
  const { uid, gid } = postgresUser();
  mkdirSync(home, { recursive: true, mode: 0o700 });
  const stat = lstatSync(home);
  if (!stat.isDirectory() || (stat.uid !== uid && stat.uid !== 0)) {
    throw new InfraError(
      `${home} exists but is not a directory owned by postgres or root; not using it. Remove it and retry.`,
    );
  }
  lchownSync(home, uid, gid);
  chmodSync(home, 0o700);
  mkdirSync(join(home, 'run'), { recursive: true, mode: 0o700 });
  lchownSync(join(home, 'run'), uid, gid);
  const [cmd, args] = asPostgresUser('test', ['-w', home, '-a', '-x', home]);
  const probe = spawnSync(cmd, args, { cwd: POSTGRES_CWD });
  if (probe.error) throw new InfraError(`could not run ${cmd} to act as the postgres user: ${probe.error.message}`);
  if (probe.status !== 0) {
    throw new InfraError(
      `The postgres user cannot enter ${home}: a parent directory is closed to it. ` +
        'Set TMPDIR to a directory it can reach (e.g. /tmp), or set DATABASE_URL to an existing server.',
    );
  }
}

function ownedPgUrl(instance: PostgresInstance): string {
  return `postgres://postgres@127.0.0.1:${instance.port}/test`;
}

async function postgresUp(): Promise<InfraState['postgres'] & { url: string }> {
  if (process.env.DATABASE_URL) {
    const url = process.env.DATABASE_URL;
    log(`postgres: using DATABASE_URL=${redactUrl(url)}`);
    const { version } = await waitForPostgres(url, READY_TIMEOUT_MS);
    return { source: 'env', url, version };
  }
  try {
    const { version } = await waitForPostgres(MACHINE_PG_URL, 5_000);
    log(`postgres: using the server already answering at ${MACHINE_PG_URL}`);
    return { source: 'machine', url: MACHINE_PG_URL, version };
  } catch {
    // Fall through: start one this checkout owns.
  }
  const url = await startOwnedPostgres(defaultPostgres);
  const { version } = await waitForPostgres(url, READY_TIMEOUT_MS);
  return { source: 'local', url, version };
}

/** Starts (or reuses) a PostgreSQL server this project owns; returns the URL of its `test` database. */
export async function startOwnedPostgres(instance: PostgresInstance): Promise<string> {
  const url = instance.tls ? instance.tls.url('test') : ownedPgUrl(instance);
  const port = instance.port;
  const bin = postgresBinDir();
  if (!bin) {
    throw new InfraError(
      [
        'No PostgreSQL answers at 127.0.0.1:5432 and no server binaries were found to start one.',
        '  Install them:    apt-get install postgresql   (or set PG_BIN_DIR to a directory holding initdb and pg_ctl)',
        '  Or point at one: export DATABASE_URL=postgres://user@host:5432/db',
      ].join('\n'),
    );
  }
  const home = ownedPostgresHome(instance);
  const dataDir = join(home, 'data');
  const runDir = join(home, 'run');
  prepareOwnedHome(home);
  if (!existsSync(join(dataDir, 'PG_VERSION'))) {
    log(`postgres: initdb ${dataDir}${home === instance.dir ? '' : ` (for ${instance.dir})`}`);
    const [cmd, args] = asPostgresUser(join(bin, 'initdb'), [
      '-D',
      dataDir,
      '-U',
      'postgres',
      '--auth=trust',
      '--encoding=UTF8',
      '--no-instructions',
    ]);
    execFileSync(cmd, args, { cwd: POSTGRES_CWD, stdio: ['ignore', 'ignore', 'inherit'] });
  }
  const tlsOptions = instance.tls ? installPostgresTls(instance.tls, home, dataDir) : '';
  const postmaster = readPid(join(dataDir, 'postmaster.pid'));
  const ours = postmaster !== undefined && isAlive(postmaster);
  if (instance.tls && !ours && (await portInUse(port))) {
    throw new InfraError(
      `port ${port} is already taken by a process this checkout did not start; set SECURED_PG_PORT or free it`,
    );
  }
  if (!(await portInUse(port))) {
    log(`postgres: starting the project's own server on port ${port}${instance.tls ? ' (TLS)' : ''}`);
    const [cmd, args] = asPostgresUser(join(bin, 'pg_ctl'), [
      '-D',
      dataDir,
      '-l',
      join(home, 'postgres.log'),
      '-o',
      `-p ${port} -k ${runDir} -c listen_addresses=127.0.0.1 -c max_connections=200${tlsOptions}`,
      '-w',
      'start',
    ]);
    execFileSync(cmd, args, { cwd: POSTGRES_CWD, stdio: ['ignore', 'ignore', 'inherit'] });
  }
  await waitForPostgres(
    instance.tls ? instance.tls.url('postgres') : `postgres://postgres@127.0.0.1:${port}/postgres`,
    READY_TIMEOUT_MS,
  );
  const [cmd, args] = asPostgresUser(join(bin, 'psql'), [
    '-h',
    // The TLS server refuses plaintext TCP; its own administration goes through the Unix socket.
    instance.tls ? runDir : '127.0.0.1',
    '-p',
    String(port),
    '-U',
    'postgres',
    '-d',
    'postgres',
    '-tAc',
    "SELECT 1 FROM pg_database WHERE datname = 'test'",
  ]);
  if (execFileSync(cmd, args, { cwd: POSTGRES_CWD, encoding: 'utf8' }).trim() !== '1') {
    const [ccmd, cargs] = asPostgresUser(join(bin, 'createdb'), [
      '-h',
      instance.tls ? runDir : '127.0.0.1',
      '-p',
      String(port),
      '-U',
      'postgres',
      'test',
    ]);
    execFileSync(ccmd, cargs, { cwd: POSTGRES_CWD });
  }
  await waitForPostgres(url, READY_TIMEOUT_MS);
  return url;
}

/**
 * Copies the server's certificate, key and CA next to its data (the key must belong to the user the
 * server runs as, mode 0600) and writes its pg_hba.conf; returns the server options that use them.
 */
function installPostgresTls(tls: NonNullable<PostgresInstance['tls']>, home: string, dataDir: string): string {
  const dir = join(home, 'tls');
  mkdirSync(dir, { recursive: true, mode: 0o700 });
  const files = { 'server.crt': tls.cert, 'server.key': tls.key, 'ca.crt': tls.ca };
  const owner = process.getuid?.() === 0 ? postgresUser() : undefined;
  for (const [name, source] of Object.entries(files)) {
    const target = join(dir, name);
    writeFileSync(target, readFileSync(source), { mode: 0o600 });
    chmodSync(target, 0o600);
    if (owner) lchownSync(target, owner.uid, owner.gid);
  }
  const hba = join(dataDir, 'pg_hba.conf');
  writeFileSync(hba, tls.hba);
  if (owner) {
    lchownSync(dir, owner.uid, owner.gid);
    lchownSync(hba, owner.uid, owner.gid);
  }
  return [
    ' -c ssl=on',
    `-c ssl_cert_file=${join(dir, 'server.crt')}`,
    `-c ssl_key_file=${join(dir, 'server.key')}`,
    `-c ssl_ca_file=${join(dir, 'ca.crt')}`,
    '-c password_encryption=scram-sha-256',
  ].join(' ');
}

/** Where an instance's data may be: its home, and `<dir>/data` where root kept it before issue #22. */
function ownedDataDirs(instance: PostgresInstance): string[] {
  return [...new Set([join(ownedPostgresHome(instance), 'data'), join(instance.dir, 'data')])];
}

/** Stops (`-m fast`) a server this project owns, if it runs. */
export async function stopOwnedPostgres(instance: PostgresInstance = defaultPostgres): Promise<void> {
  const dataDir = ownedDataDirs(instance).find((dir) => {
    const pid = readPid(join(dir, 'postmaster.pid'));
    return pid !== undefined && isAlive(pid);
  });
  if (dataDir === undefined) {
    log('postgres: no server owned by this checkout is running (a machine or DATABASE_URL server is left alone)');
    return;
  }
  const pid = readPid(join(dataDir, 'postmaster.pid'));
  const bin = postgresBinDir();
  if (!bin) throw new InfraError('cannot find pg_ctl to stop the owned PostgreSQL; set PG_BIN_DIR');
  log(`postgres: stopping the owned server (pid ${pid})`);
  const [cmd, args] = asPostgresUser(join(bin, 'pg_ctl'), ['-D', dataDir, '-m', 'fast', '-w', 'stop']);
  execFileSync(cmd, args, { cwd: POSTGRES_CWD, stdio: ['ignore', 'ignore', 'inherit'] });
}

/** Stops a server this project owns and deletes its data, wherever `ownedPostgresHome` put it. */
export async function purgeOwnedPostgres(instance: PostgresInstance = defaultPostgres): Promise<void> {
  await stopOwnedPostgres(instance);
  for (const dir of ownedDataDirs(instance)) rmSync(dir, { recursive: true, force: true });
  const home = ownedPostgresHome(instance);
  if (home !== instance.dir) rmSync(home, { recursive: true, force: true });
}

// ---------------------------------------------------------------- secured stack (ADR 010)

const SECURED_HEAP = process.env.KAFKA_SECURED_HEAP_OPTS ?? '-Xms256m -Xmx768m';

/** A port the OS offers now (for a secured instance whose default port another process holds). */
function freePortNow(): Promise<number> {
  return new Promise((resolvePromise, reject) => {
    const server = createServer();
    server.once('error', reject);
    server.listen(0, KAFKA_HOST, () => {
      const address = server.address();
      server.close(() => resolvePromise(typeof address === 'object' && address ? address.port : 0));
    });
  });
}

/**
 * The ports of a secured instance, chosen once and kept in `<dir>/ports.json` (a KRaft node records
 * its controller endpoint when it is formatted): the defaults when they are free, else free ones,
 * so a second checkout on the machine (CI) does not collide with the first. A port added later (a
 * new listener) is chosen the same way and kept with the others, which stay as they were.
 */
async function instancePorts<T extends Record<string, number>>(dir: string, defaults: T): Promise<T> {
  const file = join(dir, 'ports.json');
  const kept: Record<string, number> = existsSync(file) ? JSON.parse(readFileSync(file, 'utf8')) : {};
  const missing = Object.entries(defaults).filter(([name]) => kept[name] === undefined);
  if (missing.length === 0) return kept as T;
  const chosen: Record<string, number> = { ...kept };
  const anyTaken = (await Promise.all(missing.map(([, port]) => portInUse(port)))).some(Boolean);
  for (const [name, port] of missing) chosen[name] = anyTaken ? await freePortNow() : port;
  mkdirSync(dir, { recursive: true });
  writeFileSync(file, `${JSON.stringify(chosen, null, 2)}\n`);
  return chosen as T;
}

/** Passwords of the secured broker's users, made when its storage is (re)formatted. */
function securedPasswords(dir: string): Record<string, string> {
  const file = join(dir, 'credentials.json');
  const formatted = existsSync(join(dir, 'data', 'meta.properties'));
  if (formatted && existsSync(file)) {
    const passwords = JSON.parse(readFileSync(file, 'utf8')) as Record<string, string>;
    if (SECURED_KAFKA_PRINCIPALS.every((p) => passwords[p] !== undefined)) return passwords;
  }
  // New users (or lost passwords) need a new format: SCRAM users are created with the metadata.
  rmSync(join(dir, 'data'), { recursive: true, force: true });
  const passwords = newPasswords(SECURED_KAFKA_PRINCIPALS);
  mkdirSync(dir, { recursive: true });
  writeFileSync(file, `${JSON.stringify(passwords, null, 2)}\n`, { mode: 0o600 });
  return passwords;
}

function securedKafkaInstance(
  ports: SecuredKafkaPorts,
  pki: ReturnType<typeof ensurePki>,
  passwords: Record<string, string>,
  dir = SECURED_KAFKA_DIR,
): KafkaInstance {
  return {
    dir,
    port: ports.sasl,
    controllerPort: ports.controller,
    secured: {
      properties: (dataDir) => securedKafkaProperties(ports, pki, passwords, dataDir),
      formatArgs: scramFormatArgs(passwords),
      probe: superUserSecurity({ caFile: pki.ca.cert, passwords }),
      extraPorts: [ports.mtls, ports.oauth],
      heap: SECURED_HEAP,
    },
  };
}

/** A pki that ensurePki made (the secured stack's), for the brokers of tests. */
function securedPki(): ReturnType<typeof ensurePki> {
  try {
    return ensurePki(PKI_DIR, PKI_CLIENTS);
  } catch (error) {
    if (error instanceof PkiError) throw new InfraError(error.message);
    throw error;
  }
}

/**
 * A secured broker of a test's own, for a test that restarts it (the shared one stays up for every
 * other spec): the shared stack's configuration and CA, data under `dir`, free ports, and users with
 * passwords of its own. `startKafka(instance)` starts it (and again after `stopKafka`); `info` is how
 * to reach it, as the shared one's SecuredKafkaInfo.
 */
export async function ownSecuredKafka(dir: string): Promise<{ instance: KafkaInstance; info: SecuredKafkaInfo }> {
  const pki = securedPki();
  const ports: SecuredKafkaPorts = {
    sasl: await freePortNow(),
    mtls: await freePortNow(),
    controller: await freePortNow(),
    oauth: await freePortNow(),
  };
  const passwords = newPasswords(SECURED_KAFKA_PRINCIPALS);
  return { instance: securedKafkaInstance(ports, pki, passwords, dir), info: securedKafkaInfo(ports, pki, passwords) };
}

/** How tests and tools reach a secured broker with these ports, CA and users. */
function securedKafkaInfo(
  ports: SecuredKafkaPorts,
  pki: ReturnType<typeof ensurePki>,
  passwords: Record<string, string>,
): SecuredKafkaInfo {
  return {
    brokers: `${KAFKA_HOST}:${ports.sasl}`,
    mtlsBrokers: `${KAFKA_HOST}:${ports.mtls}`,
    oauthBrokers: `${KAFKA_HOST}:${ports.oauth}`,
    caFile: pki.ca.cert,
    untrustedCaFile: pki.untrustedCa.cert,
    passwords,
    clientCerts: pki.clients,
    rogueClient: pki.rogueClient,
    superUser: KAFKA_SUPER_USER,
  };
}

/** The jars of Apache Kafka the local brokers run on (kafka-clients among them), fetched once. */
export function kafkaLibs(): string {
  return ensureKafkaLibs();
}

async function securedPostgresInstance(pki: ReturnType<typeof ensurePki>): Promise<PostgresInstance> {
  const { port } = await instancePorts(SECURED_PG_DIR, {
    port: Number(process.env.SECURED_PG_PORT ?? OWNED_PG_PORT + 1),
  });
  return {
    dir: SECURED_PG_DIR,
    port,
    tls: {
      cert: pki.postgresServer.cert,
      key: pki.postgresServer.key,
      ca: pki.ca.cert,
      hba: postgresHba(),
      url: (database) => postgresSuperuserUrl(port, pki, database),
    },
  };
}

/** Starts (or reuses) the secured broker and the TLS PostgreSQL; what tests need to reach them. */
export async function startSecured(): Promise<SecuredInfra> {
  const pki = securedPki();
  const base = Number(process.env.KAFKA_SECURED_PORT ?? KAFKA_PORT + 2);
  const ports = await instancePorts(SECURED_KAFKA_DIR, {
    sasl: base,
    mtls: base + 1,
    controller: base + 2,
    oauth: base + 3,
  });
  const postgres = await securedPostgresInstance(pki);
  const credentials = join(SECURED_KAFKA_DIR, 'credentials.json');
  const known = existsSync(credentials)
    ? (JSON.parse(readFileSync(credentials, 'utf8')) as Record<string, string>)
    : {};
  // Servers holding certificates or users older than what the tests will use are restarted.
  const stale = pki.fresh || !SECURED_KAFKA_PRINCIPALS.every((p) => known[p] !== undefined);
  if (
    stale &&
    (ourKafkaPid({ dir: SECURED_KAFKA_DIR, port: 0, controllerPort: 0 }) !== undefined || runningSecured())
  ) {
    await stopSecured({});
  }
  const passwords =
    ourKafkaPid({ dir: SECURED_KAFKA_DIR, port: 0, controllerPort: 0 }) === undefined
      ? securedPasswords(SECURED_KAFKA_DIR)
      : known;
  const instance = securedKafkaInstance(ports, pki, passwords);
  await restartIfReconfigured(instance);
  const { pid } = await startKafka(instance);
  await startOwnedPostgres(postgres);
  return {
    kafka: { ...securedKafkaInfo(ports, pki, passwords), pid },
    postgres: {
      port: postgres.port,
      superuserUrl: postgresSuperuserUrl(postgres.port, pki),
      caFile: pki.ca.cert,
      untrustedCaFile: pki.untrustedCa.cert,
    },
  };
}

/**
 * A running secured broker whose configuration is not what this checkout would write now (a listener
 * added or moved) is stopped, so that `startKafka` starts it with the new one; its data and users stay.
 */
async function restartIfReconfigured(instance: KafkaInstance): Promise<void> {
  const file = join(instance.dir, 'server.properties');
  if (ourKafkaPid(instance) === undefined || !existsSync(file) || !instance.secured) return;
  if (readFileSync(file, 'utf8') === instance.secured.properties(join(instance.dir, 'data'))) return;
  log('kafka (secured): its configuration changed; restarting it');
  await stopKafka(instance);
}

/** The secured stack this checkout started, if both halves still run; nothing is started. */
export function runningSecured(): SecuredInfra | undefined {
  const secured = readState()?.secured;
  if (!secured || readPid(join(SECURED_KAFKA_DIR, 'kafka.pid')) !== secured.kafka.pid) return undefined;
  if (!isAlive(secured.kafka.pid)) return undefined;
  const postgresRuns = ownedDataDirs({ dir: SECURED_PG_DIR, port: secured.postgres.port }).some((dir) => {
    const pid = readPid(join(dir, 'postmaster.pid'));
    return pid !== undefined && isAlive(pid);
  });
  return postgresRuns ? secured : undefined;
}

async function stopSecured(options: { purge?: boolean }): Promise<void> {
  await stopKafka({ dir: SECURED_KAFKA_DIR, port: 0, controllerPort: 0 });
  const postgres: PostgresInstance = { dir: SECURED_PG_DIR, port: 0 };
  await (options.purge ? purgeOwnedPostgres : stopOwnedPostgres)(postgres);
  if (options.purge) {
    rmSync(SECURED_KAFKA_DIR, { recursive: true, force: true });
    rmSync(SECURED_PG_DIR, { recursive: true, force: true });
    rmSync(PKI_DIR, { recursive: true, force: true });
  }
}

// ---------------------------------------------------------------- commands

function log(message: string): void {
  process.stderr.write(`[infra] ${message}\n`);
}

export const infraDir = INFRA_DIR;

export function readState(): InfraState | undefined {
  if (!existsSync(STATE_FILE)) return undefined;
  return JSON.parse(readFileSync(STATE_FILE, 'utf8')) as InfraState;
}

/** Whether `up` starts (or uses SCHEMA_REGISTRY_URL as) the schema registry (INFRA_REGISTRY=off: no). */
export const registryWanted = process.env.INFRA_REGISTRY !== 'off';

/** Starts (or reuses) the local registry over the plain stack's PostgreSQL; ports chosen once, like the secured stack's. */
async function registryUp(databaseUrl: string): Promise<NonNullable<InfraState['registry']> & { url: string }> {
  // Not 8081..8084: the demo's services listen there (DEMO_PORT_BASE 8080 + 1..4), as in compose.
  const ports = await instancePorts(REGISTRY_DIR, {
    port: Number(process.env.REGISTRY_PORT ?? 8085),
    managementPort: Number(process.env.REGISTRY_MANAGEMENT_PORT ?? 9085),
  });
  try {
    return await startRegistry(
      { dir: REGISTRY_DIR, ...ports, databaseUrl, database: REGISTRY_DATABASE, schema: REGISTRY_DB_SCHEMA },
      READY_TIMEOUT_MS,
    );
  } catch (error) {
    if (error instanceof RegistryError) throw new InfraError(error.message);
    throw error;
  }
}

/** The registry URL this checkout's state names, if the registry behind it still answers; nothing is started. */
export async function runningRegistryUrl(): Promise<string | undefined> {
  if (process.env.SCHEMA_REGISTRY_URL) return process.env.SCHEMA_REGISTRY_URL.replace(/\/+$/, '');
  const url = readState()?.schemaRegistryUrl;
  return url !== undefined && (await ccompatAnswers(url)) ? url : undefined;
}

/** Whether `npm run infra:up` and the test setup start the secured stack too (INFRA_SECURED=off: no). */
export const securedWanted = process.env.INFRA_SECURED !== 'off';

/**
 * Starts (or reuses) the plain broker and database, and with `secured` the secured stack too (the
 * tests and `infra:up` ask for it; scripts that only need the plain stack do not).
 */
export async function up(options: { secured?: boolean } = {}): Promise<InfraState> {
  mkdirSync(INFRA_DIR, { recursive: true });
  // Sequential on purpose: Kafka's start-up runs blocking child processes (format), which would
  // starve a concurrent Postgres probe's timers.
  const postgres = await postgresUp();
  const kafka = await kafkaUp();
  const { brokers, ...kafkaState } = kafka;
  const { url, ...postgresState } = postgres;
  const registry = registryWanted ? await registryUp(url) : undefined;
  const secured = options.secured ? await startSecured() : runningSecured();
  const state: InfraState = {
    kafkaBrokers: brokers,
    databaseUrl: url,
    kafka: kafkaState,
    postgres: postgresState,
    ...(secured ? { secured } : {}),
    ...(registry
      ? {
          schemaRegistryUrl: registry.url,
          registry: { source: registry.source, ...(registry.pid !== undefined ? { pid: registry.pid } : {}) },
        }
      : {}),
  };
  writeFileSync(STATE_FILE, `${JSON.stringify(state, null, 2)}\n`);
  return state;
}

export async function down(options: { purge?: boolean } = {}): Promise<void> {
  await stopSecured(options);
  await stopRegistry(REGISTRY_DIR);
  await stopKafka(defaultKafka);
  await (options.purge ? purgeOwnedPostgres : stopOwnedPostgres)(defaultPostgres);
  rmSync(STATE_FILE, { force: true });
  if (options.purge) {
    rmSync(join(KAFKA_DIR, 'data'), { recursive: true, force: true });
    log('purged Kafka and owned PostgreSQL data (jars kept)');
  }
}

export async function status(): Promise<boolean> {
  const state = readState();
  const pid = ourKafkaPid(defaultKafka);
  let healthy = true;
  const kafkaTarget = process.env.KAFKA_BROKERS ?? state?.kafkaBrokers ?? `${KAFKA_HOST}:${KAFKA_PORT}`;
  try {
    const { clusterId } = await waitForKafka(kafkaTarget.split(','), 3_000);
    console.log(
      `kafka     up    ${kafkaTarget} cluster=${clusterId}${pid ? ` pid=${pid} (started by this checkout)` : ''}`,
    );
  } catch {
    healthy = false;
    console.log(`kafka     down  ${kafkaTarget}${pid ? ` (pid ${pid} alive but not answering)` : ''}`);
  }
  const pgTarget = process.env.DATABASE_URL ?? state?.databaseUrl ?? MACHINE_PG_URL;
  try {
    const { version } = await waitForPostgres(pgTarget, 3_000);
    console.log(`postgres  up    ${redactUrl(pgTarget)} version=${version} (${state?.postgres.source ?? 'unknown'})`);
  } catch {
    healthy = false;
    console.log(`postgres  down  ${redactUrl(pgTarget)}`);
  }
  const registryUrl = process.env.SCHEMA_REGISTRY_URL ?? state?.schemaRegistryUrl;
  if (registryUrl) {
    const answers = await ccompatAnswers(registryUrl);
    const pid = ourRegistryPid(REGISTRY_DIR);
    healthy &&= answers;
    console.log(
      `registry  ${answers ? 'up  ' : 'down'}  ${registryUrl}${pid ? ` pid=${pid} (started by this checkout)` : ''}`,
    );
  }
  const secured = runningSecured();
  if (secured) {
    try {
      const probe = superUserSecurity(secured.kafka);
      const { clusterId } = await waitForKafka([secured.kafka.brokers], 3_000, probe);
      console.log(
        `kafka     up    ${secured.kafka.brokers} (SASL_SSL), ${secured.kafka.mtlsBrokers} (mTLS), ${secured.kafka.oauthBrokers} (unsecured OAUTHBEARER, test only) cluster=${clusterId} pid=${secured.kafka.pid} (secured)`,
      );
      const { version } = await waitForPostgres(secured.postgres.superuserUrl, 3_000);
      console.log(`postgres  up    127.0.0.1:${secured.postgres.port} (TLS, verify-full) version=${version} (secured)`);
    } catch (error) {
      healthy = false;
      console.log(`secured   down  ${(error as Error).message}`);
    }
  } else if (securedWanted) {
    console.log('secured   not running (npm run infra:up starts it; INFRA_SECURED=off skips it)');
  }
  return healthy;
}

async function main(argv: string[]): Promise<number> {
  const [command, ...flags] = argv;
  switch (command) {
    case 'up': {
      const state = await up({ secured: securedWanted });
      log(
        `ready: kafka ${state.kafkaBrokers} (${state.kafka.source}), postgres ${redactUrl(state.databaseUrl)} (${state.postgres.source})`,
      );
      if (state.secured) {
        log(
          `ready: secured kafka ${state.secured.kafka.brokers} (SASL_SSL), ${state.secured.kafka.mtlsBrokers} (mTLS) and ${state.secured.kafka.oauthBrokers} (unsecured OAUTHBEARER, test only), ` +
            `TLS postgres 127.0.0.1:${state.secured.postgres.port}; CA ${state.secured.kafka.caFile}, users in ${join(SECURED_KAFKA_DIR, 'credentials.json')}`,
        );
      }
      if (state.schemaRegistryUrl) {
        log(`ready: schema registry ${state.schemaRegistryUrl} (${state.registry?.source ?? 'env'})`);
      }
      console.log(`export KAFKA_BROKERS=${state.kafkaBrokers}`);
      console.log(`export DATABASE_URL=${state.databaseUrl}`);
      if (state.schemaRegistryUrl) console.log(`export SCHEMA_REGISTRY_URL=${state.schemaRegistryUrl}`);
      return 0;
    }
    case 'down':
      await down({ purge: flags.includes('--purge') });
      return 0;
    case 'status':
      return (await status()) ? 0 : 1;
    case 'env': {
      const state = readState();
      if (!state) throw new InfraError('no local infrastructure state; run `npm run infra:up` first');
      console.log(`export KAFKA_BROKERS=${state.kafkaBrokers}`);
      console.log(`export DATABASE_URL=${state.databaseUrl}`);
      if (state.schemaRegistryUrl) console.log(`export SCHEMA_REGISTRY_URL=${state.schemaRegistryUrl}`);
      return 0;
    }
    default:
      console.error('usage: infra.ts up | down [--purge] | status | env');
      return 2;
  }
}

if (process.argv[1] && resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  main(process.argv.slice(2)).then(
    (code) => process.exit(code),
    (error: unknown) => {
      process.stderr.write(
        `[infra] ${error instanceof InfraError ? error.message : String((error as Error)?.stack ?? error)}\n`,
      );
      process.exit(1);
    },
  );
}
