import { defineConfig } from 'vitest/config';

/**
 * Three projects, named by what they need (STYLE.md habit 4):
 *   unit  *.unit.test.ts  nothing but Node
 *   int   *.int.test.ts   the real Kafka broker and PostgreSQL (test/global-setup.ts finds or starts them)
 *   e2e   *.e2e.test.ts   whole services as processes, built first (`npm run test:e2e`)
 * Workspace packages resolve to their TypeScript sources through the `source` export condition.
 */
const shared = {
  resolve: { conditions: ['source'] },
  ssr: { resolve: { conditions: ['source'] } },
};

const exclude = ['**/node_modules/**', '**/dist/**', '.infra/**'];
// @fastify/autoload imports plugin files with import(); inlined, that import goes through vite and
// can load the TypeScript sources (autoload detects vitest and asks for .ts files).
const server = { deps: { inline: ['@fastify/autoload'] } };

export default defineConfig({
  ...shared,
  test: {
    projects: [
      {
        ...shared,
        test: { name: 'unit', include: ['**/*.unit.test.ts'], exclude, server },
      },
      {
        ...shared,
        test: {
          name: 'int',
          include: ['**/*.int.test.ts'],
          exclude,
          server,
          globalSetup: ['test/global-setup.ts'],
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
          testTimeout: 120_000,
          hookTimeout: 120_000,
          fileParallelism: false,
        },
      },
    ],
  },
});
