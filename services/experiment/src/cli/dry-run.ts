/**
 * The seed's dry test from a shell: assign n synthetic ids twice through the real assignment path,
 * in a transaction that is rolled back, and report the flips (must be 0).
 *
 *   DATABASE_URL=... node dist/cli/dry-run.js --experiment <id> [--n 100]
 */
import { parseArgs } from 'node:util';
import { createPool } from '@outreach/shared';
import { ExperimentsRepository } from '../adapters/experiments-repository.js';
import { dryRun } from '../workflow/dry-run.js';

const { values } = parseArgs({ options: { experiment: { type: 'string' }, n: { type: 'string', default: '100' } } });
if (!values.experiment || !process.env.DATABASE_URL) {
  process.stderr.write('usage: DATABASE_URL=... dry-run --experiment <id> [--n 100]\n');
  process.exit(2);
}
const pool = createPool({
  connectionString: process.env.DATABASE_URL,
  applicationName: 'experiment-dry-run',
  schema: process.env.DATABASE_SCHEMA ?? 'experiment',
});
try {
  const repository = new ExperimentsRepository(pool, 'unused.dry-run');
  const experiment = await repository.find(values.experiment);
  if (!experiment) {
    process.stderr.write(`unknown experiment ${values.experiment}\n`);
    process.exit(1);
  }
  const result = await dryRun(repository, experiment, Number(values.n));
  console.log(JSON.stringify(result));
  console.log(
    `${result.stable}/${result.n} stable, ${result.flipped} flipped${result.flipped === 0 ? '' : '  <-- assignments are not sticky'}`,
  );
  process.exitCode = result.flipped === 0 ? 0 : 1;
} finally {
  await pool.end();
}
