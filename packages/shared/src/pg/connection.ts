/**
 * How every pool, relay connection and migration reaches PostgreSQL: DATABASE_URL plus TLS and a
 * password file (config.ts, PostgresSecurityConfigSchema).
 *
 * node-postgres gives `sslmode` meanings of its own: `prefer`, `require` and `verify-ca` all mean
 * verify-full to it (with a deprecation warning), `prefer` never falls back to plaintext, and it
 * adds `no-verify`. An operator who writes a libpq connection string means libpq's modes, so we
 * read `sslmode` (in DATABASE_URL or DATABASE_SSL_MODE) ourselves, with libpq's meanings, and hand
 * node-postgres explicit TLS options; it never sees an `ssl*` parameter. The ones node-postgres
 * cannot honour stop the start with a reason:
 *
 *   disable      no TLS
 *   allow/prefer refused: libpq falls back between TLS and plaintext; node-postgres cannot, and a
 *                silent downgrade is what these modes risk anyway
 *   require      TLS, the server not verified; as in libpq, with a CA file it verifies the chain (verify-ca)
 *   verify-ca    TLS, the chain verified against DATABASE_SSL_CA_FILE (required), any host name
 *   verify-full  TLS, chain and host name verified, against DATABASE_SSL_CA_FILE or else the system
 *                trust store (libpq's sslrootcert=system)
 *   no-verify    refused: node-postgres's own; `require` is the libpq spelling
 *
 * libpq's environment variables (PGSSLMODE, PGSSLROOTCERT) are not read: DATABASE_SSL_* say it.
 */
import { checkServerIdentity as defaultCheckServerIdentity, type ConnectionOptions } from 'node:tls';
import type pg from 'pg';
import { parse } from 'pg-connection-string';
import { ConfigError } from '../config.js';
import { readPemFile, readSecretFile, type Env, type ReadFile, readTextFile } from '../security/secrets.js';
import { TLS_TRUST_CODES, TLS_VALIDITY_CODES } from '../security/tls-errors.js';

export type SslMode = 'disable' | 'require' | 'verify-ca' | 'verify-full';

export interface PgConnectionSettings {
  readonly sslMode: SslMode;
  readonly caFile?: string;
  readonly certFile?: string;
  readonly keyFile?: string;
  readonly passwordFile?: string;
}

const SSL_PARAMS = ['sslmode', 'sslrootcert', 'sslcert', 'sslkey', 'ssl', 'uselibpqcompat', 'sslpassword'];

/** The DATABASE_SSL_* and DATABASE_PASSWORD_FILE settings of this process; no URL needed yet. */
export function pgSettingsFromEnv(env: Env = process.env): Omit<PgConnectionSettings, 'sslMode'> & {
  readonly sslMode?: string;
} {
  const value = (name: string) => (env[name] ?? '').trim();
  return {
    ...(value('DATABASE_SSL_MODE') ? { sslMode: value('DATABASE_SSL_MODE') } : {}),
    ...(value('DATABASE_SSL_CA_FILE') ? { caFile: value('DATABASE_SSL_CA_FILE') } : {}),
    ...(value('DATABASE_SSL_CERT_FILE') ? { certFile: value('DATABASE_SSL_CERT_FILE') } : {}),
    ...(value('DATABASE_SSL_KEY_FILE') ? { keyFile: value('DATABASE_SSL_KEY_FILE') } : {}),
    ...(value('DATABASE_PASSWORD_FILE') ? { passwordFile: value('DATABASE_PASSWORD_FILE') } : {}),
  };
}

/**
 * The settings for `connectionString`: its `ssl*` parameters and the DATABASE_SSL_* variables
 * together. The same setting in both must agree; each file must be readable.
 */
export function resolvePgSettings(
  connectionString: string,
  fromEnv: ReturnType<typeof pgSettingsFromEnv> = pgSettingsFromEnv(),
): PgConnectionSettings {
  const url = parseUrl(connectionString);
  const param = (name: string) => url.searchParams.get(name) ?? undefined;
  // Parameter names are case-sensitive: node-postgres would ignore `SSLMODE=verify-full` and connect
  // in clear text, and libpq refuses it. Any TLS-looking name we do not read exactly is refused.
  for (const name of url.searchParams.keys()) {
    const lower = name.toLowerCase();
    if ((lower.startsWith('ssl') || lower === 'uselibpqcompat') && !SSL_PARAMS.includes(name)) {
      throw new ConfigError(
        `invalid configuration: DATABASE_URL has a parameter "${name}" that is not one we read; parameter names are case-sensitive (sslmode, sslrootcert, sslcert, sslkey)`,
      );
    }
  }
  for (const name of ['ssl', 'uselibpqcompat', 'sslpassword']) {
    if (param(name) !== undefined) {
      throw new ConfigError(
        `invalid configuration: DATABASE_URL's "${name}" parameter is node-postgres's own; say it with sslmode (libpq meanings) or DATABASE_SSL_* (docs/operations.md)`,
      );
    }
  }
  const pick = (urlName: string, envName: string, fromVariable: string | undefined) => {
    const inUrl = param(urlName);
    if (inUrl !== undefined && fromVariable !== undefined && inUrl !== fromVariable) {
      throw new ConfigError(`invalid configuration: DATABASE_URL's ${urlName} and ${envName} disagree; set one`);
    }
    return inUrl ?? fromVariable;
  };
  const mode = pick('sslmode', 'DATABASE_SSL_MODE', fromEnv.sslMode) ?? 'disable';
  const caFile = pick('sslrootcert', 'DATABASE_SSL_CA_FILE', fromEnv.caFile);
  const certFile = pick('sslcert', 'DATABASE_SSL_CERT_FILE', fromEnv.certFile);
  const keyFile = pick('sslkey', 'DATABASE_SSL_KEY_FILE', fromEnv.keyFile);
  switch (mode) {
    case 'disable':
    case 'require':
    case 'verify-ca':
    case 'verify-full':
      break;
    case 'allow':
    case 'prefer':
      throw new ConfigError(
        `invalid configuration: sslmode=${mode} falls back between TLS and plaintext in libpq, which node-postgres cannot do; use disable, require, verify-ca or verify-full (verify-full in production)`,
      );
    case 'no-verify':
      throw new ConfigError(
        'invalid configuration: sslmode=no-verify is node-postgres-only; libpq spells TLS without verification "require"',
      );
    default:
      throw new ConfigError(
        `invalid configuration: sslmode "${mode}" is not one of disable, require, verify-ca, verify-full`,
      );
  }
  if (mode === 'verify-ca' && caFile === undefined) {
    throw new ConfigError(
      'invalid configuration: sslmode=verify-ca needs DATABASE_SSL_CA_FILE: against the system trust store it would accept any certificate a public CA issued',
    );
  }
  if ((certFile === undefined) !== (keyFile === undefined)) {
    throw new ConfigError('invalid configuration: DATABASE_SSL_CERT_FILE and DATABASE_SSL_KEY_FILE go together');
  }
  if (mode === 'disable' && (caFile ?? certFile) !== undefined) {
    throw new ConfigError('invalid configuration: a CA or client certificate is set, but sslmode is disable');
  }
  if (fromEnv.passwordFile !== undefined && url.password !== '') {
    throw new ConfigError(
      'invalid configuration: DATABASE_URL carries a password and DATABASE_PASSWORD_FILE is set; keep one',
    );
  }
  return {
    sslMode: mode,
    ...(caFile !== undefined ? { caFile } : {}),
    ...(certFile !== undefined ? { certFile } : {}),
    ...(keyFile !== undefined ? { keyFile } : {}),
    ...(fromEnv.passwordFile !== undefined ? { passwordFile: fromEnv.passwordFile } : {}),
  };
}

/** node-postgres TLS options with libpq's meaning of `settings.sslMode`; false for disable. */
export function tlsOptions(
  settings: PgConnectionSettings,
  readFile: ReadFile = readTextFile,
): ConnectionOptions | false {
  if (settings.sslMode === 'disable') return false;
  const options: { -readonly [K in keyof ConnectionOptions]: ConnectionOptions[K] } = {};
  if (settings.caFile) options.ca = readPemFile('DATABASE_SSL_CA_FILE', settings.caFile, readFile);
  if (settings.certFile && settings.keyFile) {
    options.cert = readPemFile('DATABASE_SSL_CERT_FILE', settings.certFile, readFile);
    options.key = readPemFile('DATABASE_SSL_KEY_FILE', settings.keyFile, readFile);
  }
  if (settings.sslMode === 'require' && !settings.caFile) {
    // libpq: encrypted, but nothing verified.
    options.rejectUnauthorized = false;
  } else if (settings.sslMode === 'require' || settings.sslMode === 'verify-ca') {
    // The chain is verified (rejectUnauthorized stays true); the name on the certificate is not.
    options.checkServerIdentity = () => undefined;
  } else {
    options.checkServerIdentity = defaultCheckServerIdentity;
  }
  return options;
}

/** Whether these settings leave the server unverified (worth a warning at start). */
export function unverifiedTls(settings: PgConnectionSettings): boolean {
  return settings.sslMode === 'require' && !settings.caFile;
}

/**
 * A node-postgres client config for `connectionString` with our TLS meanings and the password file;
 * pass it to pg.Pool, pg.Client or node-pg-migrate instead of the bare string. Every setting of the
 * URL other than `ssl*` keeps node-postgres's meaning (it is parsed by node-postgres's own parser).
 */
export function pgClientConfig(
  connectionString: string,
  settings: PgConnectionSettings = resolvePgSettings(connectionString),
  readFile: ReadFile = readTextFile,
): pg.ClientConfig {
  const url = parseUrl(connectionString);
  for (const name of SSL_PARAMS) url.searchParams.delete(name);
  const { password, ssl: _ssl, port, host, database, ...rest } = parse(url.toString());
  const passwordFile = settings.passwordFile;
  const config: pg.ClientConfig = {
    // The URL's other parameters (application_name, options, ...) as node-postgres reads them.
    ...(rest as Record<string, unknown>),
    ...(host ? { host } : {}),
    ...(port ? { port: Number(port) } : {}),
    ...(database ? { database } : {}),
    ssl: tlsOptions(settings, readFile),
    // Read for every new connection: a rotated Secret needs no restart.
    ...(passwordFile
      ? { password: () => readSecretFile('DATABASE_PASSWORD_FILE', passwordFile, readFile) }
      : password
        ? { password }
        : {}),
  };
  return config;
}

function parseUrl(connectionString: string): URL {
  try {
    return new URL(connectionString);
  } catch {
    throw new ConfigError('invalid configuration: DATABASE_URL is not a URL');
  }
}

/**
 * A PostgreSQL failure at start, in words an operator can act on, when retrying cannot fix it
 * (credentials, certificates, rights, a missing database); undefined for the rest (the server not
 * answering yet), which readiness reports until it does. Server messages name the user, host and
 * database, never the password.
 */
export function explainPgError(
  error: unknown,
): { failure: 'authentication' | 'tls' | 'authorization' | 'configuration'; message: string } | undefined {
  const { code, message = '' } = (error ?? {}) as { code?: string; message?: string };
  switch (code) {
    case '28P01':
    case '28000':
      return {
        failure: 'authentication',
        message: `postgres: the server refused us (${code}): ${message}. Check the user in DATABASE_URL, DATABASE_PASSWORD_FILE and the client certificate`,
      };
    case '42501':
      return { failure: 'authorization', message: `postgres: permission denied (42501): ${message}` };
    case '3D000':
      return { failure: 'configuration', message: `postgres: ${message} (3D000); check DATABASE_URL` };
    case 'ERR_TLS_CERT_ALTNAME_INVALID':
      return {
        failure: 'tls',
        message: `postgres: the server's certificate does not name the host in DATABASE_URL (sslmode=verify-full): ${message}`,
      };
    default:
      break;
  }
  if (code && (TLS_TRUST_CODES.has(code) || TLS_VALIDITY_CODES.has(code))) {
    return {
      failure: 'tls',
      message: `postgres: the server's certificate is not trusted (${code}); check DATABASE_SSL_CA_FILE (or sslrootcert)`,
    };
  }
  if (/does not support SSL/i.test(message)) {
    return { failure: 'tls', message: `postgres: ${message}; the server has TLS off, and sslmode asks for it` };
  }
  return undefined;
}
