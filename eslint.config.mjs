// @ts-check
import eslint from '@eslint/js';
import tseslint from 'typescript-eslint';

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
    files: ['packages/shared/src/**'],
    rules: { 'no-restricted-imports': 'off' },
  },
  {
    // Services use the public surface of @outreach/shared, never its internals.
    files: ['services/**/*.ts', 'test/**/*.ts', 'scripts/**/*.ts'],
    rules: {
      'no-restricted-imports': [
        'error',
        {
          paths: [{ name: 'kafkajs', message: 'use the Kafka helpers of @outreach/shared' }],
          patterns: [
            {
              group: ['@outreach/shared/src/*', '@outreach/shared/dist/*', '**/packages/shared/**'],
              message: 'import from @outreach/shared',
            },
          ],
        },
      ],
    },
  },
  {
    // The domain is pure: no IO, no clock, no randomness (STYLE.md habit 1).
    files: ['services/*/src/domain/**/*.ts'],
    rules: {
      'no-restricted-imports': [
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
          ],
          patterns: [{ group: ['**/adapters/**', '**/plugins/**', '**/routes/**'], message: 'domain code is pure' }],
        },
      ],
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
);
