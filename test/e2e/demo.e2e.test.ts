/**
 * The README's main-job command, at a small scale: the whole stack as processes, the workload
 * through the public ingress, a sender SIGKILL midway, and a report whose guarantees must hold.
 * The sends in doubt (those the SIGKILL caught mid-call, and the one whose connection the sink drops
 * after the final dot once the sender is back) are settled by the delivery lookup against the sink's
 * Mailpit API, none left for an operator, none delivered twice.
 */
import { spawn } from 'node:child_process';
import { join } from 'node:path';
import { waitFor } from '@outreach/testkit';
import { expect, inject, it } from 'vitest';

const root = join(import.meta.dirname, '..', '..');

it('npm run demo delivers the workload with 0 duplicates, 0 contaminated, exactly the planted stalls flagged, and every send in doubt settled without an operator', async () => {
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
  // The operations console started with the stack, and the demo signed in with the login it printed.
  expect(output).toMatch(/console {4}ready {2}http:\/\/127\.0\.0\.1:18089\/ \(sign in as demo, password [\w-]{16}\)/);

  // Sends in doubt: the sink really dropped a connection after the final dot (a send in doubt
  // whatever the SIGKILL caught), the lookup or evidence settled at least that one, and none is
  // left for an operator. Each number is the report's, read from the sender and the sink.
  expect(output).toMatch(/\| connections the SMTP sink dropped after the final dot \| [1-9]\d* \|/);
  const evidence = reported(output, /\| sends in doubt settled by delivery evidence \| (\d+) \|/);
  const lookup =
    /\| sends in doubt settled by the delivery lookup \| (\d+) \(found: (\d+) recorded sent; not found: (\d+) sent again\) \|/.exec(
      output,
    );
  expect(lookup, output).not.toBeNull();
  const [settledByLookup, found, notFound] = (lookup ?? []).slice(1).map(Number);
  expect(settledByLookup).toBe((found ?? 0) + (notFound ?? 0));
  expect((settledByLookup ?? 0) + evidence).toBeGreaterThanOrEqual(1);
  expect(reported(output, /\| sends in doubt left for an operator \| (\d+) \|/)).toBe(0);
}, 300_000);

/** The number a report line shows; fails the test, with the output, when the line is missing. */
function reported(output: string, line: RegExp): number {
  const match = line.exec(output);
  expect(match, output).not.toBeNull();
  return Number(match?.[1]);
}
