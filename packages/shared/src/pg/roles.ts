/**
 * Database roles: one migrator that owns every service schema and does all DDL (the migrate command
 * and Job), and one runtime role per service with rights only on its own schema's rows: no DDL, no
 * other service's tables. `db:roles` creates them (idempotent, run by an administrator); `migrate`,
 * run as the migrator, grants the runtime role what each migration creates, now and by default.
 *
 *   migrator  LOGIN; CONNECT, CREATE, TEMPORARY on the database; owns the service schemas and
 *             everything in them
 *   runtime   LOGIN; CONNECT, TEMPORARY on the database; USAGE on its schema (not CREATE);
 *             SELECT, INSERT, UPDATE, DELETE on its tables; USAGE, SELECT, UPDATE on its sequences;
 *             nothing on the migrations table; its schema first on its search_path
 */
import { createHash, createHmac, pbkdf2Sync, randomBytes } from 'node:crypto';
import { quoteIdent } from './pool.js';
import type { Queryable } from './transaction.js';

export const ROLE_NAME = /^[a-z_][a-z0-9_]{0,62}$/;

export interface ServiceDatabaseRole {
  /** The runtime role the service connects as. */
  readonly role: string;
  /** The one schema it owns (its DATABASE_SCHEMA). */
  readonly schema: string;
}

export interface DatabaseRolesPlan {
  readonly database: string;
  readonly migrator: string;
  readonly services: readonly ServiceDatabaseRole[];
  /** Passwords by role; a role without one logs in some other way (client certificate, IAM). */
  readonly passwords?: Readonly<Record<string, string>>;
}

function literal(value: string): string {
  return `'${value.replaceAll("'", "''")}'`;
}

function checkName(kind: string, name: string): void {
  if (!ROLE_NAME.test(name)) throw new Error(`${kind} "${name}" must match ${ROLE_NAME}`);
}

/**
 * A SCRAM-SHA-256 verifier (RFC 5802/7677, as PostgreSQL stores it): the password never travels to
 * the server or into its statement log, only what the server needs to check it. PostgreSQL applies
 * SASLprep to non-ASCII passwords; we do not, so keep generated passwords ASCII.
 */
export function scramVerifier(password: string, salt: Buffer = randomBytes(16), iterations = 4096): string {
  const salted = pbkdf2Sync(password, salt, iterations, 32, 'sha256');
  const clientKey = createHmac('sha256', salted).update('Client Key').digest();
  const storedKey = createHash('sha256').update(clientKey).digest();
  const serverKey = createHmac('sha256', salted).update('Server Key').digest();
  return `SCRAM-SHA-256$${iterations}:${salt.toString('base64')}$${storedKey.toString('base64')}:${serverKey.toString('base64')}`;
}

/**
 * The runtime role's rights on `schema`: on what exists now, and on what `grantor` (default: the
 * role running this) creates later. The migrations table stays the migrator's alone.
 */
export function runtimeGrantsSql(schema: string, runtimeRole: string, grantor?: string): string[] {
  checkName('role', runtimeRole);
  const s = quoteIdent(schema);
  const r = quoteIdent(runtimeRole);
  const forRole = grantor ? ` FOR ROLE ${quoteIdent(grantor)}` : '';
  return [
    `GRANT USAGE ON SCHEMA ${s} TO ${r}`,
    `GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA ${s} TO ${r}`,
    `GRANT USAGE, SELECT, UPDATE ON ALL SEQUENCES IN SCHEMA ${s} TO ${r}`,
    `ALTER DEFAULT PRIVILEGES${forRole} IN SCHEMA ${s} GRANT SELECT, INSERT, UPDATE, DELETE ON TABLES TO ${r}`,
    `ALTER DEFAULT PRIVILEGES${forRole} IN SCHEMA ${s} GRANT USAGE, SELECT, UPDATE ON SEQUENCES TO ${r}`,
    `DO $$ BEGIN
       IF to_regclass(${literal(`${s}.pgmigrations`)}) IS NOT NULL THEN
         EXECUTE ${literal(`REVOKE ALL ON TABLE ${s}.pgmigrations FROM ${r}`)};
       END IF;
     END $$`,
  ];
}

/** Every statement `db:roles` runs, in order; each is idempotent. Pure. */
export function databaseRolesSql(plan: DatabaseRolesPlan): string[] {
  checkName('migrator', plan.migrator);
  const m = quoteIdent(plan.migrator);
  const db = quoteIdent(plan.database);
  const statements: string[] = [];
  for (const role of [plan.migrator, ...plan.services.map((s) => s.role)]) {
    checkName('role', role);
    const password = plan.passwords?.[role];
    statements.push(
      `DO $$ BEGIN
         IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = ${literal(role)}) THEN
           CREATE ROLE ${quoteIdent(role)} LOGIN;
         END IF;
       END $$`,
      `ALTER ROLE ${quoteIdent(role)} WITH LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOREPLICATION NOBYPASSRLS${
        password === undefined ? '' : ` PASSWORD ${literal(scramVerifier(password))}`
      }`,
    );
  }
  // PostgreSQL 15 made this the default; older servers let every role create tables in public.
  statements.push('REVOKE CREATE ON SCHEMA public FROM PUBLIC');
  statements.push(`GRANT CONNECT, CREATE, TEMPORARY ON DATABASE ${db} TO ${m}`);
  for (const service of plan.services) {
    const s = quoteIdent(service.schema);
    statements.push(
      `GRANT CONNECT, TEMPORARY ON DATABASE ${db} TO ${quoteIdent(service.role)}`,
      `REVOKE CREATE ON DATABASE ${db} FROM ${quoteIdent(service.role)}`,
      `CREATE SCHEMA IF NOT EXISTS ${s} AUTHORIZATION ${m}`,
      `ALTER SCHEMA ${s} OWNER TO ${m}`,
      // A schema a superuser migrated before roles existed: its objects move to the migrator, so
      // the migrator can change them and grant on them.
      `DO $$ DECLARE o record; BEGIN
         FOR o IN SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
                  WHERE n.nspname = ${literal(service.schema)} AND c.relkind IN ('r', 'p', 'v', 'm', 'f')
                    AND pg_get_userbyid(c.relowner) <> ${literal(plan.migrator)} LOOP
           EXECUTE format('ALTER TABLE %I.%I OWNER TO %I', ${literal(service.schema)}, o.relname, ${literal(plan.migrator)});
         END LOOP;
         FOR o IN SELECT p.oid::regprocedure AS signature FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
                  WHERE n.nspname = ${literal(service.schema)} AND pg_get_userbyid(p.proowner) <> ${literal(plan.migrator)} LOOP
           EXECUTE format('ALTER ROUTINE %s OWNER TO %I', o.signature, ${literal(plan.migrator)});
         END LOOP;
       END $$`,
      // Its own schema first without a startup `options` parameter too: PgBouncer drops that one.
      `ALTER ROLE ${quoteIdent(service.role)} IN DATABASE ${db} SET search_path = ${s}, public`,
      `REVOKE ALL ON SCHEMA ${s} FROM PUBLIC`,
      `REVOKE CREATE ON SCHEMA ${s} FROM ${quoteIdent(service.role)}`,
      ...runtimeGrantsSql(service.schema, service.role, plan.migrator),
    );
  }
  return statements;
}

/** Runs `databaseRolesSql` in one transaction, as a role that may create roles and schemas. */
export async function ensureDatabaseRoles(client: Queryable, plan: DatabaseRolesPlan): Promise<void> {
  await client.query('BEGIN');
  try {
    for (const statement of databaseRolesSql(plan)) await client.query(statement);
    await client.query('COMMIT');
  } catch (error) {
    await client.query('ROLLBACK').catch(() => undefined);
    throw error;
  }
}

/** What `migrate` runs, as the migrator, after the migrations of `schema`. */
export async function grantRuntimeAccess(client: Queryable, schema: string, runtimeRole: string): Promise<void> {
  for (const statement of runtimeGrantsSql(schema, runtimeRole)) await client.query(statement);
}
