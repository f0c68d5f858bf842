/**
 * The Docker-free stack of scripts/infra.ts: idempotent start, clear messages when a tool is
 * missing, and an owned PostgreSQL started from a checkout under a directory only its owner enters
 * (issue #22). Runs against the infrastructure the global setup already provided.
 */
import { execFileSync, spawnSync } from 'node:child_process';
import {
  existsSync,
  lstatSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  rmSync,
  statSync,
  symlinkSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { createPool, waitForPostgres } from '@outreach/shared';
import { freePort } from '@outreach/testkit';
import { describe, expect, it } from 'vitest';
import {
  ownedPostgresHome,
  purgeOwnedPostgres,
  startOwnedPostgres,
  stopOwnedPostgres,
  type PostgresInstance,
} from '../../scripts/infra.js';

const root = join(import.meta.dirname, '..', '..');
const script = join(root, 'scripts', 'infra.ts');
const tsxLoader = join(root, 'node_modules', 'tsx', 'dist', 'loader.mjs');

const hasPostgresBinaries = existsSync('/usr/lib/postgresql') || Boolean(process.env.PG_BIN_DIR);
const isRoot = process.getuid?.() === 0;

async function query<T>(url: string, sql: string): Promise<T[]> {
  const pool = createPool({ connectionString: url, applicationName: 'infra-test', max: 1 });
  try {
    return (await pool.query(sql)).rows as T[];
  } finally {
    await pool.end();
  }
}

function runInfra(args: string[], env: NodeJS.ProcessEnv) {
  return spawnSync(process.execPath, ['--conditions=source', '--import', tsxLoader, script, ...args], {
    cwd: root,
    env,
    encoding: 'utf8',
    timeout: 60_000,
  });
}

function brokerPids(): number[] {
  return readdirSync('/proc')
    .filter((entry) => /^\d+$/.test(entry))
    .filter((pid) => {
      try {
        const cmd = readFileSync(`/proc/${pid}/cmdline`, 'utf8');
        return cmd.includes('kafka.Kafka') && cmd.includes(join(root, '.infra', 'kafka', 'server.properties'));
      } catch {
        return false;
      }
    })
    .map(Number);
}

/** A PATH holding node plus the named tools only, so "java missing" can be simulated. */
function pathWith(...tools: string[]): { path: string; cleanup: () => void } {
  const dir = mkdtempSync(join(tmpdir(), 'infra-path-'));
  symlinkSync(process.execPath, join(dir, 'node'));
  for (const tool of tools) {
    const location = execFileSync('sh', ['-c', `command -v ${tool}`], { encoding: 'utf8' }).trim();
    symlinkSync(location, join(dir, tool));
  }
  return { path: dir, cleanup: () => rmSync(dir, { recursive: true, force: true }) };
}

describe('scripts/infra.ts', () => {
  // With KAFKA_BROKERS given, the tests run against someone else's broker; `up` would start a second one.
  it.skipIf(Boolean(process.env.KAFKA_BROKERS))('up twice leaves exactly one broker, with the same pid', async () => {
    const env = {
      PATH: process.env.PATH,
      HOME: process.env.HOME,
      ...(process.env.KAFKA_PORT ? { KAFKA_PORT: process.env.KAFKA_PORT } : {}),
      ...(process.env.KAFKA_CONTROLLER_PORT ? { KAFKA_CONTROLLER_PORT: process.env.KAFKA_CONTROLLER_PORT } : {}),
    };
    const first = runInfra(['up'], env);
    expect(first.status, first.stderr).toBe(0);
    const pidsAfterFirst = brokerPids();
    const second = runInfra(['up'], env);
    expect(second.status, second.stderr).toBe(0);
    expect(second.stderr).toMatch(/already running/);
    expect(brokerPids()).toEqual(pidsAfterFirst);
    expect(pidsAfterFirst.length).toBeLessThanOrEqual(1);
    const status = runInfra(['status'], env);
    expect(status.status).toBe(0);
    expect(status.stdout).toMatch(/^kafka\s+up/m);
  });

  it('stops with a clear message when Java is missing', async () => {
    const infraDir = mkdtempSync(join(tmpdir(), 'infra-nojava-'));
    const { path, cleanup } = pathWith('mvn');
    try {
      const port = await freePort();
      const result = runInfra(['up'], {
        PATH: path,
        INFRA_DIR: infraDir,
        KAFKA_PORT: String(port),
        KAFKA_CONTROLLER_PORT: String(await freePort()),
      });
      expect(result.status).toBe(1);
      expect(result.stderr).toMatch(/Java was not found/);
      expect(result.stderr).toMatch(/openjdk-17/);
      expect(result.stderr).toMatch(/KAFKA_BROKERS/);
    } finally {
      cleanup();
      rmSync(infraDir, { recursive: true, force: true });
    }
  });

  it('stops with a clear message when Maven is missing and the jars are not cached', async () => {
    const infraDir = mkdtempSync(join(tmpdir(), 'infra-nomvn-'));
    const { path, cleanup } = pathWith('java');
    try {
      const result = runInfra(['up'], {
        PATH: path,
        INFRA_DIR: infraDir,
        KAFKA_PORT: String(await freePort()),
        KAFKA_CONTROLLER_PORT: String(await freePort()),
        JAVA_HOME: dirname(
          dirname(execFileSync('sh', ['-c', 'readlink -f "$(command -v java)"'], { encoding: 'utf8' }).trim()),
        ),
      });
      expect(result.status).toBe(1);
      expect(result.stderr).toMatch(/Maven was not found/);
      expect(result.stderr).toMatch(/apt-get install maven/);
      expect(result.stderr).toMatch(/KAFKA_BROKERS/);
    } finally {
      cleanup();
      rmSync(infraDir, { recursive: true, force: true });
    }
  });
});

describe.skipIf(!hasPostgresBinaries)('an owned PostgreSQL in a checkout under a 0700 directory (#22)', () => {
  it('starts, answers, restarts on the same data, and infra:down --purge stops it and deletes that data', async () => {
    // mkdtemp makes a 0700 directory: as root, the `postgres` user that runs initdb cannot enter it.
    const parent = mkdtempSync(join(tmpdir(), 'infra-private-'));
    const infraDir = join(parent, 'clone', '.infra');
    const instance: PostgresInstance = { dir: join(infraDir, 'postgres'), port: await freePort() };
    const home = ownedPostgresHome(instance);
    try {
      expect(statSync(parent).mode & 0o777).toBe(0o700);
      const url = await startOwnedPostgres(instance);
      expect(await query(url, 'SELECT 1 AS one')).toEqual([{ one: 1 }]);
      await query(url, 'CREATE TABLE kept (n int); INSERT INTO kept VALUES (42)');
      expect(existsSync(join(home, 'data', 'PG_VERSION'))).toBe(true);
      if (isRoot) {
        expect(home.startsWith(parent)).toBe(false);
        const postgresUid = Number(execFileSync('id', ['-u', 'postgres'], { encoding: 'utf8' }).trim());
        expect(statSync(home).uid).toBe(postgresUid);
        expect(statSync(home).mode & 0o777).toBe(0o700);
      }

      await stopOwnedPostgres(instance);
      await expect(waitForPostgres(url, 1_000)).rejects.toThrow();
      await startOwnedPostgres(instance);
      expect(await query(url, 'SELECT n FROM kept')).toEqual([{ n: 42 }]);

      // The CLI's default instance is this one: same INFRA_DIR, same port.
      const down = runInfra(['down', '--purge'], {
        PATH: process.env.PATH,
        HOME: process.env.HOME,
        INFRA_DIR: infraDir,
        OWNED_PG_PORT: String(instance.port),
      });
      expect(down.status, down.stderr).toBe(0);
      expect(down.stderr).toMatch(/stopping the owned server/);
      await expect(waitForPostgres(url, 1_000)).rejects.toThrow();
      expect(existsSync(join(home, 'data'))).toBe(false);
      if (isRoot) expect(existsSync(home)).toBe(false);
    } finally {
      await purgeOwnedPostgres(instance).catch(() => undefined);
      rmSync(parent, { recursive: true, force: true });
    }
  });

  it.skipIf(!isRoot)('refuses a planted symlink at its place in the temp directory, and touches nothing', async () => {
    const parent = mkdtempSync(join(tmpdir(), 'infra-planted-'));
    const target = join(parent, 'victim');
    mkdirSync(target);
    const instance: PostgresInstance = { dir: join(parent, 'clone', '.infra', 'postgres'), port: await freePort() };
    const home = ownedPostgresHome(instance);
    try {
      symlinkSync(target, home);
      await expect(startOwnedPostgres(instance)).rejects.toThrow(/not a directory owned by postgres/);
      expect(lstatSync(home).isSymbolicLink()).toBe(true);
      expect(statSync(target).uid).toBe(0);
      expect(readdirSync(target)).toEqual([]);
    } finally {
      rmSync(home, { force: true });
      rmSync(parent, { recursive: true, force: true });
    }
  });

  it.skipIf(!isRoot)('explains when the temp directory itself is closed to the postgres user', async () => {
    const closed = mkdtempSync(join(tmpdir(), 'infra-closed-tmp-'));
    const instance: PostgresInstance = { dir: join(closed, 'clone', '.infra', 'postgres'), port: await freePort() };
    const saved = process.env.TMPDIR;
    process.env.TMPDIR = closed;
    try {
      await expect(startOwnedPostgres(instance)).rejects.toThrow(/postgres user cannot enter .*Set TMPDIR/);
    } finally {
      if (saved === undefined) delete process.env.TMPDIR;
      else process.env.TMPDIR = saved;
      rmSync(closed, { recursive: true, force: true });
    }
  });
});
