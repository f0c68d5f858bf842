/**
 * `db:roles --passwords-dir`: what it refuses before it connects anywhere (so no database is needed).
 */
import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';

const root = join(import.meta.dirname, '..', '..', '..', '..');
const dir = mkdtempSync(join(tmpdir(), 'db-roles-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

function dbRoles(password: string) {
  writeFileSync(join(dir, 'sender'), `${password}\n`);
  return spawnSync(
    process.execPath,
    [
      '--conditions=source',
      '--import',
      'tsx',
      'packages/ops/src/cli/db-roles.ts',
      '--service',
      'sender',
      '--passwords-dir',
      dir,
    ],
    {
      cwd: root,
      encoding: 'utf8',
      // Nothing answers here: a refusal must come before any connection.
      env: { PATH: process.env.PATH, DATABASE_URL: 'postgres://admin@127.0.0.1:1/outreach' },
      timeout: 30_000,
    },
  );
}

describe('db:roles --passwords-dir', () => {
  it.each([
    ['a no-break space', 'pass\u00A0word'],
    ['a decomposed accent', 'cafe\u0301-password'],
  ])(
    'refuses a password with %s (SCRAM without SASLprep would set one that never logs in): exit 78, no value',
    (_, password) => {
      const run = dbRoles(password);
      expect(run.status).toBe(78);
      expect(run.stderr).toMatch(/--passwords-dir sender .* outside printable ASCII/);
      expect(run.stderr + run.stdout).not.toContain(password);
    },
  );
});
