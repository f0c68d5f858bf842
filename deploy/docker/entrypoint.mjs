/**
 * The image's entrypoint: one image, any service or operational command.
 *
 *   docker run IMAGE planner|sender|experiment|liveness|console  a service (in this process, so it is PID 1's signals)
 *   docker run IMAGE migrate [planner sender ...]             migrations of all (or the named) services
 *   docker run IMAGE topics:ensure                            create or align every topic
 *   docker run IMAGE dlq-replay --topic T [--code C] [--dry-run]  dead-lettered messages back to T
 *   docker run IMAGE sender-backfill|experiment-dry-run|experiment-replay|liveness-rebuild [args]
 *   docker run IMAGE [--help]                                 the usage (the image's default command), exit 0
 *
 * The commands and the files they run are in commands.json; a test checks that each has its package
 * script and its built file.
 */
import { spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';

const here = dirname(fileURLToPath(import.meta.url));
const root = resolve(here, '..', '..');
const table = JSON.parse(readFileSync(join(here, 'commands.json'), 'utf8'));
const [command, ...rest] = process.argv.slice(2);

// The image's default command (`docker run outreach`) asks for this: usage on stdout, exit 0.
if (command === '--help' || command === '-h' || command === 'help') {
  process.stdout.write(usage());
  process.exit(0);
}
if (!command || !Object.hasOwn(table, command)) {
  const known = Object.keys(table).join(', ');
  process.stderr.write(`${command ? `unknown command "${command}". ` : ''}Commands: ${known}\n`);
  process.exit(64);
}

let steps = table[command].run;
if (command === 'migrate' && rest.length > 0) {
  const unknown = rest.filter((name) => !steps.some(([file]) => file.startsWith(`services/${name}/`)));
  if (unknown.length > 0) {
    process.stderr.write(`migrate: no service named ${unknown.join(', ')}\n`);
    process.exit(64);
  }
  steps = steps.filter(([file]) => rest.some((name) => file.startsWith(`services/${name}/`)));
}

if (steps.length === 1 && command !== 'migrate') {
  // In this process: the service installs its own SIGTERM handling and shuts down gracefully.
  const [file, ...args] = steps[0];
  process.argv = [process.argv[0], join(root, file), ...args, ...rest];
  await import(pathToFileURL(join(root, file)).href);
} else {
  for (const [file, ...args] of steps) {
    const result = spawnSync(process.execPath, [join(root, file), ...args], { stdio: 'inherit' });
    if (result.status !== 0) {
      process.stderr.write(`${command}: ${file} ${args.join(' ')} failed (${result.status ?? result.signal})\n`);
      process.exit(result.status ?? 1);
    }
  }
}

function usage() {
  const names = Object.keys(table);
  const services = names.filter((name) => table[name].script === `services/${name}#start`);
  const operations = names.filter((name) => !services.includes(name));
  return [
    'Usage: docker run [options] outreach <command> [arguments]',
    '',
    `Services (serve HTTP on HTTP_PORT, 8080; SIGTERM drains): ${services.join(', ')}`,
    `Operations (run once, exit 0 when done): ${operations.join(', ')}`,
    '  migrate [service ...]   migrations of every service, or of the named ones',
    '  topics:ensure           create or align every topic',
    "  schemas:register        register the public topics' schemas in the schema registry",
    '',
    'Settings come from the environment (KAFKA_BROKERS, DATABASE_URL, ...): docs/operations.md in the repository.',
    '',
  ].join('\n');
}
