import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { ConfigError } from './config.js';
import { emailHash } from '@outreach/contracts';
import { loadEmailHashKey } from './email-hash-key.js';

const KEY = 'k'.repeat(32);
const config = (fields: Partial<Record<'EMAIL_HASH_KEY_FILE' | 'EMAIL_HASH_KEY' | 'EMAIL_HASH_KEY_ID', string>>) => ({
  EMAIL_HASH_KEY_FILE: '',
  EMAIL_HASH_KEY: '',
  EMAIL_HASH_KEY_ID: '',
  ...fields,
});

describe('loadEmailHashKey', () => {
  it('reads the key from a file (surrounding whitespace ignored) and hashes as the inline key does', () => {
    const file = join(mkdtempSync(join(tmpdir(), 'email-hash-key-')), 'key');
    writeFileSync(file, `${KEY}\n`);
    const fromFile = loadEmailHashKey(config({ EMAIL_HASH_KEY_FILE: file, EMAIL_HASH_KEY_ID: '2026-01' }));
    const inline = loadEmailHashKey(config({ EMAIL_HASH_KEY: KEY, EMAIL_HASH_KEY_ID: '2026-01' }));
    expect(fromFile.id).toBe('2026-01');
    expect(emailHash('ada@example.com', fromFile)).toBe(emailHash('ada@example.com', inline));
  });

  it.each([
    [config({}), /EMAIL_HASH_KEY_FILE is required/],
    [config({ EMAIL_HASH_KEY: KEY, EMAIL_HASH_KEY_FILE: '/k', EMAIL_HASH_KEY_ID: 'a' }), /not both/],
    [config({ EMAIL_HASH_KEY: 'short', EMAIL_HASH_KEY_ID: 'a' }), /EMAIL_HASH_KEY must be at least 32 bytes/],
    [config({ EMAIL_HASH_KEY: KEY }), /EMAIL_HASH_KEY_ID is required/],
    [
      config({ EMAIL_HASH_KEY_FILE: '/nonexistent/key', EMAIL_HASH_KEY_ID: 'a' }),
      /EMAIL_HASH_KEY_FILE cannot be read \(ENOENT\)/,
    ],
  ])('refuses to start without a usable key: %j', (given, message) => {
    expect(() => loadEmailHashKey(given)).toThrow(ConfigError);
    expect(() => loadEmailHashKey(given)).toThrow(message);
  });

  it.each([
    [
      'binary bytes (not UTF-8)',
      Buffer.from([0x80, ...Buffer.alloc(40, 0xbf)]),
      /cannot be read \(not UTF-8 text: write the key as text/,
    ],
    ['a byte-order mark', `\uFEFF${KEY}\n`, /begins or ends with a space other than an ASCII one/],
    ['two lines', `${KEY}\n${KEY}\n`, /more than one line/],
    ['a NUL byte', `${KEY}\0\n`, /NUL byte/],
    ['a zero-width space', `${KEY}\u200B${KEY}`, /invisible formatting character/],
  ])('refuses a key file holding %s, naming the variable', (_, content, message) => {
    const file = join(mkdtempSync(join(tmpdir(), 'email-hash-key-')), 'key');
    writeFileSync(file, content);
    const load = () => loadEmailHashKey(config({ EMAIL_HASH_KEY_FILE: file, EMAIL_HASH_KEY_ID: 'a' }));
    expect(load).toThrow(ConfigError);
    expect(load).toThrow(message);
    expect(load).toThrow(/EMAIL_HASH_KEY_FILE/);
  });

  it('refuses binary keys, which decoding would collapse into one (0x80… and 0x81… both become U+FFFD…)', () => {
    const dir = mkdtempSync(join(tmpdir(), 'email-hash-key-'));
    const [a, b] = [0x80, 0x81].map((byte, i) => {
      const file = join(dir, `k${i}`);
      writeFileSync(file, Buffer.alloc(40, byte));
      return file;
    });
    for (const file of [a!, b!])
      expect(() => loadEmailHashKey(config({ EMAIL_HASH_KEY_FILE: file, EMAIL_HASH_KEY_ID: 'a' }))).toThrow(
        /not UTF-8 text/,
      );
  });

  it('never puts the key in an error message', () => {
    const secretish = `${'s'.repeat(10)}`;
    expect(() => loadEmailHashKey(config({ EMAIL_HASH_KEY: secretish, EMAIL_HASH_KEY_ID: 'a' }))).not.toThrow(
      secretish,
    );
  });
});
