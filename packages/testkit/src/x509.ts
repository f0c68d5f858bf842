/**
 * Self-signed X.509 certificates for tests, built with node:crypto alone. Node can make keys but not
 * certificates, and the tests that verify a signer's certificate (SNS signing certificates, TLS
 * peers) should not depend on an `openssl` binary being installed: this writes the few DER
 * structures a certificate needs (RFC 5280 §4.1) and signs them with the generated key.
 */
import { createPublicKey, generateKeyPairSync, sign, type KeyObject } from 'node:crypto';

export interface TestCertificateOptions {
  /** Subject and issuer CN (self-signed). */
  readonly commonName?: string;
  readonly notBefore?: Date;
  readonly notAfter?: Date;
  /** `rsa` (2048 bits, sha256WithRSAEncryption) or `ec` (P-256, ecdsa-with-SHA256). */
  readonly keyType?: 'rsa' | 'ec';
  /** Reuse a key pair (key generation is the slow part); its type must match `keyType`. */
  readonly privateKey?: KeyObject;
  readonly serial?: number;
}

export interface TestCertificate {
  readonly certificatePem: string;
  readonly privateKey: KeyObject;
  readonly publicKey: KeyObject;
}

const OID = {
  commonName: '2.5.4.3',
  sha256WithRsa: '1.2.840.113549.1.1.11',
  ecdsaWithSha256: '1.2.840.10045.4.3.2',
};

export function selfSignedCertificate(options: TestCertificateOptions = {}): TestCertificate {
  const keyType = options.keyType ?? 'rsa';
  const privateKey =
    options.privateKey ??
    (keyType === 'rsa'
      ? generateKeyPairSync('rsa', { modulusLength: 2048 }).privateKey
      : generateKeyPairSync('ec', { namedCurve: 'prime256v1' }).privateKey);
  // createPublicKey of a private key is its public half.
  const publicKey = createPublicKey(privateKey);
  const algorithm =
    keyType === 'rsa'
      ? sequence(oid(OID.sha256WithRsa), tlv(0x05, Buffer.alloc(0)))
      : sequence(oid(OID.ecdsaWithSha256));
  const name = sequence(
    set(sequence(oid(OID.commonName), tlv(0x0c, Buffer.from(options.commonName ?? 'test', 'utf8')))),
  );
  const notBefore = options.notBefore ?? new Date(Date.UTC(2020, 0, 1));
  const notAfter = options.notAfter ?? new Date(Date.UTC(2099, 0, 1));
  const tbs = sequence(
    tlv(0xa0, integer(Buffer.from([2]))),
    integer(Buffer.from((options.serial ?? 1).toString(16).padStart(8, '0'), 'hex')),
    algorithm,
    name,
    sequence(time(notBefore), time(notAfter)),
    name,
    publicKey.export({ type: 'spki', format: 'der' }),
  );
  const signature = sign('sha256', tbs, privateKey);
  const der = sequence(tbs, algorithm, tlv(0x03, Buffer.concat([Buffer.from([0]), signature])));
  const body = der.toString('base64').replace(/.{1,64}/g, '$&\n');
  return { certificatePem: `-----BEGIN CERTIFICATE-----\n${body}-----END CERTIFICATE-----\n`, privateKey, publicKey };
}

function length(n: number): Buffer {
  if (n < 0x80) return Buffer.from([n]);
  const bytes: number[] = [];
  for (let rest = n; rest > 0; rest = Math.floor(rest / 256)) bytes.unshift(rest % 256);
  return Buffer.from([0x80 | bytes.length, ...bytes]);
}

function tlv(tag: number, content: Buffer): Buffer {
  return Buffer.concat([Buffer.from([tag]), length(content.length), content]);
}

function sequence(...items: Buffer[]): Buffer {
  return tlv(0x30, Buffer.concat(items));
}

function set(...items: Buffer[]): Buffer {
  return tlv(0x31, Buffer.concat(items));
}

function integer(bytes: Buffer): Buffer {
  let start = 0;
  while (start < bytes.length - 1 && bytes[start] === 0 && ((bytes[start + 1] as number) & 0x80) === 0) start++;
  const trimmed = bytes.subarray(start);
  return tlv(0x02, ((trimmed[0] as number) & 0x80) !== 0 ? Buffer.concat([Buffer.from([0]), trimmed]) : trimmed);
}

function oid(dotted: string): Buffer {
  const [first = 0, second = 0, ...rest] = dotted.split('.').map(Number);
  const out: number[] = [first * 40 + second];
  for (const arc of rest) {
    const groups: number[] = [];
    for (let value = arc; ; value = Math.floor(value / 128)) {
      groups.unshift(value % 128);
      if (value < 128) break;
    }
    groups.forEach((g, i) => out.push(i < groups.length - 1 ? g | 0x80 : g));
  }
  return tlv(0x06, Buffer.from(out));
}

/** UTCTime through 2049, GeneralizedTime after (RFC 5280 §4.1.2.5). */
function time(at: Date): Buffer {
  const iso = at.toISOString().replace(/[-:T]/g, '').slice(0, 14);
  return at.getUTCFullYear() < 2050 ? tlv(0x17, Buffer.from(`${iso.slice(2)}Z`)) : tlv(0x18, Buffer.from(`${iso}Z`));
}
