/**
 * Secret files as an operator (or a careless editor) writes them, on the real file system: what is
 * one value, and what stops the start with a message naming the variable and never the value.
 */
import { mkdtempSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { ConfigError } from '../config.js';
import { readSecret, readSecretFile } from './secrets.js';

const dir = mkdtempSync(join(tmpdir(), 'secrets-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

let n = 0;
function file(content: string | Buffer): string {
  const path = join(dir, `secret-${n++}`);
  writeFileSync(path, content);
  return path;
}

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
