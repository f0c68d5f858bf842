/**
 * What the secured specs share: on the secured broker, a topic prefix of their own with every
 * declared topic and the generated ACLs of the roles they use (so specs run in parallel and leave
 * nothing behind); on the TLS PostgreSQL, a database of their own with the migrator and runtime
 * roles `db:roles` makes. Credentials go to files, as production mounts them.
 */
import { randomUUID } from 'node:crypto';
import { mkdtempSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import {
  applyKafkaAcls,
  createKafka,
  deleteKafkaAcls,
  ensureDatabaseRoles,
  ensureTopics,
  kafkaAcls,
  kafkaSecurityFromEnv,
  migrate,
  pgClientConfig,
  quoteIdent,
  type AclBinding,
  type KafkaRoleName,
  type KafkaSecurity,
} from '@outreach/shared';
import { type OutreachRequested } from '@outreach/contracts';
import { uniqueName } from '@outreach/testkit';
import pg from 'pg';
import type { SecuredInfra } from '../../scripts/infra.js';
import { aclsInEffect, superUserSecurity } from '../../scripts/lib/secured.js';
import { outreachRequest } from '../../scripts/lib/stack.js';

/** An outreach request for `candidate`, as a publisher sends it: what the secured specs produce. */
export function sampleRequest(candidate: string, producer = 'secured-test'): OutreachRequested {
  return outreachRequest(
    { requestId: randomUUID(), campaignId: 'secured', candidateId: candidate, email: `${candidate}@example.test` },
    producer,
  );
}

export type Mechanism = 'plain' | 'scram-sha-256' | 'scram-sha-512' | 'mtls' | 'oauth-unsecured';

export interface SecuredKafkaFixture {
  readonly topicPrefix: string;
  readonly groupPrefix: string;
  readonly acls: readonly AclBinding[];
  readonly admin: ReturnType<ReturnType<typeof createKafka>['admin']>;
  readonly adminKafka: ReturnType<typeof createKafka>;
  /** The KAFKA_* variables a process of `principal` gets, its password in a file. */
  env(principal: string, mechanism: Mechanism, overrides?: Record<string, string>): Record<string, string>;
  security(principal: string, mechanism: Mechanism, overrides?: Record<string, string>): KafkaSecurity;
  /** A file holding `content` (a password, a wrong one, a token). */
  file(name: string, content: string): string;
  cleanup(): Promise<void>;
}

export async function securedKafkaFixture(
  infra: SecuredInfra,
  roles: readonly KafkaRoleName[],
): Promise<SecuredKafkaFixture> {
  const info = infra.kafka;
  const topicPrefix = `${uniqueName('sec')}.`;
  const groupPrefix = `${uniqueName('g')}-`;
  const dir = mkdtempSync(join(tmpdir(), 'secured-kafka-'));
  const adminKafka = createKafka({
    brokers: [info.brokers],
    clientId: 'secured-test-admin',
    security: superUserSecurity(info),
  });
  const admin = adminKafka.admin();
  await admin.connect();
  await ensureTopics(admin, { prefix: topicPrefix, partitions: 1 });
  const acls = kafkaAcls({ topicPrefix, groupPrefix, roles });
  await applyKafkaAcls(admin, acls);
  await aclsInEffect(info, roles, { topicPrefix, groupPrefix });

  // Written whole and renamed into place, as the kubelet swaps a mounted Secret: concurrent specs
  // rewrite the same password file while services started by the others read it.
  const file = (name: string, content: string) => {
    const path = join(dir, name);
    const staged = `${path}.${randomUUID()}`;
    writeFileSync(staged, content, { mode: 0o600 });
    renameSync(staged, path);
    return path;
  };
  const env = (principal: string, mechanism: Mechanism, overrides: Record<string, string> = {}) => {
    const tls = { KAFKA_SSL: 'true', KAFKA_SSL_CA_FILE: info.caFile };
    const base: Record<string, string> =
      mechanism === 'mtls'
        ? {
            ...tls,
            KAFKA_BROKERS: info.mtlsBrokers,
            KAFKA_SSL_CERT_FILE: info.clientCerts[principal]?.cert ?? '',
            KAFKA_SSL_KEY_FILE: info.clientCerts[principal]?.key ?? '',
          }
        : mechanism === 'oauth-unsecured'
          ? {
              ...tls,
              // Its own listener: the SASL_SSL one takes no unsigned token (secured-kafka.int.test.ts).
              KAFKA_BROKERS: info.oauthBrokers,
              KAFKA_SASL_MECHANISM: 'oauthbearer',
              KAFKA_OAUTH_PROVIDER: 'unsecured',
              KAFKA_OAUTH_SUBJECT: principal,
            }
          : {
              ...tls,
              KAFKA_BROKERS: info.brokers,
              KAFKA_SASL_MECHANISM: mechanism,
              KAFKA_SASL_USERNAME: principal,
              KAFKA_SASL_PASSWORD_FILE: file(`${principal}.password`, `${info.passwords[principal] ?? ''}\n`),
            };
    return { ...base, ...overrides };
  };
  return {
    topicPrefix,
    groupPrefix,
    acls,
    admin,
    adminKafka,
    env,
    security: (principal, mechanism, overrides) => kafkaSecurityFromEnv(env(principal, mechanism, overrides)),
    file,
    async cleanup() {
      await deleteKafkaAcls(admin, acls).catch(() => undefined);
      const mine = (await admin.listTopics()).filter((t) => t.startsWith(topicPrefix));
      await admin.deleteTopics({ topics: mine }).catch(() => undefined);
      await admin.disconnect();
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

export interface SecuredDatabaseFixture {
  readonly database: string;
  /** What `db:roles --role-prefix` gets to name these roles. */
  readonly rolePrefix: string;
  readonly migrator: string;
  /** service name -> its runtime role */
  readonly roles: Readonly<Record<string, string>>;
  readonly passwords: Readonly<Record<string, string>>;
  /** As `role`, password in the URL, verify-full against the stack CA. */
  url(role: string, options?: { host?: string; sslmode?: string; ca?: string }): string;
  /** As the super user (client certificate). */
  superuser(): pg.Client;
  cleanup(): Promise<void>;
}

/** A database of its own on the TLS server, with `db:roles`' roles for `services` (schema = service name). */
export async function securedDatabaseFixture(
  infra: SecuredInfra,
  services: readonly string[],
): Promise<SecuredDatabaseFixture> {
  const database = uniqueName('sdb');
  const rolePrefix = `${uniqueName('r')}_`;
  const migrator = `${rolePrefix}migrator`;
  const roles = Object.fromEntries(services.map((s) => [s, `${rolePrefix}${s}`]));
  const passwords = Object.fromEntries([migrator, ...Object.values(roles)].map((r) => [r, `pw-${uniqueName('x')}`]));
  const superUrl = (db: string) => infra.postgres.superuserUrl.replace('/test?', `/${db}?`);
  const superuser = () => clientFor(superUrl(database));
  const admin = clientFor(superUrl('test'));
  await admin.connect();
  await admin.query(`CREATE DATABASE ${quoteIdent(database)}`);
  await admin.end();
  const owner = clientFor(superUrl(database));
  await owner.connect();
  try {
    await ensureDatabaseRoles(owner, {
      database,
      migrator,
      services: services.map((s) => ({ role: roles[s] as string, schema: s })),
      passwords,
    });
  } finally {
    await owner.end();
  }
  return {
    database,
    rolePrefix,
    migrator,
    roles,
    passwords,
    url(role, options = {}) {
      const params = new URLSearchParams({
        sslmode: options.sslmode ?? 'verify-full',
        sslrootcert: options.ca ?? infra.postgres.caFile,
      });
      if ((options.sslmode === 'require' && !options.ca) || options.sslmode === 'disable') params.delete('sslrootcert');
      return `postgres://${role}:${encodeURIComponent(passwords[role] ?? '')}@${options.host ?? '127.0.0.1'}:${infra.postgres.port}/${database}?${params}`;
    },
    superuser,
    async cleanup() {
      const client = clientFor(superUrl('test'));
      await client.connect();
      try {
        await client.query(`DROP DATABASE IF EXISTS ${quoteIdent(database)} WITH (FORCE)`);
        for (const role of [...Object.values(roles), migrator]) {
          await client.query(`DROP ROLE IF EXISTS ${quoteIdent(role)}`);
        }
      } finally {
        await client.end();
      }
    },
  };
}

/** A client for a URL that carries sslmode and friends, read the way services read it. */
/** A service's migrations into its schema, as the migrator, granting its runtime role what it needs. */
export async function migrateService(db: SecuredDatabaseFixture, service: string): Promise<void> {
  await migrate({
    databaseUrl: db.url(db.migrator),
    schema: service,
    dir: join(import.meta.dirname, '..', '..', 'services', service, 'migrations'),
    outbox: true,
    runtimeRole: db.roles[service] as string,
  });
}

export function clientFor(url: string): pg.Client {
  return new pg.Client(pgClientConfig(url));
}
