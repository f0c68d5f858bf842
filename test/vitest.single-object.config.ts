/**
 * The int and e2e projects with every public topic in Avro single-object encoding, the opt-out for a
 * deployment without a schema registry (ADR 011); the default run uses the Confluent wire format:
 *   npx vitest run --config test/vitest.single-object.config.ts --project int <files>
 */
import { resolve } from 'node:path';
import { defineConfig } from 'vitest/config';
import base from '../vitest.config.js';

process.env.EVENT_WIRE_FORMAT = 'single-object';

export default defineConfig({ ...base, root: resolve(import.meta.dirname, '..') });
