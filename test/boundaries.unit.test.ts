/**
 * The architecture's boundaries are lint rules (eslint.config.mjs). These cases pin them, so a config
 * edit that silently drops one fails here rather than in a review months later.
 */
import { join } from 'node:path';
import { ESLint } from 'eslint';
import { describe, expect, it } from 'vitest';

const root = join(import.meta.dirname, '..');
const eslint = new ESLint({ cwd: root });

async function restricted(file: string, code: string): Promise<string[]> {
  const [result] = await eslint.lintText(code, { filePath: join(root, file) });
  return (result?.messages ?? [])
    .filter((m) => m.ruleId === 'no-restricted-imports' || m.ruleId === 'no-restricted-syntax')
    .map((m) => m.message);
}

const crossService = /another service's src\/ is its own/;

describe('lint boundaries', () => {
  it.each([
    [
      'services/sender/src/workflow/x.ts',
      "import { a } from '../../../liveness/src/adapters/conversations-repository.js';",
    ],
    ['services/sender/src/domain/x.ts', "import { a } from '../../../planner/src/domain/request.js';"],
    ['services/planner/test/x.int.test.ts', "import { a } from '../../experiment/src/app.js';"],
    ['scripts/bench/x.ts', "import { a } from '../../services/liveness/src/adapters/conversations-repository.js';"],
    ['scripts/x.ts', "import { a } from '../services/sender/src/config.js';"],
    ['test/int/x.int.test.ts', "import { a } from '../../services/sender/src/config.js';"],
  ])('%s may not import another service’s src/', async (file, code) => {
    expect(await restricted(file, `${code}\nexport const b = a;\n`)).toEqual([expect.stringMatching(crossService)]);
  });

  it('a service imports its own src/ freely', async () => {
    expect(
      await restricted(
        'services/sender/src/workflow/x.ts',
        "import { a } from '../domain/send.js';\nexport const b = a;\n",
      ),
    ).toEqual([]);
    expect(
      await restricted(
        'services/sender/test/x.int.test.ts',
        "import { a } from '../src/app.js';\nexport const b = a;\n",
      ),
    ).toEqual([]);
  });

  it('the deployment tests may read the services’ config schemas, and nothing else may', async () => {
    const code = "import { a } from '../../services/sender/src/config.js';\nexport const b = a;\n";
    expect(await restricted('test/deploy/x.unit.test.ts', code)).toEqual([]);
    expect(await restricted('test/e2e/x.e2e.test.ts', code)).toEqual([expect.stringMatching(crossService)]);
  });

  it('nobody deep-imports @outreach/shared', async () => {
    for (const file of ['services/sender/src/x.ts', 'services/sender/src/domain/x.ts', 'scripts/x.ts']) {
      expect(
        await restricted(file, "import { a } from '@outreach/shared/src/outbox/outbox.js';\nexport const b = a;\n"),
      ).toEqual([expect.stringMatching(/import from @outreach\/shared/)]);
    }
  });

  it('the domain is pure: no IO, no clock, no randomness', async () => {
    const file = 'services/planner/src/domain/x.ts';
    expect(await restricted(file, "import pg from 'pg';\nexport const b = pg;\n")).toHaveLength(1);
    expect(await restricted(file, 'export const b = Date.now();\n')).toHaveLength(1);
    expect(await restricted(file, 'export const b = Math.random();\n')).toHaveLength(1);
    expect(
      await restricted(file, "import { randomUUID } from 'node:crypto';\nexport const b = randomUUID();\n"),
    ).toHaveLength(1);
    expect(await restricted(file, "import { createHash } from 'node:crypto';\nexport const b = createHash;\n")).toEqual(
      [],
    );
  });
});
