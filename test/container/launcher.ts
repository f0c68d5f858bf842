/**
 * Runs a Stack's instances from the image, each as a container the way the Kubernetes Deployments run
 * them: the image's own user (10001), a read-only root filesystem with only a 16 MiB /tmp (their
 * emptyDir), every capability dropped, no privilege escalation. Host networking reaches the local
 * Kafka, PostgreSQL, registry and SMTP sink on 127.0.0.1. Ready means the image's own HEALTHCHECK
 * passes (`podman healthcheck run`); a stop is a signal to the container (`podman kill -s`).
 */
import { spawn, spawnSync } from 'node:child_process';
import { startCommand, waitFor, type RunningProcess } from '@outreach/testkit';
import type { Podman } from '../../scripts/lib/container.js';
import type { Launcher, Service, StartOptions } from '../../scripts/lib/stack.js';

/** What every container of the tests runs with: the Deployments' security context and /tmp. */
export const HARDENED = [
  '--read-only',
  // podman would otherwise mount writable tmpfs on /run and /var/tmp too: only /tmp, as in Kubernetes.
  '--read-only-tmpfs=false',
  '--tmpfs',
  '/tmp:rw,size=16m,mode=1777',
  '--cap-drop',
  'ALL',
  '--security-opt',
  'no-new-privileges',
];

export class ContainerLauncher implements Launcher {
  private readonly names = new Set<string>();

  constructor(
    private readonly podman: Podman,
    private readonly image: string,
    /** Names the containers (`<run>-<key>`) and labels them, so a run removes only its own. */
    readonly run: string,
  ) {}

  name(key: string): string {
    return `${this.run}-${key.replace('#', '-')}`;
  }

  start(service: Service, key: string, env: NodeJS.ProcessEnv, _options: StartOptions): RunningProcess {
    const name = this.name(key);
    this.names.add(name);
    // The values travel in podman's environment, never on its command line (`-e NAME` copies one).
    const vars = Object.entries(env).filter(
      (entry): entry is [string, string] => entry[1] !== undefined && entry[0] !== 'PATH',
    );
    const proc = startCommand(
      'podman',
      [
        ...this.podman.globalArgs,
        'run',
        '--rm',
        '--name',
        name,
        '--label',
        `outreach-test=${this.run}`,
        '--network',
        'host',
        ...HARDENED,
        ...vars.flatMap(([variable]) => ['-e', variable]),
        this.image,
        service,
      ],
      { PATH: process.env.PATH, ...Object.fromEntries(vars) },
    );
    return {
      ...proc,
      stop: async (signal: NodeJS.Signals = 'SIGTERM', timeoutMs = 30_000) => {
        if (proc.child.exitCode === null && proc.child.signalCode === null) {
          await this.exec(['kill', '--signal', signal, name]);
        }
        let code: number | string | undefined;
        void proc.exited.then((c) => (code = c));
        return waitFor(() => code, { timeoutMs, description: `container ${name} to exit after ${signal}` });
      },
    };
  }

  /** The image's HEALTHCHECK, run once: exit 0 is healthy. */
  async ready(key: string): Promise<boolean> {
    return (await this.exec(['healthcheck', 'run', this.name(key)])).status === 0;
  }

  killAll(): void {
    if (this.names.size > 0) {
      spawnSync('podman', [...this.podman.globalArgs, 'rm', '--force', '--time', '0', ...this.names], {
        stdio: 'ignore',
      });
    }
  }

  /** podman, without blocking the event loop (the tests' SMTP sink and clients live in it). */
  exec(args: readonly string[]): Promise<{ status: number | null; stdout: string; stderr: string }> {
    return new Promise((resolve) => {
      const child = spawn('podman', [...this.podman.globalArgs, ...args], { stdio: ['ignore', 'pipe', 'pipe'] });
      let stdout = '';
      let stderr = '';
      child.stdout.setEncoding('utf8').on('data', (chunk: string) => (stdout += chunk));
      child.stderr.setEncoding('utf8').on('data', (chunk: string) => (stderr += chunk));
      child.once('error', (error) => resolve({ status: null, stdout, stderr: `${stderr}${error.message}` }));
      child.once('close', (status) => resolve({ status, stdout, stderr }));
    });
  }
}
