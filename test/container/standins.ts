/**
 * Builds the compose test's stand-ins (test/container/standins/Containerfile) for the public images
 * docker-compose.yml names, from the artifacts the project already uses: the Kafka jars and the
 * Apicurio distribution `npm run infra:up` fetched with Maven, the JDK the local registry runs on,
 * Debian's PostgreSQL, and the project's SMTP sink. The build context is assembled in the machine's
 * cache (hard links where the file system allows), and buildah's layer cache makes a rebuild with
 * nothing changed take seconds.
 */
import { spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, readdirSync, realpathSync, rmSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { ensureMavenLibs, infraDir } from '../../scripts/infra.js';
import { buildahBuild, cacheDir, dockerfileBaseImage } from '../../scripts/lib/container.js';
import { root } from '../../scripts/lib/paths.js';
import { registryJava } from '../../scripts/lib/registry.js';

export const STANDINS = ['kafka', 'postgres', 'apicurio', 'mailpit'] as const;
export type Standin = (typeof STANDINS)[number];

/** The name test/container/compose.standins.yml gives each stand-in. */
export function standinImage(name: Standin): string {
  return `localhost/outreach-standin-${name}:test`;
}

/** A copy of `from` at `to`: hard links when both are on one file system, else a real copy. */
function link(from: string, to: string): void {
  mkdirSync(dirname(to), { recursive: true });
  if (spawnSync('cp', ['-al', from, to], { stdio: 'ignore' }).status === 0) return;
  rmSync(to, { recursive: true, force: true });
  if (spawnSync('cp', ['-a', from, to], { stdio: 'inherit' }).status !== 0) throw new Error(`could not copy ${from}`);
}

export function buildStandins(): void {
  const sources = join(root, 'test', 'container', 'standins');
  const kafkaLibs = ensureMavenLibs(join(root, 'infra', 'kafka', 'pom.xml'), join(infraDir, 'kafka', 'libs'));
  const apicurio = join(infraDir, 'registry', 'app');
  if (!existsSync(join(apicurio, 'quarkus-run.jar'))) {
    throw new Error(`no Apicurio distribution in ${apicurio}: run \`npm run infra:up\` once (it fetches it)`);
  }
  const javaHome = dirname(dirname(realpathSync(registryJava())));
  const context = join(cacheDir(), 'standins-context');
  rmSync(context, { recursive: true, force: true });
  mkdirSync(context, { recursive: true });
  for (const file of readdirSync(sources)) link(join(sources, file), join(context, file));
  link(javaHome, join(context, 'jdk'));
  link(kafkaLibs, join(context, 'kafka', 'libs'));
  link(apicurio, join(context, 'apicurio'));
  for (const name of STANDINS) {
    buildahBuild([
      '--build-arg',
      `NODE_IMAGE=${dockerfileBaseImage()}`,
      '--target',
      name,
      '-t',
      standinImage(name),
      '-f',
      join(context, 'Containerfile'),
      context,
    ]);
  }
}
