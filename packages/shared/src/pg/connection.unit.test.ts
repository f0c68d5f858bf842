import { describe, expect, it } from 'vitest';
import { ConfigError } from '../config.js';
import { readFromTable } from '@outreach/testkit';
import {
  explainPgError,
  pgClientConfig,
  resolvePgSettings,
  tlsOptions,
  type PgConnectionSettings,
} from './connection.js';

const files: Record<string, string> = {
  '/s/ca.pem': '-----BEGIN CERTIFICATE-----\nca\n-----END CERTIFICATE-----\n',
  '/s/client.pem': '-----BEGIN CERTIFICATE-----\nclient\n-----END CERTIFICATE-----\n',
  '/s/client.key': '-----BEGIN PRIVATE KEY-----\nkey\n-----END PRIVATE KEY-----\n',
  '/s/password': 'rotated-pw\n',
};
const readFile = readFromTable(files);
const url = 'postgres://sender@db.internal:5432/outreach';
const settings = (connectionString: string, env: Record<string, string> = {}) =>
  resolvePgSettings(connectionString, {
    ...(env.DATABASE_SSL_MODE ? { sslMode: env.DATABASE_SSL_MODE } : {}),
    ...(env.DATABASE_SSL_CA_FILE ? { caFile: env.DATABASE_SSL_CA_FILE } : {}),
    ...(env.DATABASE_PASSWORD_FILE ? { passwordFile: env.DATABASE_PASSWORD_FILE } : {}),
  });
const refusal = (run: () => unknown) => {
  try {
    run();
  } catch (error) {
    expect(error).toBeInstanceOf(ConfigError);
    return (error as Error).message;
  }
  throw new Error('no ConfigError');
};
const tls = (s: PgConnectionSettings) => tlsOptions(s, readFile);

describe('PostgreSQL TLS with libpq meanings', () => {
  it('is off unless asked for', () => {
    expect(settings(url)).toEqual({ sslMode: 'disable' });
    expect(tls(settings(url))).toBe(false);
  });

  it('verify-full checks the chain and the host name, against the CA file', () => {
    const options = tls(settings(`${url}?sslmode=verify-full&sslrootcert=/s/ca.pem`));
    expect(options).toMatchObject({ ca: files['/s/ca.pem'] });
    expect(options && options.rejectUnauthorized).toBeUndefined();
    // The default identity check: a certificate for another host is refused.
    const check = options ? options.checkServerIdentity : undefined;
    expect(
      check?.('db.internal', { subject: { CN: 'other.host' }, subjectaltname: 'DNS:other.host' } as never),
    ).toBeInstanceOf(Error);
  });

  it('verify-ca checks the chain but not the name, and needs a CA file', () => {
    const options = tls(settings(url, { DATABASE_SSL_MODE: 'verify-ca', DATABASE_SSL_CA_FILE: '/s/ca.pem' }));
    expect(options && options.rejectUnauthorized).toBeUndefined();
    expect(options && options.checkServerIdentity?.('db.internal', {} as never)).toBeUndefined();
    expect(refusal(() => settings(`${url}?sslmode=verify-ca`))).toMatch(/verify-ca needs DATABASE_SSL_CA_FILE/);
  });

  it('require encrypts without verifying, as in libpq, unless a CA file is given (then it is verify-ca)', () => {
    expect(tls(settings(`${url}?sslmode=require`))).toEqual({ rejectUnauthorized: false });
    const withCa = tls(settings(`${url}?sslmode=require&sslrootcert=/s/ca.pem`));
    expect(withCa && withCa.rejectUnauthorized).toBeUndefined();
    expect(withCa && withCa.checkServerIdentity?.('x', {} as never)).toBeUndefined();
  });

  it("refuses the modes node-postgres reads differently or cannot honour, and node-postgres's own parameters", () => {
    expect(refusal(() => settings(`${url}?sslmode=prefer`))).toMatch(/falls back between TLS and plaintext/);
    expect(refusal(() => settings(url, { DATABASE_SSL_MODE: 'allow' }))).toMatch(/falls back/);
    expect(refusal(() => settings(`${url}?sslmode=no-verify`))).toMatch(/node-postgres-only/);
    expect(refusal(() => settings(`${url}?ssl=true`))).toMatch(/"ssl" parameter is node-postgres's own/);
    expect(refusal(() => settings(`${url}?uselibpqcompat=true&sslmode=require`))).toMatch(/uselibpqcompat/);
    expect(refusal(() => settings(`${url}?sslmode=require`, { DATABASE_SSL_MODE: 'verify-full' }))).toMatch(
      /sslmode and DATABASE_SSL_MODE disagree/,
    );
    expect(refusal(() => settings(url, { DATABASE_SSL_CA_FILE: '/s/ca.pem' }))).toMatch(/sslmode is disable/);
  });

  it('refuses TLS parameters in another case, which node-postgres would ignore and connect in clear text', () => {
    // Found by an attack: ?SSLMODE=verify-full resolved to disable, and the connection had no TLS.
    for (const spelling of [
      'SSLMODE=verify-full',
      'sslMode=verify-full',
      'Ssl=true',
      'SSLROOTCERT=/ca.pem',
      'UseLibpqCompat=true',
    ])
      expect(
        refusal(() => settings(`${url}?${spelling}`)),
        spelling,
      ).toMatch(/case-sensitive/);
  });

  it('hands node-postgres no ssl* parameter, keeps the rest of the URL, and reads the password file per connection', async () => {
    const config = pgClientConfig(
      'postgres://sender@db.internal:6432/outreach?sslmode=verify-full&sslrootcert=/s/ca.pem&application_name=x&options=-c%20statement_timeout%3D5000',
      settings('postgres://sender@db.internal:6432/outreach?sslmode=verify-full&sslrootcert=/s/ca.pem', {
        DATABASE_PASSWORD_FILE: '/s/password',
      }),
      readFile,
    );
    expect(config).toMatchObject({
      host: 'db.internal',
      port: 6432,
      database: 'outreach',
      user: 'sender',
      application_name: 'x',
      options: '-c statement_timeout=5000',
    });
    expect(config.connectionString).toBeUndefined();
    expect(Object.keys(config)).not.toContain('sslmode');
    expect(Object.keys(config)).not.toContain('sslrootcert');
    expect(typeof config.password).toBe('function');
    expect(await (config.password as () => string)()).toBe('rotated-pw');
    files['/s/password'] = 'next-pw\n';
    expect(await (config.password as () => string)()).toBe('next-pw');
    expect(refusal(() => settings('postgres://u:inline@h/db', { DATABASE_PASSWORD_FILE: '/s/password' }))).toMatch(
      /carries a password and DATABASE_PASSWORD_FILE is set/,
    );
  });
});

describe('PostgreSQL failures at start', () => {
  it('names what retrying cannot fix, and leaves the rest to readiness', () => {
    expect(
      explainPgError({ code: '28P01', message: 'password authentication failed for user "sender"' }),
    ).toMatchObject({
      failure: 'authentication',
    });
    expect(
      explainPgError({ code: 'SELF_SIGNED_CERT_IN_CHAIN', message: 'self-signed certificate in certificate chain' }),
    ).toMatchObject({
      failure: 'tls',
      message: expect.stringMatching(/DATABASE_SSL_CA_FILE/),
    });
    expect(
      explainPgError({ code: 'ERR_TLS_CERT_ALTNAME_INVALID', message: 'Hostname/IP does not match' })?.failure,
    ).toBe('tls');
    expect(explainPgError({ code: 'ECONNREFUSED', message: 'connect ECONNREFUSED' })).toBeUndefined();
  });
});
