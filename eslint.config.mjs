// @ts-check
import eslint from '@eslint/js';
import tseslint from 'typescript-eslint';

const SERVICES = ['planner', 'sender', 'experiment', 'liveness'];
// A path, not a pattern: deep imports of the platform already get the boundary's own message.
const PLATFORM = {
  name: '@outreach/shared',
  message: 'domain code and the contracts import only @outreach/contracts: the platform loads kafkajs, pg and fastify',
};
const TESTKIT = { group: ['@outreach/testkit', '@outreach/testkit/*'], message: 'the test kit is for tests only' };

export default tseslint.config(
  { ignores: ['**/dist/**', '**/node_modules/**', '.infra/**', '.runtime/**', 'coverage/**'] },
  eslint.configs.recommended,
  ...tseslint.configs.recommended,
  {
    languageOptions: {
      globals: {
        process: 'readonly',
        console: 'readonly',
        fetch: 'readonly',
        AbortSignal: 'readonly',
        URL: 'readonly',
      },
    },
    rules: {
      '@typescript-eslint/consistent-type-imports': ['error', { fixStyle: 'inline-type-imports' }],
      '@typescript-eslint/no-unused-vars': ['error', { argsIgnorePattern: '^_', varsIgnorePattern: '^_' }],
      // kafkajs stays behind packages/shared's helpers (ADR 001), so it can be swapped.
      'no-restricted-imports': [
        'error',
        { paths: [{ name: 'kafkajs', message: 'use the Kafka helpers of @outreach/shared' }] },
      ],
    },
  },
  {
    files: ['packages/shared/src/**', 'packages/testkit/src/**'],
    rules: { 'no-restricted-imports': 'off' },
  },
  {
    // The test kit is a dev dependency: production code never loads it (nor smtp-server, mailparser).
    files: ['packages/shared/src/**/*.ts'],
    ignores: ['**/*.test.ts'],
    rules: { 'no-restricted-imports': ['error', { patterns: [TESTKIT] }] },
  },
  // Services use the public surface of @outreach/shared, never its internals, and no service or script
  // reaches into another service's src/ (its tables and internals are that service's own; use its API,
  // its events or a documented command). ESLint replaces a rule's options per matching block rather than
  // merging them, so each block below carries the whole list.
  ...restrictedImportBlocks(),
  {
    // The domain is pure: no IO, no clock, no randomness (docs/style.md, habit 1).
    files: ['services/*/src/domain/**/*.ts'],
    // These options replace the blocks' above for domain files, so they repeat the boundary patterns.
    rules: {
      'no-restricted-imports': domainImports([]),
      'no-restricted-syntax': [
        'error',
        {
          selector: "CallExpression[callee.object.name='Math'][callee.property.name='random']",
          message: 'randomness comes in as an argument',
        },
        {
          selector: "CallExpression[callee.object.name='Date'][callee.property.name='now']",
          message: 'time comes in as an argument',
        },
        { selector: "NewExpression[callee.name='Date'][arguments.length=0]", message: 'time comes in as an argument' },
      ],
    },
  },
  {
    // Its production code imports only the pure contracts (@outreach/contracts), never the platform
    // (which loads kafkajs, pg and fastify) or the test kit (its unit tests may).
    files: ['services/*/src/domain/**/*.ts'],
    ignores: ['**/*.test.ts'],
    rules: { 'no-restricted-imports': domainImports([TESTKIT], [PLATFORM]) },
  },
  {
    // The contracts are pure: what a domain may import must not load the platform either.
    files: ['packages/contracts/src/**/*.ts'],
    ignores: ['**/*.test.ts'],
    rules: { 'no-restricted-imports': domainImports([TESTKIT], [PLATFORM]) },
  },
);

/** The domain's import rule: pure, within the boundaries, plus `extra` patterns and `extraPaths`. */
function domainImports(extra, extraPaths = []) {
  return [
    'error',
    {
      paths: [
        ...['pg', 'kafkajs', 'fastify', 'node:fs', 'node:net', 'node:child_process'].map((name) => ({
          name,
          message: 'domain code is pure; do IO in adapters and pass values in',
        })),
        // Hashing is deterministic and allowed; randomness is not.
        {
          name: 'node:crypto',
          importNames: ['randomUUID', 'randomBytes', 'randomInt', 'getRandomValues'],
          message: 'randomness comes in as an argument',
        },
        ...extraPaths,
      ],
      patterns: [
        ...boundaryPatterns(),
        { group: ['**/adapters/**', '**/plugins/**', '**/routes/**'], message: 'domain code is pure' },
        ...extra,
      ],
    },
  ];
}

function boundaryPatterns(own) {
  return [
    {
      group: ['@outreach/shared/src/*', '@outreach/shared/dist/*', '**/packages/shared/**'],
      message: 'import from @outreach/shared',
    },
    {
      group: SERVICES.filter((s) => s !== own).flatMap((s) => [`**/services/${s}/src/**`, `**/${s}/src/**`]),
      message:
        "another service's src/ is its own: use its HTTP API, its events, or a documented command of that service",
    },
  ];
}

function restrictedImportBlocks() {
  const kafkajs = { name: 'kafkajs', message: 'use the Kafka helpers of @outreach/shared' };
  const rule = (own) => ['error', { paths: [kafkajs], patterns: boundaryPatterns(own) }];
  return [
    { files: ['test/**/*.ts', 'scripts/**/*.ts'], rules: { 'no-restricted-imports': rule(undefined) } },
    // The deployment tests read each service's config schema to check the manifests against it.
    {
      files: ['test/deploy/**/*.ts'],
      rules: { 'no-restricted-imports': ['error', { paths: [kafkajs], patterns: [boundaryPatterns()[0]] }] },
    },
    ...SERVICES.map((own) => ({ files: [`services/${own}/**/*.ts`], rules: { 'no-restricted-imports': rule(own) } })),
    // A service's production source never loads the test kit.
    ...SERVICES.map((own) => ({
      files: [`services/${own}/src/**/*.ts`],
      ignores: ['**/*.test.ts'],
      rules: {
        'no-restricted-imports': ['error', { paths: [kafkajs], patterns: [...boundaryPatterns(own), TESTKIT] }],
      },
    })),
  ];
}
