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

export default defineConfig({
  ...shared,
  test: {
    projects: [
      {
        ...shared,
        test: { name: 'unit', include: ['**/*.unit.test.ts'], exclude },
      },
      {
        ...shared,
        test: {
          name: 'int',
          include: ['**/*.int.test.ts'],
          exclude,
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
          globalSetup: ['test/global-setup.ts'],
          testTimeout: 120_000,
          hookTimeout: 120_000,
          fileParallelism: false,
        },
      },
    ],
  },
});
