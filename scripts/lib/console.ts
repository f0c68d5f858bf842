/**
 * The operations console (services/console, ADR 015) next to a Stack's services, for the demo and the
 * screenshots: its built `dist/server.js` as a process, its own schema under the run, the run's token
 * as its read and operate tokens, and one local operator with a password drawn for the run (printed by
 * the caller, never written anywhere but the users file in `dir`).
 */
import { spawnSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { startProcess, waitFor, type RunningProcess } from '@outreach/testkit';
import type { Stack } from './stack.js';

const root = join(import.meta.dirname, '..', '..');

export interface RunningConsole {
  readonly url: string;
  readonly user: string;
  readonly password: string;
  readonly schema: string;
  readonly process: RunningProcess;
  stop(): Promise<void>;
}

export interface ConsoleOptions {
  readonly stack: Stack;
  readonly databaseUrl: string;
  readonly kafkaBrokers: string;
  readonly port: number;
  /** The bearer token the Stack's services accept in every scope. */
  readonly token: string;
  /** Where the users file and the session key go (created, mode 0600). */
  readonly dir: string;
  readonly user?: string;
  readonly env?: Record<string, string>;
}

export async function startConsole(options: ConsoleOptions): Promise<RunningConsole> {
  const { stack } = options;
  const user = options.user ?? 'demo';
  const password = randomBytes(12).toString('base64url');
  mkdirSync(options.dir, { recursive: true, mode: 0o700 });
  const file = (name: string, text: string) => {
    writeFileSync(join(options.dir, name), text, { mode: 0o600 });
    return join(options.dir, name);
  };
  // The users-file line from the console's own command (the password on its standard input).
  const hashed = spawnSync(
    process.execPath,
    [join(root, 'services', 'console', 'dist', 'cli', 'hash-password.js'), user, 'operator'],
    { input: `${password}\n`, encoding: 'utf8' },
  );
  if (hashed.status !== 0) throw new Error(`console-hash-password failed: ${hashed.stderr}`);
  const line = hashed.stdout;
  const schema = `${stack.run}_console`;
  const url = `http://127.0.0.1:${options.port}`;
  const proc = startProcess(join(root, 'services', 'console', 'dist', 'server.js'), {
    PATH: process.env.PATH,
    DATABASE_URL: options.databaseUrl,
    DATABASE_SCHEMA: schema,
    HTTP_HOST: '127.0.0.1',
    HTTP_PORT: String(options.port),
    LOG_LEVEL: process.env.LOG_LEVEL ?? 'warn',
    NODE_ENV: 'development',
    PLANNER_URL: stack.url('planner', ''),
    SENDER_URL: stack.url('sender', ''),
    EXPERIMENT_URL: stack.url('experiment', ''),
    LIVENESS_URL: stack.url('liveness', ''),
    CONSOLE_READ_TOKEN_FILE: file('read-token', options.token),
    CONSOLE_OPERATE_TOKEN_FILE: file('operate-token', options.token),
    CONSOLE_SESSION_KEY_FILE: file('session-key', randomBytes(32).toString('hex')),
    CONSOLE_USERS_FILE: file('users', line),
    // Plain HTTP on 127.0.0.1: a Secure cookie would never come back.
    CONSOLE_COOKIE_SECURE: 'false',
    // The dead-letter pages: the run's DLQs, its registry for Confluent-framed records.
    KAFKA_BROKERS: options.kafkaBrokers,
    TOPIC_PREFIX: stack.prefix,
    ...(stack.registryUrl ? { SCHEMA_REGISTRY_URL: stack.registryUrl } : {}),
    ...options.env,
  });
  await waitFor(
    async () => {
      if (proc.child.exitCode !== null) throw new Error(`the console exited: ${proc.stderrLines.join('\n')}`);
      return (await fetch(`${url}/health/ready`).catch(() => undefined))?.ok ?? false;
    },
    { timeoutMs: 60_000, description: 'the console to report ready' },
  );
  return {
    url,
    user,
    password,
    schema,
    process: proc,
    stop: async () => {
      await proc.stop('SIGTERM');
    },
  };
}

/**
 * Signs in as a browser would (the form's CSRF token, the session cookie) and returns the cookie of
 * the signed-in session; throws when the console refuses.
 */
export async function consoleSignIn(url: string, user: string, password: string): Promise<string> {
  const form = await fetch(`${url}/login`, { redirect: 'manual' });
  const cookie = (form.headers.get('set-cookie') ?? '').split(';')[0] ?? '';
  const csrf = /name="_csrf" value="([^"]+)"/.exec(await form.text())?.[1] ?? '';
  const answer = await fetch(`${url}/login`, {
    method: 'POST',
    redirect: 'manual',
    headers: { cookie, 'content-type': 'application/x-www-form-urlencoded', 'sec-fetch-site': 'same-origin' },
    body: new URLSearchParams({ _csrf: csrf, username: user, password, next: '/' }).toString(),
  });
  const session = (answer.headers.get('set-cookie') ?? '').split(';')[0] ?? '';
  if (answer.status !== 303 || session === '') throw new Error(`the console refused the sign-in (${answer.status})`);
  return session;
}
