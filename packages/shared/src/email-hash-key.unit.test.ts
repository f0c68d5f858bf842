import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { ConfigError } from './config.js';
import { emailHash } from './domain/keys.js';
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

  it('never puts the key in an error message', () => {
    const secretish = `${'s'.repeat(10)}`;
    expect(() => loadEmailHashKey(config({ EMAIL_HASH_KEY: secretish, EMAIL_HASH_KEY_ID: 'a' }))).not.toThrow(
      secretish,
    );
  });
});
