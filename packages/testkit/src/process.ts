import { spawn, type ChildProcess } from 'node:child_process';
import { createServer } from 'node:net';
import { waitFor } from '@outreach/shared';

/** A port the OS considers free right now. */
/**
 * A port free now, for a process a test starts and that binds it a little later. Taken below Linux's
 * ephemeral range (32768 and up): a port the OS handed out with `listen(0)` is one it also hands to
 * outgoing connections, and one of those (a client of Kafka or PostgreSQL) took a broker's port
 * between the pick and the bind. Never the same port twice in one process.
 */
export async function freePort(): Promise<number> {
  for (let attempt = 0; attempt < 200; attempt++) {
    const port = FREE_PORT_LOW + Math.floor(Math.random() * (FREE_PORT_HIGH - FREE_PORT_LOW));
    if (handedOut.has(port)) continue;
    if (await canBind(port)) {
      handedOut.add(port);
      return port;
    }
  }
  throw new Error(`no free port between ${FREE_PORT_LOW} and ${FREE_PORT_HIGH} after 200 tries`);
}

const FREE_PORT_LOW = 20_000;
const FREE_PORT_HIGH = 32_000;
const handedOut = new Set<number>();

function canBind(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const server = createServer();
    server.once('error', () => resolve(false));
    server.listen(port, '127.0.0.1', () => server.close(() => resolve(true)));
  });
}

export interface RunningProcess {
  readonly child: ChildProcess;
  readonly stdoutLines: string[];
  readonly stderrLines: string[];
  /** Resolves with the exit code (or the signal's name) once the process has exited. */
  readonly exited: Promise<number | string>;
  stop(signal?: NodeJS.Signals, timeoutMs?: number): Promise<number | string>;
}

/** Every child startProcess started that has not exited yet. */
const live = new Set<ChildProcess>();
let exitHookInstalled = false;

/**
 * Kills (SIGKILL) every child startProcess started that is still running. Runs by itself when this
 * process exits; a runner that handles SIGTERM or SIGINT calls process.exit so that it does.
 */
export function killStartedProcesses(): void {
  for (const child of live) child.kill('SIGKILL');
}

/** Starts a Node entry file as its own process and collects its output line by line. */
export function startProcess(
  entry: string,
  env: NodeJS.ProcessEnv,
  args: readonly string[] = [],
  nodeArgs: readonly string[] = [],
): RunningProcess {
  return startCommand(process.execPath, [...nodeArgs, entry, ...args], env);
}

/** Starts any program as its own process (`podman run ...`) and collects its output line by line. */
export function startCommand(command: string, args: readonly string[], env: NodeJS.ProcessEnv): RunningProcess {
  const child = spawn(command, args, { env, stdio: ['ignore', 'pipe', 'pipe'] });
  live.add(child);
  child.once('exit', () => live.delete(child));
  if (!exitHookInstalled) {
    exitHookInstalled = true;
    process.on('exit', killStartedProcesses);
  }
  const stdoutLines: string[] = [];
  const stderrLines: string[] = [];
  const collect = (stream: NodeJS.ReadableStream | null, into: string[]) => {
    let buffer = '';
    stream?.setEncoding('utf8');
    stream?.on('data', (chunk: string) => {
      buffer += chunk;
      const lines = buffer.split('\n');
      buffer = lines.pop() ?? '';
      into.push(...lines);
    });
    stream?.on('end', () => buffer && into.push(buffer));
  };
  collect(child.stdout, stdoutLines);
  collect(child.stderr, stderrLines);
  const exited = new Promise<number | string>((resolve) =>
    child.once('exit', (code, signal) => resolve(code ?? signal ?? 'unknown')),
  );
  return {
    child,
    stdoutLines,
    stderrLines,
    exited,
    async stop(signal: NodeJS.Signals = 'SIGTERM', timeoutMs = 30_000) {
      if (child.exitCode === null && child.signalCode === null) child.kill(signal);
      let code: number | string | undefined;
      void exited.then((c) => (code = c));
      return waitFor(() => code, { timeoutMs, description: `process ${child.pid} to exit after ${signal}` });
    },
  };
}
