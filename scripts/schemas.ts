/**
 * npm run schemas:gen    regenerate packages/shared/src/contracts/events.generated.ts from schemas/
 * npm run schemas:check  every schema must read data written by its older versions (history/ and main)
 *
 * SCHEMAS_DIR overrides the directory (tests use it); SCHEMAS_GIT_REF the branch compared against.
 */
import { writeFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { checkCompatibility, generateTypeScript, loadSchemaSet } from '@outreach/shared';

const root = resolve(import.meta.dirname, '..');
const dir = resolve(process.env.SCHEMAS_DIR ?? join(root, 'schemas'));
export const generatedFile = join(root, 'packages', 'shared', 'src', 'contracts', 'events.generated.ts');

const [command] = process.argv.slice(2);
const set = loadSchemaSet(dir);
if (command === 'gen') {
  writeFileSync(generatedFile, generateTypeScript(set));
  console.log(`wrote ${generatedFile} (${set.current.length} event types, ${set.history.length} older versions)`);
} else if (command === 'check') {
  const gitRef = process.env.SCHEMAS_GIT_REF ?? 'main';
  const problems = checkCompatibility(set, { gitRef, cwd: dir });
  for (const problem of problems) {
    console.error(
      `INCOMPATIBLE ${problem.schema} cannot read data written with ${problem.against}: ${problem.message}`,
    );
  }
  if (problems.length > 0) {
    console.error(
      `${problems.length} incompatible change(s). Give new fields defaults, keep names, or publish a new topic version.`,
    );
    process.exit(1);
  }
  console.log(
    `schemas compatible: ${set.current.length} current, ${set.history.length} in history, compared with ${gitRef}`,
  );
} else {
  console.error('usage: schemas.ts gen | check');
  process.exit(2);
}
