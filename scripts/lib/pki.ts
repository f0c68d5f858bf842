/**
 * The local test PKI of the secured stack, made with `openssl` (EC P-256, ten years): a CA that
 * signs the broker's and PostgreSQL's server certificates and one client certificate per principal
 * (CN = the principal, for mutual TLS), plus a second, untrusted CA with a client certificate of
 * its own, for the tests that must be refused. Made once per directory; a changed list of
 * principals makes it again.
 *
 * Nothing here is a secret worth protecting: it is test material under .infra/ (git-ignored).
 */
import { spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';

export class PkiError extends Error {
  override readonly name = 'PkiError';
}

export interface CertificatePair {
  readonly cert: string;
  readonly key: string;
}

export interface Pki {
  readonly dir: string;
  readonly ca: CertificatePair;
  /** A CA nothing trusts: a server or client certificate it signs must be refused. */
  readonly untrustedCa: CertificatePair;
  /** For 127.0.0.1 and localhost; `pem` holds key and certificate together (Kafka's PEM keystore). */
  readonly kafkaBroker: CertificatePair & { readonly pem: string };
  /** For 127.0.0.1 only: connecting as `localhost` is a host-name mismatch (the verify-full test). */
  readonly postgresServer: CertificatePair;
  /** Client certificates signed by `ca`, CN = the name. */
  readonly clients: Readonly<Record<string, CertificatePair>>;
  /** A client certificate with CN `sender`, signed by `untrustedCa`. */
  readonly rogueClient: CertificatePair;
}

const VERSION = 1;

function openssl(args: string[], cwd: string): void {
  const result = spawnSync('openssl', args, { cwd, encoding: 'utf8' });
  if (result.error) {
    throw new PkiError(
      'openssl was not found; the secured stack makes its test certificates with it (apt-get install openssl), or set INFRA_SECURED=off',
    );
  }
  if (result.status !== 0) throw new PkiError(`openssl ${args[0]} failed: ${result.stderr.trim()}`);
}

function newKey(dir: string, name: string): void {
  openssl(['genpkey', '-algorithm', 'EC', '-pkeyopt', 'ec_paramgen_curve:P-256', '-out', `${name}.key`], dir);
}

function newCa(dir: string, name: string, subject: string): void {
  newKey(dir, name);
  openssl(
    [
      'req',
      '-x509',
      '-new',
      '-key',
      `${name}.key`,
      '-out',
      `${name}.crt`,
      '-days',
      '3650',
      '-subj',
      subject,
      '-addext',
      'basicConstraints=critical,CA:TRUE',
      '-addext',
      'keyUsage=critical,keyCertSign,cRLSign',
    ],
    dir,
  );
}

function newLeaf(dir: string, name: string, commonName: string, ca: string, altNames?: string): void {
  newKey(dir, name);
  openssl(['req', '-new', '-key', `${name}.key`, '-out', `${name}.csr`, '-subj', `/CN=${commonName}`], dir);
  const ext = [
    'basicConstraints=CA:FALSE',
    'keyUsage=critical,digitalSignature,keyEncipherment',
    'extendedKeyUsage=serverAuth,clientAuth',
    ...(altNames ? [`subjectAltName=${altNames}`] : []),
  ].join('\n');
  writeFileSync(join(dir, `${name}.ext`), `${ext}\n`);
  openssl(
    [
      'x509',
      '-req',
      '-in',
      `${name}.csr`,
      '-CA',
      `${ca}.crt`,
      '-CAkey',
      `${ca}.key`,
      '-CAcreateserial',
      '-out',
      `${name}.crt`,
      '-days',
      '3650',
      '-extfile',
      `${name}.ext`,
    ],
    dir,
  );
  rmSync(join(dir, `${name}.csr`));
  rmSync(join(dir, `${name}.ext`));
}

function pair(dir: string, name: string): CertificatePair {
  return { cert: join(dir, `${name}.crt`), key: join(dir, `${name}.key`) };
}

export function pkiPaths(dir: string, clients: readonly string[]): Pki {
  return {
    dir,
    ca: pair(dir, 'ca'),
    untrustedCa: pair(dir, 'untrusted-ca'),
    kafkaBroker: { ...pair(dir, 'kafka-broker'), pem: join(dir, 'kafka-broker.pem') },
    postgresServer: pair(dir, 'postgres-server'),
    clients: Object.fromEntries(clients.map((c) => [c, pair(dir, `client-${c}`)])),
    rogueClient: pair(dir, 'rogue-client'),
  };
}

/**
 * The PKI in `dir`, made (again) unless it is complete for these client names; `fresh` says it was
 * just made, so servers still holding the old certificates must restart.
 */
export function ensurePki(dir: string, clients: readonly string[]): Pki & { readonly fresh: boolean } {
  const stamp = join(dir, '.complete');
  const wanted = JSON.stringify({ version: VERSION, clients: [...clients].sort() });
  if (existsSync(stamp) && readFileSync(stamp, 'utf8') === wanted) return { ...pkiPaths(dir, clients), fresh: false };
  rmSync(dir, { recursive: true, force: true });
  mkdirSync(dir, { recursive: true });
  newCa(dir, 'ca', '/CN=outreach local test CA');
  newCa(dir, 'untrusted-ca', '/CN=an untrusted CA');
  newLeaf(dir, 'kafka-broker', 'localhost', 'ca', 'DNS:localhost,IP:127.0.0.1');
  writeFileSync(
    join(dir, 'kafka-broker.pem'),
    readFileSync(join(dir, 'kafka-broker.key'), 'utf8') + readFileSync(join(dir, 'kafka-broker.crt'), 'utf8'),
  );
  newLeaf(dir, 'postgres-server', '127.0.0.1', 'ca', 'IP:127.0.0.1');
  for (const client of clients) newLeaf(dir, `client-${client}`, client, 'ca');
  newLeaf(dir, 'rogue-client', 'sender', 'untrusted-ca');
  writeFileSync(stamp, wanted);
  return { ...pkiPaths(dir, clients), fresh: true };
}
