/**
 * A local Apicurio Registry (ADR 011): the `all` distribution from Maven Central, run on a JDK 21+,
 * its storage a schema of our PostgreSQL. Its Confluent-compatible API, /apis/ccompat/v7, is what
 * services and data teams' tools (Spark, Flink, ClickHouse, Confluent's serializers) talk to.
 *
 * Started by scripts/infra.ts (`infra:up`, the test setup), stopped by `infra:down`, only by the pid
 * this checkout recorded. SCHEMA_REGISTRY_URL in the environment skips it (an existing registry).
 */
import { spawn, spawnSync } from 'node:child_process';
import { closeSync, existsSync, mkdirSync, openSync, readFileSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import pg from 'pg';

export const APICURIO_VERSION = '3.3.3';
const ARTIFACT = `io.apicurio:apicurio-registry-app:${APICURIO_VERSION}:tar.gz:all`;
/** The path every ccompat client is given: Confluent's serializers, Spark, Flink and ClickHouse append /subjects etc. */
export const CCOMPAT_PATH = '/apis/ccompat/v7';

export interface RegistryInstance {
  readonly dir: string;
  readonly port: number;
  readonly managementPort: number;
  /** libpq URL of a database on the server that is to hold the registry's own `database`. */
  readonly databaseUrl: string;
  readonly database: string;
  /** The schema of `database` that holds the registry's tables. */
  readonly schema: string;
}

export interface RegistryInfo {
  /** The ccompat base URL, as SCHEMA_REGISTRY_URL takes it. */
  readonly url: string;
  readonly source: 'env' | 'local';
  readonly pid?: number;
}

export class RegistryError extends Error {
  override readonly name = 'RegistryError';
}

function log(message: string): void {
  process.stderr.write(`[infra] ${message}\n`);
}

function isAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

/** Our recorded pid, if that process is still the registry this checkout started (pids get reused). */
export function ourRegistryPid(dir: string): number | undefined {
  const file = join(dir, 'registry.pid');
  if (!existsSync(file)) return undefined;
  const pid = Number(readFileSync(file, 'utf8').trim());
  if (!Number.isInteger(pid) || pid <= 0 || !isAlive(pid)) return undefined;
  let cmd = '';
  try {
    cmd = readFileSync(`/proc/${pid}/cmdline`, 'utf8').replaceAll('\0', ' ');
  } catch {
    return undefined;
  }
  return cmd.includes('quarkus-run.jar') && cmd.includes(`-Doutreach.registry.dir=${dir}`) ? pid : undefined;
}

function javaMajor(java: string): number {
  const probe = spawnSync(java, ['-version'], { encoding: 'utf8' });
  if (probe.error || probe.status !== 0) return 0;
  const match = /version "(\d+)(?:\.(\d+))?/.exec(probe.stderr);
  return match ? Number(match[1] === '1' ? match[2] : match[1]) : 0;
}

/**
 * A Java 21+ binary: REGISTRY_JAVA_HOME, then JAVA_HOME, then `java`, then any JDK under
 * /usr/lib/jvm (the Kafka broker is happy on 17, which is often the default).
 */
export function registryJava(): string {
  const candidates = [
    process.env.REGISTRY_JAVA_HOME && join(process.env.REGISTRY_JAVA_HOME, 'bin', 'java'),
    process.env.JAVA_HOME && join(process.env.JAVA_HOME, 'bin', 'java'),
    'java',
    ...(existsSync('/usr/lib/jvm')
      ? readdirSync('/usr/lib/jvm')
          .sort()
          .reverse()
          .map((name) => join('/usr/lib/jvm', name, 'bin', 'java'))
      : []),
  ].filter((c): c is string => Boolean(c));
  for (const java of candidates) if (javaMajor(java) >= 21) return java;
  throw new RegistryError(
    [
      'The schema registry (Apicurio Registry 3) needs Java 21 or newer, and none was found.',
      '  Install one:     apt-get install openjdk-21-jre-headless   (or set REGISTRY_JAVA_HOME to a JDK 21+)',
      '  Or skip it:      export SCHEMA_REGISTRY_URL=http://host:8081/apis/ccompat/v7   (use an existing registry)',
      '  Or with Docker:  docker compose up -d apicurio',
    ].join('\n'),
  );
}

/** The distribution, fetched once into `<dir>/app` by Maven (a changed version fetches again). */
function ensureDistribution(dir: string): string {
  const app = join(dir, 'app');
  const stamp = join(app, '.artifact');
  if (existsSync(stamp) && readFileSync(stamp, 'utf8') === ARTIFACT) return app;
  const staging = join(dir, 'download');
  rmSync(staging, { recursive: true, force: true });
  log(`registry: fetching ${ARTIFACT} (about 160 MB) with Maven ...`);
  const fetched = spawnSync(
    'mvn',
    ['-B', '-q', 'dependency:copy', `-Dartifact=${ARTIFACT}`, `-DoutputDirectory=${staging}`],
    { stdio: 'inherit' },
  );
  if (fetched.error || fetched.status !== 0) {
    throw new RegistryError(`Maven could not fetch ${ARTIFACT}; see its output above (or set SCHEMA_REGISTRY_URL).`);
  }
  const archive = readdirSync(staging).find((f) => f.endsWith('.tar.gz'));
  if (!archive) throw new RegistryError(`Maven fetched no archive into ${staging}`);
  rmSync(app, { recursive: true, force: true });
  mkdirSync(app, { recursive: true });
  const unpacked = spawnSync('tar', ['xzf', join(staging, archive), '-C', app], { stdio: 'inherit' });
  if (unpacked.status !== 0) throw new RegistryError(`could not unpack ${archive}`);
  rmSync(staging, { recursive: true, force: true });
  writeFileSync(stamp, ARTIFACT);
  return app;
}

/** `postgres://user:pass@host:port/db` as the JDBC URL, user and password Apicurio's datasource takes. */
export function jdbcSettings(databaseUrl: string, schema: string): { url: string; user: string; password: string } {
  const url = new URL(databaseUrl);
  return {
    url: `jdbc:postgresql://${url.hostname}:${url.port || '5432'}${url.pathname}?currentSchema=${schema}`,
    user: decodeURIComponent(url.username || 'postgres'),
    password: decodeURIComponent(url.password),
  };
}

/**
 * The registry's own database on the server of `serverUrl`, and its schema in it. Its own database,
 * not only a schema of ours: Apicurio decides whether it is initialized by looking for its `apicurio`
 * table in any schema of the database, so a second registry (or a leftover) would confuse it.
 */
async function ensureDatabase(serverUrl: string, database: string, schema: string): Promise<string> {
  const admin = new pg.Client({ connectionString: serverUrl, connectionTimeoutMillis: 5_000 });
  await admin.connect();
  try {
    const exists = await admin.query('SELECT 1 FROM pg_database WHERE datname = $1', [database]);
    if (exists.rowCount === 0) await admin.query(`CREATE DATABASE "${database}"`);
  } finally {
    await admin.end();
  }
  const url = new URL(serverUrl);
  url.pathname = `/${database}`;
  const client = new pg.Client({ connectionString: url.toString(), connectionTimeoutMillis: 5_000 });
  await client.connect();
  try {
    await client.query(`CREATE SCHEMA IF NOT EXISTS "${schema}"`);
  } finally {
    await client.end();
  }
  return url.toString();
}

/** Whether the management interface reports the registry ready (storage included). */
export async function registryReady(managementPort: number): Promise<boolean> {
  try {
    const response = await fetch(`http://127.0.0.1:${managementPort}/health/ready`, {
      signal: AbortSignal.timeout(2_000),
    });
    return response.ok;
  } catch {
    return false;
  }
}

/** Whether `url` answers the ccompat API (GET /subjects is a JSON array). */
export async function ccompatAnswers(url: string): Promise<boolean> {
  try {
    // The global compatibility setting: a constant-size answer (listing /subjects grows with every
    // registered subject and took seconds on a busy registry).
    const response = await fetch(`${url}/config`, { signal: AbortSignal.timeout(5_000) });
    const body = response.ok ? ((await response.json()) as { compatibilityLevel?: unknown }) : undefined;
    return typeof body?.compatibilityLevel === 'string';
  } catch {
    return false;
  }
}

async function waitUntil(condition: () => Promise<boolean>, timeoutMs: number): Promise<boolean> {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    if (await condition()) return true;
    await new Promise((r) => setTimeout(r, 250));
  }
  return condition();
}

function tail(file: string, lines = 25): string {
  return existsSync(file) ? readFileSync(file, 'utf8').split('\n').slice(-lines).join('\n') : '(no log)';
}

/** Starts (or reuses) the registry of `instance`; resolves once it is ready and answers ccompat. */
export async function startRegistry(instance: RegistryInstance, timeoutMs: number): Promise<RegistryInfo> {
  if (process.env.SCHEMA_REGISTRY_URL) {
    const url = process.env.SCHEMA_REGISTRY_URL.replace(/\/+$/, '');
    log(`registry: using SCHEMA_REGISTRY_URL=${url}`);
    if (!(await waitUntil(() => ccompatAnswers(url), timeoutMs))) {
      throw new RegistryError(`SCHEMA_REGISTRY_URL=${url} does not answer GET /subjects`);
    }
    return { url, source: 'env' };
  }
  const url = `http://127.0.0.1:${instance.port}${CCOMPAT_PATH}`;
  const running = ourRegistryPid(instance.dir);
  if (running !== undefined) {
    if (await waitUntil(() => registryReady(instance.managementPort), timeoutMs)) {
      return { url, source: 'local', pid: running };
    }
    throw new RegistryError(
      `the registry (pid ${running}) runs but is not ready; see ${join(instance.dir, 'registry.log')}`,
    );
  }
  const java = registryJava();
  const app = ensureDistribution(instance.dir);
  const storage = await ensureDatabase(instance.databaseUrl, instance.database, instance.schema);
  const jdbc = jdbcSettings(storage, instance.schema);
  const logFile = join(instance.dir, 'registry.log');
  const out = openSync(logFile, 'a');
  const child = spawn(
    java,
    ['-Xms64m', '-Xmx384m', `-Doutreach.registry.dir=${instance.dir}`, '-jar', join(app, 'quarkus-run.jar')],
    {
      cwd: app,
      detached: true,
      stdio: ['ignore', out, out],
      env: {
        ...process.env,
        QUARKUS_HTTP_HOST: '127.0.0.1',
        QUARKUS_HTTP_PORT: String(instance.port),
        QUARKUS_MANAGEMENT_HOST: '127.0.0.1',
        QUARKUS_MANAGEMENT_PORT: String(instance.managementPort),
        QUARKUS_LOG_CONSOLE_JSON: 'false',
        APICURIO_STORAGE_KIND: 'sql',
        APICURIO_STORAGE_SQL_KIND: 'postgresql',
        APICURIO_DATASOURCE_URL: jdbc.url,
        APICURIO_DATASOURCE_USERNAME: jdbc.user,
        APICURIO_DATASOURCE_PASSWORD: jdbc.password,
      },
    },
  );
  closeSync(out);
  if (child.pid === undefined) throw new RegistryError('could not start the registry process');
  const pid = child.pid;
  writeFileSync(join(instance.dir, 'registry.pid'), `${pid}\n`);
  child.unref();
  log(`registry: started Apicurio ${APICURIO_VERSION} pid ${pid} on ${url}, waiting for it to be ready ...`);
  let exitCode: number | null | undefined;
  child.once('exit', (code) => (exitCode = code ?? -1));
  const ready = await waitUntil(
    async () => exitCode !== undefined || ((await registryReady(instance.managementPort)) && ccompatAnswers(url)),
    timeoutMs,
  );
  child.removeAllListeners('exit');
  if (exitCode !== undefined || !ready) {
    throw new RegistryError(
      `the registry ${exitCode !== undefined ? `exited with code ${exitCode}` : 'did not become ready'} during start-up. ` +
        `Last lines of ${logFile}:\n${tail(logFile)}`,
    );
  }
  return { url, source: 'local', pid };
}

/** Stops the registry this checkout started (SIGTERM, then SIGKILL after 20 s). */
export async function stopRegistry(dir: string): Promise<void> {
  const pid = ourRegistryPid(dir);
  rmSync(join(dir, 'registry.pid'), { force: true });
  if (pid === undefined) {
    log('registry: not running (nothing this checkout started)');
    return;
  }
  log(`registry: stopping pid ${pid} ...`);
  process.kill(pid, 'SIGTERM');
  if (!(await waitUntil(async () => !isAlive(pid), 20_000))) {
    process.kill(pid, 'SIGKILL');
    await waitUntil(async () => !isAlive(pid), 5_000);
  }
  log('registry: stopped');
}
