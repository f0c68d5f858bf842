/**
 * `npm run console:screenshots` (the README's images of the console), smoked into a temporary
 * directory so it cannot rot: it brings the stack and the console up, signs in, acts, and writes a
 * PNG of every page, each a real image of the width it asks for.
 */
import { spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { waitFor } from '@outreach/testkit';
import { afterAll, expect, inject, it } from 'vitest';
import { PAGES } from '../../scripts/console-screenshots.js';

const root = join(import.meta.dirname, '..', '..');
const out = mkdtempSync(join(tmpdir(), 'console-shots-'));
afterAll(() => rmSync(out, { recursive: true, force: true }));

it('npm run console:screenshots writes a PNG of the sign-in and of every page', async () => {
  const child = spawn(
    process.execPath,
    [
      '--conditions=source',
      '--import',
      join(root, 'node_modules', 'tsx', 'dist', 'loader.mjs'),
      'scripts/console-screenshots.ts',
      '--out',
      out,
      '--port-base',
      '18960',
    ],
    {
      cwd: root,
      env: {
        PATH: process.env.PATH,
        HOME: process.env.HOME,
        KAFKA_BROKERS: inject('kafkaBrokers'),
        DATABASE_URL: inject('databaseUrl'),
        ...(process.env.SCHEMA_REGISTRY_URL ? { SCHEMA_REGISTRY_URL: process.env.SCHEMA_REGISTRY_URL } : {}),
        ...(process.env.CHROMIUM_PATH ? { CHROMIUM_PATH: process.env.CHROMIUM_PATH } : {}),
      },
      stdio: ['ignore', 'pipe', 'pipe'],
    },
  );
  let output = '';
  child.stdout.on('data', (chunk: Buffer) => (output += chunk.toString()));
  child.stderr.on('data', (chunk: Buffer) => (output += chunk.toString()));
  let exitCode: number | null | undefined;
  child.on('exit', (code) => (exitCode = code));
  await waitFor(() => exitCode !== undefined, { timeoutMs: 180_000, intervalMs: 500, description: 'the script' });
  expect(exitCode, output).toBe(0);
  for (const name of ['sign-in', ...PAGES.map(([page]) => page)]) {
    const png = readFileSync(join(out, `${name}.png`));
    expect(png.subarray(0, 8).toString('hex'), name).toBe('89504e470d0a1a0a');
    // IHDR: the width, 1280 as the viewport asks.
    expect(png.readUInt32BE(16), name).toBe(1280);
  }
}, 200_000);
