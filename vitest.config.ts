import { defineConfig } from 'vitest/config';

/**
 * Four projects, named by what they need (docs/style.md, habit 4):
 *   unit       *.unit.test.ts       nothing but Node
 *   int        *.int.test.ts        the real Kafka broker and PostgreSQL (test/global-setup.ts finds or starts them)
 *   e2e        *.e2e.test.ts        whole services as processes, built first (`npm run test:e2e`)
 *   container  *.container.test.ts  the image, built first (test/container/global-setup.ts), run with
 *                                   podman; its own CI stage (`npm run test:container`), not in `npm test`
 * Workspace packages resolve to their TypeScript sources through the `source` export condition.
 */
// The tests run on Node.js 24 LTS (.node-version, ADR 008); vitest 5 and testcontainers 12 do not
// support the Node 20 some machines still ship, so say how to get 24 rather than fail obscurely.
if (Number(process.versions.node.split('.')[0]) < 24) {
  throw new Error(`Node.js ${process.version}: the tests need Node.js 24; run \`source scripts/use-node.sh\` first`);
}

const shared = {
  resolve: { conditions: ['source'] },
  ssr: { resolve: { conditions: ['source'] } },
};

const exclude = ['**/node_modules/**', '**/dist/**', '.infra/**', '.runtime/**'];
// @fastify/autoload imports plugin files with import(); inlined, that import goes through vite and
// can load the TypeScript sources (autoload detects vitest and asks for .ts files).
const server = { deps: { inline: ['@fastify/autoload'] } };

export default defineConfig({
  ...shared,
  test: {
    projects: [
      {
        ...shared,
        // Two workers: vitest's default (available cores - 1) is one on a 2-core machine.
        // groupOrder: projects with different worker counts must run as separate groups when one
        // command runs several (`npx vitest run <path>`); unit, then int, then e2e.
        test: {
          name: 'unit',
          include: ['**/*.unit.test.ts'],
          exclude,
          server,
          maxWorkers: 2,
          sequence: { groupOrder: 0 },
        },
      },
      {
        ...shared,
        test: {
          name: 'int',
          include: ['**/*.int.test.ts'],
          exclude,
          server,
          globalSetup: ['test/global-setup.ts'],
          setupFiles: ['test/wire-format.ts'],
          // The files mostly wait on Kafka (group joins, rebalances, session timeouts) and on the
          // processes they start, so three run side by side even on 2 cores: 907 s one at a time,
          // 308 s with three on the 2-core CI machine (four: 262 s, with the CPU saturated).
          // Every file owns its topics, schemas and ports (uniqueName, freePort).
          maxWorkers: 3,
          sequence: { groupOrder: 1 },
          testTimeout: 60_000,
          hookTimeout: 120_000,
        },
      },
      {
        ...shared,
        test: {
          name: 'e2e',
          include: ['**/*.e2e.test.ts'],
          exclude,
          server,
          globalSetup: ['test/global-setup.ts'],
          setupFiles: ['test/wire-format.ts'],
          testTimeout: 120_000,
          hookTimeout: 120_000,
          // Two side by side (102 s one at a time, 60 s): each file runs its stack on ports of its own.
          maxWorkers: 2,
          sequence: { groupOrder: 2 },
        },
      },
      {
        ...shared,
        test: {
          name: 'container',
          include: ['**/*.container.test.ts'],
          exclude,
          server,
          globalSetup: ['test/global-setup.ts', 'test/container/global-setup.ts'],
          setupFiles: ['test/wire-format.ts'],
          testTimeout: 300_000,
          hookTimeout: 300_000,
          // The two files side by side: the compose stack runs in a network namespace of its own, and
          // both mostly wait on JVMs and containers starting.
          maxWorkers: 2,
          sequence: { groupOrder: 3 },
        },
      },
    ],
  },
});
