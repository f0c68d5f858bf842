/**
 * PostgreSQL security against the TLS server the project starts (ssl=on, its own CA; plaintext TCP
 * refused): sslmode keeps libpq's meanings (verify-full checks the host name, verify-ca does not,
 * require without a CA encrypts without verifying), an untrusted CA is refused with a reason, and
 * the roles of `db:roles` hold: the experiment role cannot read sender.sends, a runtime role cannot
 * CREATE TABLE, and what the migrator creates later is granted to the runtime role by default.
 * The outbox relay's connection is TLS and keeps TCP keepalive on.
 */
import { execFileSync, spawnSync } from 'node:child_process';
import { join } from 'node:path';
import {
  buildHttpApp,
  createKafka,
  createLogger,
  EventProducer,
  explainPgError,
  OutboxRelay,
  registerOutboxRelay,
  resolvePgSettings,
} from '@outreach/shared';
import { waitFor } from '@outreach/testkit';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { clientFor, migrateService, securedDatabaseFixture, type SecuredDatabaseFixture } from './secured-fixtures.js';

const infra = inject('securedInfra');
const root = join(import.meta.dirname, '..', '..');

async function query(url: string, sql: string): Promise<{ rows: Array<Record<string, unknown>> }> {
  const client = clientFor(url);
  await client.connect();
  try {
    return await client.query(sql);
  } finally {
    await client.end().catch(() => undefined);
  }
}

async function failure(url: string, sql = 'SELECT 1'): Promise<{ code?: string; message: string }> {
  const error = await query(url, sql).then(
    () => undefined,
    (e: unknown) => e as { code?: string; message: string },
  );
  expect(error, `${sql} should have failed`).toBeDefined();
  return error as { code?: string; message: string };
}

describe.skipIf(!infra)('secured PostgreSQL', () => {
  let db: SecuredDatabaseFixture;

  beforeAll(async () => {
    db = await securedDatabaseFixture(infra as NonNullable<typeof infra>, ['sender', 'experiment']);
    for (const service of ['sender', 'experiment']) await migrateService(db, service);
  });
  afterAll(async () => {
    await db?.cleanup();
  });

  describe('TLS with libpq meanings', () => {
    it('verify-full with the CA: the session is encrypted', async () => {
      const { rows } = await query(
        db.url(db.roles.experiment as string),
        'SELECT ssl, version FROM pg_stat_ssl WHERE pid = pg_backend_pid()',
      );
      expect(rows[0]).toMatchObject({ ssl: true, version: expect.stringMatching(/^TLSv1\.[23]$/) });
    });

    it('an untrusted CA is refused, and the start-up message says which file to check', async () => {
      const error = await failure(db.url(db.roles.experiment as string, { ca: infra?.postgres.untrustedCaFile ?? '' }));
      expect(explainPgError(error)).toMatchObject({
        failure: 'tls',
        message: expect.stringMatching(/certificate is not trusted .*DATABASE_SSL_CA_FILE/),
      });
    });

    it('verify-full checks the host name (the certificate names 127.0.0.1, not localhost); verify-ca does not', async () => {
      const role = db.roles.experiment as string;
      const error = await failure(db.url(role, { host: 'localhost' }));
      expect(error.code).toBe('ERR_TLS_CERT_ALTNAME_INVALID');
      expect(explainPgError(error)?.failure).toBe('tls');
      const { rows } = await query(db.url(role, { host: 'localhost', sslmode: 'verify-ca' }), 'SELECT 1 AS one');
      expect(rows).toEqual([{ one: 1 }]);
    });

    it('require without a CA encrypts but verifies nothing (libpq), so it connects even to a server we cannot vouch for', async () => {
      const url = db.url(db.roles.experiment as string, { sslmode: 'require' });
      expect(resolvePgSettings(url, {})).toEqual({ sslMode: 'require' });
      const { rows } = await query(url, 'SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()');
      expect(rows).toEqual([{ ssl: true }]);
    });

    it('plaintext is refused by the server', async () => {
      const error = await failure(db.url(db.roles.experiment as string, { sslmode: 'disable' }));
      expect(error.code).toBe('28000');
      expect(error.message).toMatch(/no encryption/);
      expect(explainPgError(error)?.failure).toBe('authentication');
    });

    it('a wrong password is refused with 28P01', async () => {
      const url = db.url(db.roles.experiment as string).replace(/:[^:@/]+@/, ':wrong@');
      const error = await failure(url);
      expect(error.code).toBe('28P01');
      expect(explainPgError(error)?.message).not.toContain('wrong');
    });
  });

  describe('roles', () => {
    it('the experiment role cannot read sender.sends', async () => {
      const error = await failure(db.url(db.roles.experiment as string), 'SELECT count(*) FROM sender.sends');
      expect(error).toMatchObject({ code: '42501', message: 'permission denied for schema sender' });
    });

    it('a runtime role cannot CREATE TABLE, in its schema or in public, nor touch the migrations table', async () => {
      const role = db.roles.sender as string;
      expect(await failure(db.url(role), 'CREATE TABLE sender.mine (x int)')).toMatchObject({
        code: '42501',
        message: 'permission denied for schema sender',
      });
      expect(await failure(db.url(role), 'CREATE TABLE public.mine (x int)')).toMatchObject({ code: '42501' });
      expect(await failure(db.url(role), 'DROP TABLE sender.sends')).toMatchObject({ code: '42501' });
      expect(await failure(db.url(role), 'SELECT * FROM sender.pgmigrations')).toMatchObject({ code: '42501' });
    });

    it('a runtime role reads and writes its own tables, including what a later migration creates', async () => {
      const sender = db.url(db.roles.sender as string);
      const { rows } = await query(sender, 'SELECT count(*)::int AS n FROM sender.sends');
      expect(rows).toEqual([{ n: 0 }]);
      // UPDATE and DELETE rights on what the migrations made (no row needs to change to prove them).
      await query(sender, 'UPDATE sender.sends SET send_id = send_id WHERE false');
      await query(sender, 'DELETE FROM sender.outbox WHERE false');
      // A later migration, run by the migrator: the default privileges grant it, no one has to remember.
      await query(db.url(db.migrator), 'CREATE TABLE sender.later (id bigserial PRIMARY KEY, note text)');
      await query(sender, "INSERT INTO sender.later (note) VALUES ('granted by default')");
      expect((await query(sender, 'SELECT note FROM sender.later')).rows).toEqual([{ note: 'granted by default' }]);
    });

    it('a runtime role finds its schema first without a startup parameter (what PgBouncer leaves of `options`)', async () => {
      const { rows } = await query(db.url(db.roles.sender as string), 'SHOW search_path');
      expect(rows).toEqual([{ search_path: 'sender, public' }]);
    });

    it('db:roles is idempotent and runs as a command', () => {
      const run = () =>
        spawnSync(
          process.execPath,
          [
            '--conditions=source',
            '--import',
            join(root, 'node_modules/tsx/dist/loader.mjs'),
            'packages/ops/src/cli/db-roles.ts',
            '--role-prefix',
            db.rolePrefix,
            '--migrator',
            'migrator',
            '--service',
            'sender',
            '--service',
            'experiment',
          ],
          {
            cwd: root,
            env: {
              PATH: process.env.PATH,
              DATABASE_URL: infra?.postgres.superuserUrl.replace('/test?', `/${db.database}?`),
            },
            encoding: 'utf8',
          },
        );
      // Runs the fixture's plan again under the same names: nothing changes, nothing fails.
      for (let i = 0; i < 2; i += 1) {
        const result = run();
        expect(result.status, result.stderr).toBe(0);
        expect(result.stdout).toMatch(/roles ready in .*: migrator /);
      }
    });
  });

  it("with a session URL (DATABASE_SESSION_URL), a service's relay connects there, not through the pool's URL", async () => {
    // The pool's URL as the runtime role (it could be a transaction-mode PgBouncer); the session URL
    // as another role, so the relay's session shows which one it used.
    const app = await buildHttpApp({
      name: 'relay-session-test',
      logger: createLogger({ name: 'relay-session-test', level: 'silent' }),
      postgres: {
        connectionString: db.url(db.roles.sender as string),
        sessionConnectionString: db.url(db.migrator),
        applicationName: 'relay-session-test',
        schema: 'sender',
      },
      kafka: { brokers: [inject('kafkaBrokers')], clientId: 'relay-session-test' },
    });
    registerOutboxRelay(app, { databaseUrl: db.url(db.roles.sender as string), schema: 'sender', pollIntervalMs: 200 });
    try {
      await app.ready();
      const superuser = db.superuser();
      await superuser.connect();
      try {
        const users = await waitFor(
          async () => {
            const { rows } = await superuser.query<{ usename: string }>(
              `SELECT usename FROM pg_stat_activity WHERE application_name = 'outbox-relay-sender' AND datname = $1`,
              [db.database],
            );
            return rows.length > 0 ? rows.map((r) => r.usename) : undefined;
          },
          { timeoutMs: 20_000, description: 'the relay session' },
        );
        expect(users).toEqual([db.migrator]);
      } finally {
        await superuser.end();
      }
    } finally {
      await app.close();
    }
  });

  it("the outbox relay's connection is TLS and keeps TCP keepalive on (first probe after 30 s idle)", async () => {
    const kafka = createKafka({ brokers: [inject('kafkaBrokers')], clientId: 'relay-tls-test' });
    const producer = new EventProducer(kafka);
    const relay = new OutboxRelay({
      databaseUrl: db.url(db.roles.sender as string),
      schema: 'sender',
      producer,
      logger: createLogger({ name: 'relay-tls-test', level: 'silent' }),
      pollIntervalMs: 200,
    });
    relay.start();
    try {
      const superuser = db.superuser();
      await superuser.connect();
      try {
        // The relay's session and the client's side of that connection, read together: a session
        // that ended between the two reads (the relay reconnects) is read again.
        const { session, sockets } = await waitFor(
          async () => {
            const { rows } = await superuser.query<{ client_port: number; ssl: boolean }>(
              `SELECT a.client_port, s.ssl
                 FROM pg_stat_activity a JOIN pg_stat_ssl s ON s.pid = a.pid
                WHERE a.application_name = 'outbox-relay-sender' AND a.datname = $1`,
              [db.database],
            );
            const found = rows[0];
            if (!found) return undefined;
            const listed = execFileSync('ss', ['-tno', 'state', 'established', `( sport = :${found.client_port} )`], {
              encoding: 'utf8',
            });
            // A socket with a request in flight shows its retransmission timer (`timer:(on,...)`)
            // instead: read again until it idles between the relay's polls (every 200 ms). A socket
            // without keepalive never shows the keepalive timer, and this times out.
            return listed.includes(`:${found.client_port}`) && listed.includes('timer:(keepalive')
              ? { session: found, sockets: listed }
              : undefined;
          },
          { timeoutMs: 20_000, description: 'the relay session and its socket, idle, with its keepalive timer' },
        );
        expect(session.ssl).toBe(true);
        // The client's side of that connection: Linux shows a keepalive timer on it.
        // The OS default would first probe after two hours (`119min`); the relay asks for 30 s.
        const timer = /timer:\(keepalive,(\d+)(?:\.\d+)?(ms|sec|min)/.exec(sockets);
        expect(timer, sockets).not.toBeNull();
        expect(timer?.[2]).not.toBe('min');
        expect(Number(timer?.[1])).toBeLessThanOrEqual(timer?.[2] === 'ms' ? 30_000 : 30);
      } finally {
        await superuser.end();
      }
    } finally {
      await relay.stop();
      await producer.disconnect();
    }
  });
});
