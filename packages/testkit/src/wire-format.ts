/**
 * The wire format of the services a test or a run starts as processes (ADR 011). Public topics are
 * written in the Confluent format by default, which needs the registry to hold every public subject
 * under the run's own topic prefix before a service starts (a service looks its ids up at start and
 * refuses to start without them, as in production). In the single-object format nothing is needed.
 */
import { registerSchemas } from '@outreach/shared';
import { publisherSubjects, registrySubjects } from '@outreach/shared';
import { SchemaRegistryClient } from '@outreach/shared';

export type ProcessWireFormat = 'confluent' | 'single-object';

/**
 * Registers the public subjects under `prefix` when `format` is `confluent` (as `npm run
 * schemas:register` does at a deploy), and returns the environment a service needs for that format.
 */
export async function wireFormatEnv(
  prefix: string,
  format: ProcessWireFormat,
  registryUrl: string | undefined,
): Promise<Record<string, string>> {
  if (format === 'single-object') return { EVENT_WIRE_FORMAT: 'single-object', SCHEMA_REGISTRY_URL: '' };
  if (!registryUrl)
    throw new Error('the Confluent wire format needs a schema registry (npm run infra:up, or SCHEMA_REGISTRY_URL)');
  await registerSchemas(new SchemaRegistryClient({ url: registryUrl }), { prefix });
  return { EVENT_WIRE_FORMAT: 'confluent', SCHEMA_REGISTRY_URL: registryUrl };
}

/**
 * The format a test worker runs in, as test/wire-format.ts exported it: the Confluent format when a
 * registry runs, unless EVENT_WIRE_FORMAT=single-object asks otherwise.
 */
export function wireFormatFromEnv(env: NodeJS.ProcessEnv = process.env): {
  format: ProcessWireFormat;
  registryUrl: string | undefined;
} {
  const registryUrl = env.SCHEMA_REGISTRY_URL || undefined;
  const requested = env.EVENT_WIRE_FORMAT;
  const format =
    requested === 'single-object' || (requested !== 'confluent' && !registryUrl) ? 'single-object' : 'confluent';
  return { format, registryUrl };
}

/**
 * Deletes the subjects `wireFormatEnv` registered under `prefix`, so a registry shared by many test
 * runs does not grow with each (its ids stay: a registry id names content, which other runs share).
 */
export async function dropWireFormatSubjects(prefix: string, registryUrl: string | undefined): Promise<void> {
  if (!registryUrl) return;
  const client = new SchemaRegistryClient({ url: registryUrl });
  for (const { subject } of [...registrySubjects(prefix), ...publisherSubjects(prefix)])
    await client.deleteSubject(subject);
}
