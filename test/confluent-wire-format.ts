/**
 * Setup file of test/vitest.confluent.config.ts (ADR 011): binds the shared codec to the registry in
 * the Confluent wire format before each test file, as a service does at start with
 * EVENT_WIRE_FORMAT=confluent, so every public topic's events travel as magic 0 + id + body through
 * the services' real producers, outboxes and consumers. The global setup registered the subjects
 * once (prefix ''); a registry id names a schema's content, so it serves the tests' prefixed topics too.
 */
import { bindSchemaRegistry } from '@outreach/shared';
import { inject } from 'vitest';

const url = inject('schemaRegistryUrl');
if (!url)
  throw new Error('the confluent wire-format run needs a schema registry: npm run infra:up, or SCHEMA_REGISTRY_URL');
const binding = await bindSchemaRegistry({
  EVENT_WIRE_FORMAT: 'confluent',
  SCHEMA_REGISTRY_URL: url,
  SCHEMA_REGISTRY_AUTH: '',
  SCHEMA_REGISTRY_TIMEOUT_MS: 5_000,
  SCHEMA_REGISTRY_STARTUP_TIMEOUT_MS: 30_000,
  TOPIC_PREFIX: '',
});
if (!binding || binding.currentIds.size === 0) throw new Error('no public subject is bound');
