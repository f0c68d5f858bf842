/**
 * The image, built and run without a Docker engine (deploy/README.md, "Build and verify the image
 * without Docker"). `npm run image:build` and the container tests (test/container/) use this:
 *
 *   - With a Docker engine that answers, `docker build` builds the Dockerfile as is.
 *   - Otherwise buildah builds the same Dockerfile (`--pull=never`, chroot isolation, Docker format so
 *     the HEALTHCHECK is kept). Where no registry serves the Dockerfile's `NODE_IMAGE`, a stand-in is
 *     made once per machine and stored under that exact name in the container storage (outside the
 *     clone, so the next clone's build reuses it): Debian's minbase for the image's suite
 *     (debootstrap, from the machine's own apt sources), the Node.js binary of .node-version that runs
 *     this script, and the npm that release bundles (from the npm registry, checked against a pinned hash).
 *   - A build behind a TLS-inspecting proxy gets the machine's CA bundle as the build secret `build_ca`
 *     (Dockerfile): mounted for `npm ci` only, never in a layer.
 *   - Containers run with podman. Where the kernel refuses setrlimit (some sandboxes), every OCI
 *     runtime refuses to start a container; podman then runs through a wrapper that drops the rlimits
 *     from the container's config before it hands over to runc (`podman().globalArgs`).
 */
import { spawnSync, type SpawnSyncOptions } from 'node:child_process';
import { createHash } from 'node:crypto';
import {
  accessSync,
  chmodSync,
  constants,
  existsSync,
  mkdirSync,
  mkdtempSync,
  readFileSync,
  readdirSync,
  rmSync,
  symlinkSync,
  writeFileSync,
} from 'node:fs';
import { homedir } from 'node:os';
import { join } from 'node:path';
import { root } from './paths.js';

/** The tag `npm run image:build` gives the image, and the one docker-compose.yml runs (OUTREACH_IMAGE). */
export const IMAGE = process.env.OUTREACH_IMAGE || 'outreach:dev';

/**
 * The npm of the stand-in base: the one Node.js 24.22.3 bundles (its changelog), as in the official
 * image. Bump it with .node-version; the hash is `npm view npm@<version> dist.integrity`.
 */
const NPM_VERSION = '11.19.1';
const NPM_INTEGRITY = 'sha512-ztsxKxt/kkIaAs+2i0GU6I+DRmUdrNasxTZKJe9TCdSjKxlhah/4r/hl5ygMD6XAg1qZ9c2TNomR4qgOydp10g==';
/** Bumped when the recipe below changes: a stand-in made by an older recipe is made again. */
const BASE_RECIPE = 1;
const BASE_LABEL = 'org.outreach.local-base';

export class ContainerError extends Error {
  override readonly name = 'ContainerError';
}

function say(message: string): void {
  process.stderr.write(`[image] ${message}\n`);
}

/** The Dockerfile's `ARG NODE_IMAGE` default, as Docker names it (`node:24.22.3-bookworm-slim`). */
export function dockerfileBaseImage(): string {
  const match = /^ARG NODE_IMAGE=(\S+)$/m.exec(readFileSync(join(root, 'Dockerfile'), 'utf8'));
  if (!match?.[1]) throw new ContainerError('the Dockerfile has no `ARG NODE_IMAGE=` line');
  return match[1];
}

/**
 * Outside the clone, shared by every clone on the machine: the runtime wrapper and the base's scratch
 * space. OUTREACH_CACHE_DIR, else /var/cache/outreach when writable, else ~/.cache/outreach.
 */
export function cacheDir(): string {
  const chosen =
    process.env.OUTREACH_CACHE_DIR ||
    (writable('/var/cache')
      ? '/var/cache/outreach'
      : join(process.env.XDG_CACHE_HOME || join(homedir(), '.cache'), 'outreach'));
  mkdirSync(chosen, { recursive: true });
  return chosen;
}

function writable(dir: string): boolean {
  try {
    accessSync(dir, constants.W_OK);
    return true;
  } catch {
    return false;
  }
}

function run(command: string, args: readonly string[], options: SpawnSyncOptions = {}): string {
  const result = spawnSync(command, args, { encoding: 'utf8', maxBuffer: 64 * 2 ** 20, ...options });
  if (result.error) throw new ContainerError(`${command}: ${result.error.message}`);
  if (result.status !== 0) {
    const stderr = typeof result.stderr === 'string' ? result.stderr.trim().split('\n').slice(-15).join('\n') : '';
    throw new ContainerError(
      `${command} ${args.join(' ')} exited ${result.status ?? result.signal}${stderr ? `:\n${stderr}` : ''}`,
    );
  }
  return typeof result.stdout === 'string' ? result.stdout : '';
}

function has(command: string): boolean {
  return spawnSync('sh', ['-c', `command -v ${command}`], { stdio: 'ignore' }).status === 0;
}

/** A Docker engine that answers (a `docker` client alone is not one). */
export function dockerEngine(): boolean {
  if (process.env.IMAGE_BUILDER === 'buildah' || !has('docker')) return false;
  return spawnSync('docker', ['info'], { stdio: 'ignore', timeout: 15_000 }).status === 0;
}

/**
 * The CA bundle a build behind a TLS-inspecting proxy needs (BUILD_CA_FILE, else NODE_EXTRA_CA_CERTS,
 * else the machine's bundle), or none (BUILD_CA_FILE=none). It only ever reaches `npm ci`.
 */
export function buildCaFile(): string | undefined {
  const explicit = process.env.BUILD_CA_FILE;
  if (explicit === 'none') return undefined;
  if (explicit) {
    if (!existsSync(explicit)) throw new ContainerError(`BUILD_CA_FILE=${explicit}: no such file`);
    return explicit;
  }
  return [process.env.NODE_EXTRA_CA_CERTS, '/etc/ssl/certs/ca-certificates.crt'].find(
    (file): file is string => Boolean(file) && existsSync(file as string),
  );
}

function commit(): string {
  const result = spawnSync('git', ['rev-parse', 'HEAD'], { cwd: root, encoding: 'utf8' });
  return result.status === 0 ? result.stdout.trim() : 'unknown';
}

export interface BuildResult {
  readonly engine: 'docker' | 'buildah';
  readonly image: string;
  readonly base: 'present' | 'made';
  readonly seconds: number;
}

/** Builds the Dockerfile as is into IMAGE (Docker if an engine answers, else buildah); output streams to stderr. */
export function buildImage(): BuildResult {
  const started = Date.now();
  const ca = buildCaFile();
  const revision = commit();
  const common = [
    ...(ca ? ['--secret', `id=build_ca,src=${ca}`] : []),
    '--build-arg',
    `OUTREACH_COMMIT=${revision}`,
    '-t',
    IMAGE,
    '-f',
    join(root, 'Dockerfile'),
    root,
  ];
  const inherit: SpawnSyncOptions = { stdio: ['ignore', 2, 2], cwd: root };
  if (dockerEngine()) {
    say(`docker build -t ${IMAGE}${ca ? ' (with the build_ca secret)' : ''}`);
    run('docker', ['build', ...common], { ...inherit, env: { ...process.env, DOCKER_BUILDKIT: '1' } });
    return { engine: 'docker', image: IMAGE, base: 'present', seconds: (Date.now() - started) / 1000 };
  }
  if (!has('buildah') || !has('podman')) {
    throw new ContainerError(
      'no Docker engine answers and buildah or podman is missing: apt-get install podman buildah debootstrap runc (deploy/README.md)',
    );
  }
  const base = ensureBaseImage();
  say(`buildah bud -t ${IMAGE}${ca ? ' (with the build_ca secret)' : ''}`);
  const previous = imageId(IMAGE);
  buildahBuild(common);
  stampCommit(revision);
  // The image this build replaced: its layers (about 100 MB) would otherwise pile up with every
  // commit. Kept while a container uses it; the build cache's layers stay.
  if (previous && previous !== imageId(IMAGE)) spawnSync('podman', ['rmi', previous], { stdio: 'ignore' });
  return { engine: 'buildah', image: IMAGE, base, seconds: (Date.now() - started) / 1000 };
}

/**
 * buildah 1.28 keys its layer cache on an instruction's text, not on the build argument's value: a
 * cached `ENV OUTREACH_COMMIT=${OUTREACH_COMMIT}` keeps the commit of the build that first made it.
 * Docker's cache does not; this sets the value Docker would have (at the cost of one empty layer).
 */
function stampCommit(revision: string): void {
  const env = run('podman', ['image', 'inspect', IMAGE, '--format', '{{json .Config.Env}}']);
  if ((JSON.parse(env) as string[]).includes(`OUTREACH_COMMIT=${revision}`)) return;
  const working = run('buildah', ['from', '--pull=never', IMAGE]).trim();
  try {
    run('buildah', ['config', '--env', `OUTREACH_COMMIT=${revision}`, working]);
    run('buildah', ['commit', '--quiet', '--format', 'docker', working, IMAGE]);
  } finally {
    run('buildah', ['rm', working]);
  }
}

/**
 * `buildah bud` as this machine runs it: chroot isolation (no OCI runtime needed for RUN), never a
 * pull (the base is local), layer caching, and Docker's format so a HEALTHCHECK is kept.
 */
export function buildahBuild(args: readonly string[]): void {
  run(
    'buildah',
    [
      'bud',
      ...(process.env.BUILDAH_ISOLATION ? [] : ['--isolation', 'chroot']),
      '--pull=never',
      '--layers',
      '--format',
      'docker',
      ...args,
    ],
    { stdio: ['ignore', 2, 2], cwd: root },
  );
}

/** The recipe's identity, stored as a label on the stand-in base: a different one makes it again. */
function baseRecipe(image: string): string {
  return createHash('sha256')
    .update(JSON.stringify({ image, node: process.version, npm: NPM_VERSION, recipe: BASE_RECIPE }))
    .digest('hex')
    .slice(0, 16);
}

function imageId(image: string): string | undefined {
  const result = spawnSync('podman', ['image', 'inspect', image, '--format', '{{.Id}}'], { encoding: 'utf8' });
  return result.status === 0 ? result.stdout.trim() : undefined;
}

function imageLabels(image: string): Record<string, string> | undefined {
  const result = spawnSync('podman', ['image', 'inspect', image, '--format', '{{json .Labels}}'], { encoding: 'utf8' });
  if (result.status !== 0) return undefined;
  return (JSON.parse(result.stdout.trim() || 'null') as Record<string, string> | null) ?? {};
}

/**
 * The Dockerfile's base in the container storage: kept if present (pulled from a registry, or made
 * here by this recipe), made otherwise.
 */
export function ensureBaseImage(): 'present' | 'made' {
  const image = dockerfileBaseImage();
  const labels = imageLabels(image);
  const recipe = baseRecipe(image);
  if (labels && (labels[BASE_LABEL] === undefined || labels[BASE_LABEL] === recipe)) return 'present';
  makeBaseImage(image, recipe);
  return 'made';
}

/** `node:<version>-<suite>-slim`: the Node.js version and the Debian suite it is built on. */
function parseNodeImage(image: string): { version: string; suite: string } {
  const match = /^(?:.*\/)?node:(\d+\.\d+\.\d+)-([a-z]+)-slim$/.exec(image);
  if (!match?.[1] || !match[2])
    throw new ContainerError(`cannot make a stand-in for ${image}: not node:<version>-<suite>-slim`);
  return { version: match[1], suite: match[2] };
}

/** The machine's Debian mirror for `suite` (DEBIAN_MIRROR, else its apt sources): never a name written here. */
export function debianMirror(suite: string): string {
  if (process.env.DEBIAN_MIRROR) return process.env.DEBIAN_MIRROR;
  const files = [
    '/etc/apt/sources.list',
    ...(existsSync('/etc/apt/sources.list.d')
      ? readdirSync('/etc/apt/sources.list.d')
          .filter((f) => /\.(list|sources)$/.test(f))
          .map((f) => join('/etc/apt/sources.list.d', f))
      : []),
  ].filter((f) => existsSync(f));
  for (const file of files) {
    const text = readFileSync(file, 'utf8');
    if (file.endsWith('.sources')) {
      for (const stanza of text.split(/\n\s*\n/)) {
        const field = (name: string) =>
          new RegExp(`^${name}:\\s*(.+)$`, 'mi').exec(stanza.replace(/^#.*$/gm, ''))?.[1]?.trim().split(/\s+/) ?? [];
        if (field('Types').includes('deb') && field('Suites').includes(suite) && field('Components').includes('main')) {
          const uri = field('URIs')[0];
          if (uri) return uri;
        }
      }
    } else {
      for (const line of text.split('\n')) {
        const match = /^deb\s+(?:\[[^\]]*\]\s+)?(\S+)\s+(\S+)\s+(.*)$/.exec(line.trim());
        if (match?.[1] && match[2] === suite && match[3]?.split(/\s+/).includes('main')) return match[1];
      }
    }
  }
  throw new ContainerError(
    `no apt source for Debian ${suite} main on this machine: set DEBIAN_MIRROR to a Debian mirror's URL`,
  );
}

function makeBaseImage(image: string, recipe: string): void {
  const { version, suite } = parseNodeImage(image);
  if (process.version !== `v${version}`) {
    throw new ContainerError(
      `the stand-in for ${image} takes the Node.js that runs this script, which is ${process.version}: run it on ${version} (source scripts/use-node.sh)`,
    );
  }
  if (process.getuid?.() !== 0) throw new ContainerError(`making the stand-in for ${image} needs root (debootstrap)`);
  for (const tool of ['debootstrap', 'tar', 'npm']) {
    if (!has(tool))
      throw new ContainerError(`making the stand-in for ${image} needs ${tool} (apt-get install debootstrap)`);
  }
  const mirror = debianMirror(suite);
  const scratch = mkdtempSync(join(cacheDir(), 'base-'));
  const rootfs = join(scratch, 'rootfs');
  const started = Date.now();
  try {
    say(`no ${image} here: making a stand-in once (Debian ${suite} minbase, Node.js ${version}, npm ${NPM_VERSION})`);
    run('debootstrap', ['--variant=minbase', suite, rootfs, mirror], { stdio: ['ignore', 'ignore', 2] });
    // What the slim images leave out: package caches and lists, documentation, locales.
    for (const dir of [
      'var/cache/apt/archives',
      'var/lib/apt/lists',
      'usr/share/doc',
      'usr/share/man',
      'usr/share/info',
    ]) {
      const full = join(rootfs, dir);
      for (const entry of existsSync(full) ? readdirSync(full) : []) {
        if (entry !== 'partial' && entry !== 'lock') rmSync(join(full, entry), { recursive: true, force: true });
      }
    }
    for (const entry of readdirSync(join(rootfs, 'usr/share/locale'))) {
      if (entry !== 'locale.alias') rmSync(join(rootfs, 'usr/share/locale', entry), { recursive: true, force: true });
    }
    for (const entry of readdirSync(join(rootfs, 'var/cache/apt'))) {
      if (entry.endsWith('.bin')) rmSync(join(rootfs, 'var/cache/apt', entry));
    }
    run('cp', [process.execPath, join(rootfs, 'usr/local/bin/node')]);
    const tarball = run('npm', ['pack', '--silent', '--ignore-scripts', `npm@${NPM_VERSION}`], { cwd: scratch }).trim();
    const integrity = `sha512-${createHash('sha512')
      .update(readFileSync(join(scratch, tarball)))
      .digest('base64')}`;
    if (integrity !== NPM_INTEGRITY)
      throw new ContainerError(`npm@${NPM_VERSION}: integrity ${integrity}, pinned ${NPM_INTEGRITY}`);
    const npmDir = join(rootfs, 'usr/local/lib/node_modules/npm');
    mkdirSync(npmDir, { recursive: true });
    run('tar', ['-xzf', join(scratch, tarball), '-C', npmDir, '--strip-components=1']);
    symlinkSync('../lib/node_modules/npm/bin/npm-cli.js', join(rootfs, 'usr/local/bin/npm'));
    symlinkSync('../lib/node_modules/npm/bin/npx-cli.js', join(rootfs, 'usr/local/bin/npx'));
    const changes = [
      `ENV NODE_VERSION=${version}`,
      'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin',
      'CMD ["node"]',
      `LABEL ${BASE_LABEL}=${recipe}`,
    ].flatMap((change) => ['--change', change]);
    // Under the name as the Dockerfile writes it: podman keeps it as localhost/<name>, where a build
    // that never pulls looks a short name up first. It replaces an older stand-in of that name.
    run('bash', ['-c', 'set -o pipefail; tar -C "$0" -c . | podman import "$@"', rootfs, ...changes, '-', image], {
      stdio: ['ignore', 'ignore', 2],
    });
    say(
      `made ${image} in ${Math.round((Date.now() - started) / 1000)} s (kept in the container storage for every clone)`,
    );
  } finally {
    rmSync(scratch, { recursive: true, force: true });
  }
}

/**
 * podman with what this machine needs: `globalArgs` go before the subcommand (`--runtime <wrapper>`
 * where the kernel refuses setrlimit, else nothing). Probed once per process.
 */
export class Podman {
  private constructor(readonly globalArgs: readonly string[]) {}

  private static instance: Podman | undefined;

  static get(probeImage: string = IMAGE): Podman {
    Podman.instance ??= new Podman(needsRlimitWrapper(probeImage) ? ['--runtime', rlimitWrapper()] : []);
    return Podman.instance;
  }

  /** Runs podman and returns its stdout; throws with its stderr on a non-zero exit. */
  run(args: readonly string[], options: SpawnSyncOptions = {}): string {
    return run('podman', [...this.globalArgs, ...args], options);
  }

  /** Runs podman and returns what happened, whatever its exit code. */
  try(
    args: readonly string[],
    options: SpawnSyncOptions = {},
  ): { status: number | null; stdout: string; stderr: string } {
    const result = spawnSync('podman', [...this.globalArgs, ...args], {
      encoding: 'utf8',
      maxBuffer: 64 * 2 ** 20,
      ...options,
    });
    return { status: result.status, stdout: String(result.stdout ?? ''), stderr: String(result.stderr ?? '') };
  }

  /**
   * A script that runs podman with these arguments, for tools that take a podman path
   * (podman-compose's --podman-path).
   */
  shim(): string {
    const text = `#!/bin/sh\nexec podman ${this.globalArgs.map((a) => `'${a}'`).join(' ')} "$@"\n`;
    return cached('podman-shim', text);
  }
}

/** The convenience accessor: `podman().run([...])`. */
export function podman(): Podman {
  return Podman.get();
}

function needsRlimitWrapper(image: string): boolean {
  const probe = spawnSync(
    'podman',
    ['run', '--rm', '--network', 'none', '--no-healthcheck', '--entrypoint', '/bin/true', image],
    { encoding: 'utf8' },
  );
  if (probe.status === 0) return false;
  if (/setrlimit|rlimit/i.test(probe.stderr)) return true;
  throw new ContainerError(`podman cannot start a container from ${image}:\n${probe.stderr.trim()}`);
}

/** A file in the cache named by a hash of its content (written once, executable). */
function cached(name: string, text: string): string {
  const file = join(cacheDir(), `${name}-${createHash('sha256').update(text).digest('hex').slice(0, 12)}`);
  if (!existsSync(file)) {
    writeFileSync(`${file}.tmp`, text, { mode: 0o755 });
    run('mv', [`${file}.tmp`, file]);
  }
  chmodSync(file, 0o755);
  return file;
}

/**
 * An OCI runtime that is runc without rlimits: it deletes `process.rlimits` from the bundle's
 * config.json (create, run) or from the process file (exec) and hands over to runc. Only for
 * machines whose kernel refuses setrlimit; the containers then inherit podman's own limits.
 */
function rlimitWrapper(): string {
  const runc = run('sh', ['-c', 'command -v runc']).trim();
  if (!runc)
    throw new ContainerError('this machine refuses setrlimit, and the wrapper needs runc: apt-get install runc');
  const strip =
    'const fs=require("fs");const f=process.argv[1];const c=JSON.parse(fs.readFileSync(f,"utf8"));' +
    'delete c.rlimits;if(c.process)delete c.process.rlimits;fs.writeFileSync(f,JSON.stringify(c))';
  const text = [
    '#!/bin/sh',
    '# runc without rlimits (scripts/lib/container.ts): the kernel here refuses setrlimit.',
    'prev=""; file=""',
    'for arg in "$@"; do',
    '  case "$prev" in --bundle|-b) file="$arg/config.json" ;; --process|-p) file="$arg" ;; esac',
    '  case "$arg" in --bundle=*) file="${arg#--bundle=}/config.json" ;; --process=*) file="${arg#--process=}" ;; esac',
    '  prev="$arg"',
    'done',
    `if [ -n "$file" ] && [ -f "$file" ]; then '${process.execPath}' -e '${strip}' "$file" || exit 1; fi`,
    `exec '${runc}' "$@"`,
    '',
  ].join('\n');
  return cached('runc-without-rlimits', text);
}
