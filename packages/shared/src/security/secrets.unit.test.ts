/**
 * Secret files as an operator (or a careless editor) writes them, on the real file system: what is
 * one value, and what stops the start with a message naming the variable and never the value.
 */
import { execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { ConfigError } from '../config.js';
import { MAX_SECRET_FILE_BYTES, readPemFile, readSecret, readSecretFile } from './secrets.js';

const dir = mkdtempSync(join(tmpdir(), 'secrets-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

let n = 0;
function file(content: string | Buffer): string {
  const path = join(dir, `secret-${n++}`);
  writeFileSync(path, content);
  return path;
}

describe('readPemFile', () => {
  const pem = '-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n';
  it('reads a CA bundle far larger than a password (the system bundle is about 220 KB)', () => {
    const bundle = pem.repeat(Math.ceil(300_000 / pem.length));
    expect(readPemFile('KAFKA_SSL_CA_FILE', file(bundle))).toBe(bundle);
  });
  it('reads a bundle whose comments are not UTF-8 (Latin-1 issuer names): the PEM blocks are ASCII', () => {
    const bundle = Buffer.concat([Buffer.from('# Issuer: Soci\xe9t\xe9\n', 'latin1'), Buffer.from(pem)]);
    expect(readPemFile('KAFKA_SSL_CA_FILE', file(bundle))).toContain(pem);
  });
  it('refuses a FIFO', () => {
    const fifo = join(dir, 'pem-fifo');
    execFileSync('mkfifo', [fifo]);
    expect(() => readPemFile('KAFKA_SSL_CA_FILE', fifo)).toThrowError(
      /KAFKA_SSL_CA_FILE .*cannot be read \(not a regular file\)/,
    );
  });
});

describe('readSecretFile', () => {
  it.each([
    ['no newline', 's3cret'],
    ['one trailing newline', 's3cret\n'],
    ['one trailing CRLF', 's3cret\r\n'],
  ])('reads the value with %s', (_, content) => {
    expect(readSecretFile('X_FILE', file(content))).toBe('s3cret');
  });

  it('keeps inner and edge spaces: they are part of a password', () => {
    expect(readSecretFile('X_FILE', file(' pass word \n'))).toBe(' pass word ');
  });

  it('follows a symbolic link, as a mounted Kubernetes Secret is (..data/key)', () => {
    const target = file('linked\n');
    const link = join(dir, 'link');
    symlinkSync(target, link);
    expect(readSecretFile('X_FILE', link)).toBe('linked');
  });

  const SECRET = 'hunter2-value';
  it.each([
    ['an empty file', '', /is empty/],
    ['a lone newline', '\n', /is empty/],
    ['a byte-order mark', `\uFEFF${SECRET}\n`, /byte-order mark/],
    ['a NUL byte', `${SECRET}\0tail`, /NUL byte/],
    ['two lines', `${SECRET}\nsecond\n`, /more than one line/],
    ['two trailing newlines', `${SECRET}\n\n`, /more than one line/],
    ['a bare CR line end', `${SECRET}\r`, /more than one line/],
    ['a CR inside', `${SECRET}\rrest`, /more than one line/],
  ])('refuses %s, naming the variable and never the value', (_, content, reason) => {
    const path = file(content);
    const thrown = (() => {
      try {
        readSecretFile('KAFKA_SASL_PASSWORD_FILE', path);
      } catch (error) {
        return error;
      }
      return undefined;
    })();
    expect(thrown).toBeInstanceOf(ConfigError);
    const message = (thrown as Error).message;
    expect(message).toMatch(/KAFKA_SASL_PASSWORD_FILE/);
    expect(message).toMatch(reason);
    expect(message).not.toContain(SECRET);
  });

  it.each([
    ['a line separator (U+2028)', `${SECRET}\u2028x`, /more than one line/],
    ['a next-line control (U+0085)', `${SECRET}\u0085x`, /more than one line/],
    [
      'a SASL field separator (\\x01)',
      `${SECRET}\u0001x`,
      /control or invisible formatting character \(at character 14\)/,
    ],
    ['a tab', `${SECRET}\t`, /control or invisible/],
    ['an escape sequence', `\u001b[2J${SECRET}`, /control or invisible formatting character \(at character 1\)/],
    ['a zero-width space', `${SECRET}\u200B`, /control or invisible/],
    ['a soft hyphen', `hunter\u00AD2`, /control or invisible/],
  ])('refuses %s, inline or in a file', (_, value, reason) => {
    expect(() => readSecretFile('X_FILE', file(`${value}\n`))).toThrowError(reason);
    expect(() => readSecret({ KAFKA_SASL_USERNAME: value }, 'KAFKA_SASL_USERNAME')).toThrowError(
      new RegExp(`KAFKA_SASL_USERNAME .*${reason.source}`),
    );
  });

  it('keeps a no-break space: it may be part of a password', () => {
    expect(readSecretFile('X_FILE', file('pass\u00A0word\n'))).toBe('pass\u00A0word');
  });

  it('refuses bytes that are not UTF-8 instead of turning them into U+FFFD', () => {
    expect(() => readSecretFile('X_FILE', file(Buffer.from([0x70, 0x77, 0xff, 0xfe, 0x0a])))).toThrowError(
      /X_FILE .* cannot be read \(not UTF-8 text\)/,
    );
  });

  it('refuses a FIFO at once instead of waiting for a writer', () => {
    const fifo = join(dir, 'fifo');
    execFileSync('mkfifo', [fifo]);
    expect(() => readSecretFile('X_FILE', fifo)).toThrowError(/X_FILE .* cannot be read \(not a regular file\)/);
  });

  it('refuses a device (/dev/zero would fill the memory) and a file over 4 MiB', () => {
    expect(() => readSecretFile('X_FILE', '/dev/zero')).toThrowError(/cannot be read \(not a regular file\)/);
    expect(() => readSecretFile('X_FILE', file('x'.repeat(MAX_SECRET_FILE_BYTES + 1)))).toThrowError(
      /cannot be read \(larger than 4 MiB\)/,
    );
    expect(readSecretFile('X_FILE', file('x'.repeat(MAX_SECRET_FILE_BYTES)))).toHaveLength(MAX_SECRET_FILE_BYTES);
  });

  it('names a missing file by its error code', () => {
    expect(() => readSecretFile('X_FILE', join(dir, 'missing'))).toThrowError(/X_FILE .*ENOENT/);
  });

  it('is what readSecret uses for <NAME>_FILE', () => {
    expect(() => readSecret({ DATABASE_PASSWORD_FILE: file('\uFEFFpw') }, 'DATABASE_PASSWORD')).toThrowError(
      /DATABASE_PASSWORD_FILE .*byte-order mark/,
    );
    expect(readSecret({ DATABASE_PASSWORD_FILE: file('pw\n') }, 'DATABASE_PASSWORD')).toBe('pw');
  });
});
