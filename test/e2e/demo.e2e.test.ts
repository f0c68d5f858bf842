/** The README's main-job command brings the stack up and every service reports ready. */
import { spawn } from 'node:child_process';
import { join } from 'node:path';
import { waitFor } from '@outreach/shared/testing';
import { expect, inject, it } from 'vitest';

const root = join(import.meta.dirname, '..', '..');

it('npm run demo starts all four services and each reports ready', async () => {
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
        DEMO_EXIT_WHEN_READY: '1',
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
  await waitFor(() => exitCode !== undefined, { timeoutMs: 90_000, description: 'the demo to finish' });

  expect(exitCode, output).toBe(0);
  for (const service of ['planner', 'sender', 'experiment', 'liveness']) {
    expect(output).toMatch(new RegExp(`${service}\\s+ready`));
  }
});
