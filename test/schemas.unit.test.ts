/** `npm run schemas:check`, as CI runs it: passes on the committed schemas, fails on an incompatible change. */
import { spawnSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, readdirSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';

const root = join(import.meta.dirname, '..');
const check = (env: NodeJS.ProcessEnv) =>
  spawnSync(
    process.execPath,
    ['--conditions=source', '--import', join(root, 'node_modules/tsx/dist/loader.mjs'), 'scripts/schemas.ts', 'check'],
    { cwd: root, env: { PATH: process.env.PATH, ...env }, encoding: 'utf8' },
  );

describe('schemas:check', () => {
  it('passes on the schemas in this repository', () => {
    const result = check({});
    expect(result.status, result.stderr).toBe(0);
    // Every file was checked: the counts are those of schemas/ and schemas/history/.
    const avsc = (dir: string) => readdirSync(join(root, dir)).filter((f) => f.endsWith('.avsc')).length;
    expect(result.stdout).toContain(
      `schemas compatible: ${avsc('schemas')} current, ${avsc('schemas/history')} in history`,
    );
  });

  it('fails when a schema can no longer read its previous version', () => {
    const dir = mkdtempSync(join(tmpdir(), 'schemas-check-'));
    mkdirSync(join(dir, 'history'));
    const v1 = { type: 'record', name: 'Probe', fields: [{ name: 'a', type: 'string' }] };
    const v2 = { ...v1, fields: [...v1.fields, { name: 'b', type: 'long' }] };
    writeFileSync(join(dir, 'history', 'Probe.v1.avsc'), JSON.stringify(v1));
    writeFileSync(join(dir, 'Probe.avsc'), JSON.stringify(v2));
    const result = check({ SCHEMAS_DIR: dir, SCHEMAS_GIT_REF: 'none' });
    expect(result.status).toBe(1);
    expect(result.stderr).toMatch(/INCOMPATIBLE Probe cannot read data written with Probe.v1.avsc/);
  });

  it('fails when an older version can no longer read what the current one writes (forward, ADR 011)', () => {
    const dir = mkdtempSync(join(tmpdir(), 'schemas-check-'));
    mkdirSync(join(dir, 'history'));
    const v1 = {
      type: 'record',
      name: 'Probe',
      fields: [
        { name: 'a', type: 'string' },
        { name: 'b', type: 'long' },
      ],
    };
    // Backward-compatible (v2 reads v1 by ignoring b), but a v1 reader finds no b and has no default for it.
    const v2 = { ...v1, fields: [{ name: 'a', type: 'string' }] };
    writeFileSync(join(dir, 'history', 'Probe.v1.avsc'), JSON.stringify(v1));
    writeFileSync(join(dir, 'Probe.avsc'), JSON.stringify(v2));
    const result = check({ SCHEMAS_DIR: dir, SCHEMAS_GIT_REF: 'none' });
    expect(result.status).toBe(1);
    expect(result.stderr).toMatch(/INCOMPATIBLE Probe \(forward\): a reader holding Probe.v1.avsc cannot read/);
    expect(result.stderr).not.toMatch(/cannot read data written with/);
  });
});

describe('schemas/README.md', () => {
  it('is generated from the schemas and topic declarations (run `npm run schemas:gen`)', async () => {
    const { readFileSync } = await import('node:fs');
    const { loadSchemaSet } = await import('@outreach/shared');
    const { schemasReadme, readmeFile, schemasDir } = await import('../scripts/schemas.js');
    expect(readFileSync(readmeFile, 'utf8')).toBe(schemasReadme(loadSchemaSet(schemasDir)));
  });
});
