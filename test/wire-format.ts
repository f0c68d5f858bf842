/**
 * Setup file of the int and e2e projects (ADR 011): puts each test file in the wire format the global
 * setup chose, as a service is at start. In the Confluent format (the default whenever a registry
 * runs) it binds the shared codec to the registry, so every public topic's events travel as magic 0 +
 * id + body through the services' real producers, outboxes and consumers built in process; the
 * global setup registered the subjects once (prefix ''), and a registry id names a schema's content,
 * so it serves the tests' prefixed topics too. It also exports the format and the registry's URL to
 * the environment, where serviceTestEnv and the Stack read them for the processes they start.
 */
import { bindSchemaRegistry } from '@outreach/shared';
import { inject } from 'vitest';

const url = inject('schemaRegistryUrl');
const format = inject('eventWireFormat');
process.env.EVENT_WIRE_FORMAT = format;
if (url) process.env.SCHEMA_REGISTRY_URL = url;
if (format === 'confluent') {
  if (!url)
    throw new Error('the Confluent wire format needs a schema registry: npm run infra:up, or SCHEMA_REGISTRY_URL');
  const binding = await bindSchemaRegistry({
    EVENT_WIRE_FORMAT: 'confluent',
    SCHEMA_REGISTRY_URL: url,
    SCHEMA_REGISTRY_AUTH: '',
    SCHEMA_REGISTRY_TIMEOUT_MS: 5_000,
    SCHEMA_REGISTRY_STARTUP_TIMEOUT_MS: 30_000,
    TOPIC_PREFIX: '',
  });
  if (!binding || binding.currentIds.size === 0) throw new Error('no public subject is bound');
}
