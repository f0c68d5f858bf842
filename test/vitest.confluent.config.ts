/**
 * The int and e2e projects with every public topic in the Confluent wire format (ADR 011):
 *   npx vitest run --config test/vitest.confluent.config.ts --project int <files>
 * The global setup registers the schemas once (EVENT_WIRE_FORMAT=confluent, which this file sets);
 * test/confluent-wire-format.ts binds the codec in each test file.
 */
import { resolve } from 'node:path';
import { defineConfig } from 'vitest/config';
import base from '../vitest.config.js';

process.env.EVENT_WIRE_FORMAT = 'confluent';

type Project = { test: { name: string; setupFiles?: string[] } };
const projects = (base.test?.projects ?? []) as unknown as Project[];

export default defineConfig({
  ...base,
  root: resolve(import.meta.dirname, '..'),
  test: {
    ...base.test,
    projects: projects.map((project) =>
      project.test.name === 'unit'
        ? project
        : { ...project, test: { ...project.test, setupFiles: ['test/confluent-wire-format.ts'] } },
    ) as never,
  },
});
