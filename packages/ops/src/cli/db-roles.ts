/**
 * `db:roles`: creates (or brings up to date) the migrator and one runtime role per service, with
 * rights only on the service's own schema (pg/roles.ts). Idempotent; run by an administrator (a role
 * with CREATEROLE that may create schemas), once per environment and again when a service is added.
 *
 *   DATABASE_URL=postgres://admin@host/db npm run db:roles -- [--service sender[=schema]] ...
 *     [--migrator outreach_migrator] [--role-prefix ''] [--passwords-dir /secrets] [--print]
 *
 * Without --service: planner, sender, experiment, liveness and console, each role and schema named after it.
 * `--passwords-dir` holds one file per role, named after the role; a role without a file gets no
 * password (client certificate or IAM login). Passwords reach the server only as SCRAM verifiers.
 * `--print` prints the statements instead (passwords left out) and connects nowhere.
 */
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import pg from 'pg';
import { ConfigError } from '@outreach/shared';
import { explainPgError, pgClientConfig } from '@outreach/shared';
import { databaseRolesSql, ensureDatabaseRoles, ROLE_NAME, type DatabaseRolesPlan } from '@outreach/shared';
import { readSecretFile } from '@outreach/shared';

const SERVICES = ['planner', 'sender', 'experiment', 'liveness', 'console'];

function fail(message: string, code: number): never {
  process.stderr.write(`db:roles: ${message}\n`);
  process.exit(code);
}

const { values } = parseArgs({
  options: {
    service: { type: 'string', multiple: true },
    migrator: { type: 'string', default: 'outreach_migrator' },
    'role-prefix': { type: 'string', default: '' },
    'passwords-dir': { type: 'string' },
    database: { type: 'string' },
    print: { type: 'boolean', default: false },
  },
});

const databaseUrl = process.env.DATABASE_URL ?? fail('DATABASE_URL (an administrator) is required', 64);
const database = values.database ?? decodeURIComponent(new URL(databaseUrl).pathname.slice(1));
if (database === '') fail('name the database in DATABASE_URL or with --database', 64);
const prefix = values['role-prefix'];
const services = (values.service ?? SERVICES).map((entry) => {
  const [name = '', schema = name] = entry.split('=');
  const role = `${prefix}${name}`;
  if (!ROLE_NAME.test(role) || !ROLE_NAME.test(schema)) fail(`"${entry}": role and schema must match ${ROLE_NAME}`, 64);
  return { role, schema };
});
const migrator = `${prefix}${values.migrator}`;
const passwords: Record<string, string> = {};
if (values['passwords-dir']) {
  for (const role of [migrator, ...services.map((s) => s.role)]) {
    const file = join(values['passwords-dir'], role);
    if (!existsSync(file)) continue;
    const password = readSecretFile(`--passwords-dir ${role}`, file);
    // The verifier is computed here without SASLprep, which the pg client applies to what it sends:
    // a non-ASCII password (NBSP, a decomposed accent) would be set and then never log in.
    if (!/^[\x20-\x7e]+$/.test(password))
      fail(`--passwords-dir ${role} (${file}) holds characters outside printable ASCII; use an ASCII password`, 78);
    passwords[role] = password;
  }
}
const plan: DatabaseRolesPlan = { database, migrator, services, passwords };

if (values.print) {
  console.log(`${databaseRolesSql({ ...plan, passwords: {} }).join(';\n\n')};`);
} else {
  let client: pg.Client | undefined;
  try {
    client = new pg.Client(pgClientConfig(databaseUrl));
    await client.connect();
    await ensureDatabaseRoles(client, plan);
  } catch (error) {
    if (error instanceof ConfigError) fail(error.message, 78);
    const known = explainPgError(error);
    fail(known?.message ?? (error as Error).message, known ? 78 : 69);
  } finally {
    await client?.end().catch(() => undefined);
  }
  const withPassword = Object.keys(passwords);
  console.log(
    `roles ready in ${database}: migrator ${migrator}; ${services.map((s) => `${s.role} on ${s.schema}`).join(', ')}` +
      (withPassword.length > 0 ? `; passwords set for ${withPassword.join(', ')}` : ''),
  );
}
