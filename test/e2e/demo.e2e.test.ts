/**
 * The README's main-job command, at a small scale: the whole stack as processes, the workload
 * through the public ingress, a sender SIGKILL midway, and a report whose guarantees must hold.
 */
import { spawn } from 'node:child_process';
import { join } from 'node:path';
import { waitFor } from '@outreach/testkit';
import { expect, inject, it } from 'vitest';

const root = join(import.meta.dirname, '..', '..');

it('npm run demo delivers the workload with 0 duplicates, 0 contaminated, and exactly the planted stalls flagged', async () => {
  const child = spawn(
    process.execPath,
    ['--conditions=source', '--import', join(root, 'node_modules', 'tsx', 'dist', 'loader.mjs'), 'scripts/demo.ts'],
    {
      cwd: root,
      env: {
        PATH: process.env.PATH,
        HOME: process.env.HOME,
        KAFKA_BROKERS: inject('kafkaBrokers'),
        DATABASE_URL: inject('databaseUrl'),
        DEMO_EXIT: '1',
        DEMO_CANDIDATES: '240',
        DEMO_PORT_BASE: '18080',
      },
      stdio: ['ignore', 'pipe', 'pipe'],
    },
  );
  let output = '';
  child.stdout.on('data', (chunk: Buffer) => (output += chunk.toString()));
  child.stderr.on('data', (chunk: Buffer) => (output += chunk.toString()));
  let exitCode: number | null | undefined;
  child.on('exit', (code) => (exitCode = code));
  await waitFor(() => exitCode !== undefined, {
    timeoutMs: 240_000,
    intervalMs: 500,
    description: 'the demo to finish',
  });

  expect(exitCode, output).toBe(0);
  expect(output).toMatch(/\| duplicate emails \(same send, or same campaign\+address\+step\) \| 0 \|/);
  expect(output).toMatch(/\| contaminated candidates \| 0 \|/);
  expect(output).toMatch(/\(0 unexpected, 0 missed\)/);
  expect(output).toMatch(/sender SIGKILLed midway \| yes, restarted/);
  expect(output).toMatch(/all guarantees held/);
}, 300_000);
