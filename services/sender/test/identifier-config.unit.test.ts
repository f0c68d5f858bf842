/**
 * ADR 012, the identifier key settings: what the sender reads at start, and what it refuses (a
 * ConfigError naming the variable, never the key: exit 78).
 */
import { ConfigError } from '@outreach/shared';
import { describe, expect, it } from 'vitest';
import { identifierKeyring, MAX_IDENTIFIER_WINDOW_MS } from '../src/config.js';
import { configOf } from './config-env.js';

const now = Date.parse('2026-03-01T00:00:00Z');
const KEY = 'a'.repeat(64);
const PREVIOUS = 'b'.repeat(64);
const files: Record<string, string> = { '/keys/current': `${KEY}\n`, '/keys/previous': `${PREVIOUS}\n` };
const read = (path: string) => {
  const text = files[path];
  if (text === undefined) throw Object.assign(new Error('no such file'), { code: 'ENOENT' });
  return text;
};
const ring = (env: Record<string, string>) => identifierKeyring(configOf(env), now, read);
const rotation = {
  IDENTIFIER_KEY: '',
  IDENTIFIER_KEY_FILE: '/keys/current',
  IDENTIFIER_KEY_ID: '2026-03',
  IDENTIFIER_PREVIOUS_KEY_FILE: '/keys/previous',
  IDENTIFIER_PREVIOUS_KEY_ID: '2026-01',
  IDENTIFIER_PREVIOUS_KEY_UNTIL: '2026-03-08T00:00:00Z',
};

describe('IDENTIFIER_KEY[_FILE], IDENTIFIER_KEY_ID and the previous key', () => {
  it('reads the current key, and the previous one with the end of its window', () => {
    expect(ring({ IDENTIFIER_KEY: '', IDENTIFIER_KEY_FILE: '/keys/current', IDENTIFIER_KEY_ID: 'k1' })).toEqual({
      current: { id: 'k1', material: Buffer.from(KEY) },
    });
    expect(ring(rotation)).toEqual({
      current: { id: '2026-03', material: Buffer.from(KEY) },
      previous: { id: '2026-01', material: Buffer.from(PREVIOUS), until: Date.parse('2026-03-08T00:00:00Z') },
    });
    // A window already over still starts (the service logs it); the key then verifies nothing.
    expect(ring({ ...rotation, IDENTIFIER_PREVIOUS_KEY_UNTIL: '2026-02-01T00:00:00+01:00' }).previous?.until).toBe(
      Date.parse('2026-01-31T23:00:00Z'),
    );
  });

  it.each([
    [{ IDENTIFIER_KEY: '' }, /IDENTIFIER_KEY_FILE is required/],
    [{ IDENTIFIER_KEY_FILE: '/keys/current' }, /set IDENTIFIER_KEY_FILE or IDENTIFIER_KEY, not both/],
    [{ IDENTIFIER_KEY: 'short' }, /the key in IDENTIFIER_KEY must be at least 32 bytes/],
    [{ IDENTIFIER_KEY_ID: '' }, /IDENTIFIER_KEY_ID is required/],
    [{ IDENTIFIER_KEY: '', IDENTIFIER_KEY_FILE: '/keys/none' }, /IDENTIFIER_KEY_FILE cannot be read \(ENOENT\)/],
    [{ IDENTIFIER_PREVIOUS_KEY_ID: 'old' }, /need IDENTIFIER_PREVIOUS_KEY_FILE/],
    [
      { ...rotation, IDENTIFIER_PREVIOUS_KEY_UNTIL: '' },
      /needs IDENTIFIER_PREVIOUS_KEY_ID and IDENTIFIER_PREVIOUS_KEY_UNTIL/,
    ],
    [{ ...rotation, IDENTIFIER_PREVIOUS_KEY_ID: '2026-03' }, /must differ from IDENTIFIER_KEY_ID/],
    [{ ...rotation, IDENTIFIER_PREVIOUS_KEY_FILE: '/keys/current' }, /the same key as IDENTIFIER_KEY/],
    [{ ...rotation, IDENTIFIER_PREVIOUS_KEY_UNTIL: '2026-03-08' }, /ISO 8601 instant with its zone/],
    [{ ...rotation, IDENTIFIER_PREVIOUS_KEY_UNTIL: 'next week' }, /ISO 8601 instant with its zone/],
    [{ ...rotation, IDENTIFIER_PREVIOUS_KEY_UNTIL: '2026-02-30T00:00:00Z' }, /ISO 8601 instant/],
    [
      { ...rotation, IDENTIFIER_PREVIOUS_KEY_UNTIL: new Date(now + MAX_IDENTIFIER_WINDOW_MS + 1000).toISOString() },
      /more than 400 days away/,
    ],
  ])('refuses %j at start, naming the variable', (env, message) => {
    expect(() => ring(env)).toThrow(ConfigError);
    expect(() => ring(env)).toThrow(message);
  });

  it.each([['K1'], ['k.1'], ['k_1'], ['-k1'], ['k'.repeat(17)]])(
    'refuses the key id %s (it travels in Message-IDs)',
    (id) => {
      expect(() => configOf({ IDENTIFIER_KEY_ID: id })).toThrow(/IDENTIFIER_KEY_ID/);
    },
  );

  it('never puts a key in an error message', () => {
    for (const env of [{ IDENTIFIER_KEY: 'short-secret-value' }, { IDENTIFIER_KEY: `${KEY}\u200b` }]) {
      expect(() => ring(env)).toThrow(ConfigError);
      expect(() => ring(env)).not.toThrow(/short-secret-value|aaaaaaaa/);
    }
  });
});
