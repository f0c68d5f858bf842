/**
 * The Docker-free stack of scripts/infra.ts: idempotent start, and clear messages when a tool is
 * missing. Runs against the infrastructure the global setup already provided.
 */
import { execFileSync, spawnSync } from 'node:child_process';
import { mkdtempSync, readdirSync, readFileSync, rmSync, symlinkSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { freePort } from '@outreach/shared/testing';
import { describe, expect, it } from 'vitest';

const root = join(import.meta.dirname, '..', '..');
const script = join(root, 'scripts', 'infra.ts');
const tsxLoader = join(root, 'node_modules', 'tsx', 'dist', 'loader.mjs');

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
