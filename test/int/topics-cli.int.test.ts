/** `npm run topics:ensure`, as a deploy Job runs it: creates everything once, then changes nothing. */
import { spawnSync } from 'node:child_process';
import { join } from 'node:path';
import { declaredTopics } from '@outreach/shared';
import { uniqueName } from '@outreach/testkit';
import { expect, inject, it } from 'vitest';

const root = join(import.meta.dirname, '..', '..');
const run = (env: NodeJS.ProcessEnv) =>
  spawnSync(
    process.execPath,
    [
      '--conditions=source',
      '--import',
      join(root, 'node_modules/tsx/dist/loader.mjs'),
      'packages/ops/src/cli/topics.ts',
    ],
    { cwd: root, env: { PATH: process.env.PATH, ...env }, encoding: 'utf8' },
  );

it('topics:ensure is idempotent and names a missing KAFKA_BROKERS', () => {
  const env = { KAFKA_BROKERS: inject('kafkaBrokers'), TOPIC_PREFIX: `${uniqueName('cli')}.`, TOPIC_PARTITIONS: '1' };
  const first = run(env);
  expect(first.status, first.stderr).toBe(0);
  // Every declared topic and its DLQ, from the declaration rather than a count that drifts.
  const count = declaredTopics().length;
  expect(first.stdout).toContain(`topics: ${count} created, 0 reconfigured, 0 unchanged`);
  const second = run(env);
  expect(second.stdout).toContain(`topics: 0 created, 0 reconfigured, ${count} unchanged`);

  const missing = run({});
  expect(missing.status).toBe(78);
  expect(missing.stderr).toMatch(/KAFKA_BROKERS/);
});
