/**
 * Finds the infrastructure the int and e2e projects need, or starts it:
 *   1. KAFKA_BROKERS and DATABASE_URL from the environment, when both are set;
 *   2. otherwise, with TEST_INFRA=testcontainers (or Docker present and no Java), containers;
 *   3. otherwise the local, Docker-free stack of scripts/infra.ts (reused when already running).
 * The stack is left running for the next run; `npm run infra:down` stops it (.ci/run does).
 */
import { spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import type { TestProject } from 'vitest/node';
import { registerSchemas, SchemaRegistryClient } from '@outreach/shared';
import { runningRegistryUrl, runningSecured, securedWanted, up, type SecuredInfra } from '../scripts/infra.js';
import { javaToolsPresent, prefetchJavaInterop } from '../scripts/lib/java-interop.js';

declare module 'vitest' {
  export interface ProvidedContext {
    kafkaBrokers: string;
    databaseUrl: string;
    /**
     * The secured broker and TLS PostgreSQL (ADR 010): started with the local stack; with
     * KAFKA_BROKERS/DATABASE_URL from the environment, the ones `npm run infra:up` left running, if
     * any; null otherwise (testcontainers, INFRA_SECURED=off), and the secured specs skip.
     */
    securedInfra: SecuredInfra | null;
    /**
     * The schema registry's Confluent-compatible base URL (ADR 011): started with the local stack;
     * with KAFKA_BROKERS/DATABASE_URL from the environment, SCHEMA_REGISTRY_URL or the one
     * `npm run infra:up` left running; null otherwise, and the registry specs skip.
     */
    schemaRegistryUrl: string | null;
    /**
     * How the services under test write public topics (ADR 011): `confluent`, the services' default,
     * whenever a registry runs; `single-object` without one (testcontainers) or when
     * EVENT_WIRE_FORMAT=single-object is set (test/vitest.single-object.config.ts).
     */
    eventWireFormat: 'confluent' | 'single-object';
  }
}

function chooseMode(): 'local' | 'testcontainers' {
  const requested = process.env.TEST_INFRA;
  if (requested === 'local' || requested === 'testcontainers') return requested;
  const hasJava = !spawnSync('java', ['-version']).error;
  const hasDocker = existsSync('/var/run/docker.sock') || Boolean(process.env.DOCKER_HOST);
  return !hasJava && hasDocker ? 'testcontainers' : 'local';
}

/**
 * Chooses the wire format of the run and provides it with the registry's URL. In the Confluent format
 * (the default whenever a registry runs) it registers every public subject once (prefix ''), as
 * `npm run schemas:register` does before a deploy; test/wire-format.ts then binds it in each test
 * file, and serviceTestEnv and the Stack register their own prefixes for the processes they start.
 */
async function provideRegistry(project: TestProject, url: string | null): Promise<void> {
  const requested = process.env.EVENT_WIRE_FORMAT;
  if (requested === 'confluent' && !url)
    throw new Error('EVENT_WIRE_FORMAT=confluent tests need a schema registry (npm run infra:up)');
  const format = requested === 'single-object' || !url ? 'single-object' : 'confluent';
  project.provide('schemaRegistryUrl', url);
  project.provide('eventWireFormat', format);
  if (format === 'confluent' && url) await registerSchemas(new SchemaRegistryClient({ url }));
}

/**
 * The Kafka Connect and Java publisher specs (test/int/kafka-connect, test/int/java-publisher) need
 * jars from Maven Central: fetched here, once (about a minute the first time, nothing after), so no
 * spec spends its time limit downloading. A failed fetch is reported; those specs then fail naming it.
 */
async function prefetchForJavaSpecs(project: TestProject, registryUrl: string | null): Promise<void> {
  if (project.name !== 'int' || !registryUrl || !javaToolsPresent()) return;
  try {
    await prefetchJavaInterop();
  } catch (error) {
    process.stderr.write(`[setup] fetching the Java interop jars failed: ${(error as Error).message}\n`);
  }
}

export default async function setup(project: TestProject): Promise<(() => Promise<void>) | undefined> {
  const fromEnv = { brokers: process.env.KAFKA_BROKERS, url: process.env.DATABASE_URL };
  if (fromEnv.brokers && fromEnv.url) {
    project.provide('kafkaBrokers', fromEnv.brokers);
    project.provide('databaseUrl', fromEnv.url);
    project.provide('securedInfra', runningSecured() ?? null);
    const registryUrl = (await runningRegistryUrl()) ?? null;
    await provideRegistry(project, registryUrl);
    await prefetchForJavaSpecs(project, registryUrl);
    return undefined;
  }
  if (chooseMode() === 'testcontainers') {
    // Loaded only on this path: testcontainers pulls in a Docker client nobody else needs.
    const { startContainers } = await import('./testcontainers.js');
    const containers = await startContainers();
    project.provide('kafkaBrokers', containers.kafkaBrokers);
    project.provide('databaseUrl', containers.databaseUrl);
    project.provide('securedInfra', null);
    await provideRegistry(project, null);
    return containers.stop;
  }
  const state = await up({ secured: securedWanted });
  project.provide('kafkaBrokers', state.kafkaBrokers);
  project.provide('databaseUrl', state.databaseUrl);
  project.provide('securedInfra', state.secured ?? null);
  await provideRegistry(project, state.schemaRegistryUrl ?? null);
  await prefetchForJavaSpecs(project, state.schemaRegistryUrl ?? null);
  return undefined;
}
