/**
 * The emailHash key, read once at start. A service that publishes emailHash refuses to start
 * without it (exit 78, naming the variable): an unkeyed hash is reversible with a list of addresses,
 * so there is no fallback to one.
 */
import { createSecretKey } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { Type, type Static } from '@sinclair/typebox';
import { ConfigError } from './config.js';
import type { EmailHashKey } from './domain/keys.js';

/** Spread into a service's config schema (`Type.Object({ ...EmailHashKeyConfigSchema.properties, ... })`). */
export const EmailHashKeyConfigSchema = Type.Object({
  /** A file holding the HMAC key (a mounted secret); surrounding whitespace is ignored. Preferred. */
  EMAIL_HASH_KEY_FILE: Type.String({ default: '' }),
  /** The key itself, for development and tests; exactly one of this and EMAIL_HASH_KEY_FILE. */
  EMAIL_HASH_KEY: Type.String({ default: '' }),
  /** Names the key in every event (`emailHashKeyId`); a new key gets a new id. */
  EMAIL_HASH_KEY_ID: Type.String({ default: '', pattern: '^([A-Za-z0-9][A-Za-z0-9._-]{0,63})?$' }),
});
export type EmailHashKeyConfig = Static<typeof EmailHashKeyConfigSchema>;

/** 256 bits: the key must not be guessable faster than the addresses it protects. */
export const MIN_EMAIL_HASH_KEY_BYTES = 32;

export function loadEmailHashKey(
  config: EmailHashKeyConfig,
  readFile: (path: string) => Buffer = (path) => readFileSync(path),
): EmailHashKey {
  const { EMAIL_HASH_KEY_FILE: file, EMAIL_HASH_KEY: inline, EMAIL_HASH_KEY_ID: id } = config;
  if (file !== '' && inline !== '')
    throw new ConfigError('invalid configuration: set EMAIL_HASH_KEY_FILE or EMAIL_HASH_KEY, not both');
  if (file === '' && inline === '')
    throw new ConfigError(
      'invalid configuration: EMAIL_HASH_KEY_FILE is required (a file holding the emailHash HMAC key; EMAIL_HASH_KEY for development)',
    );
  let material: Buffer;
  if (file !== '') {
    try {
      material = Buffer.from(readFile(file).toString('utf8').trim(), 'utf8');
    } catch (error) {
      const code = (error as NodeJS.ErrnoException).code ?? 'unreadable';
      throw new ConfigError(`invalid configuration: EMAIL_HASH_KEY_FILE cannot be read (${code})`);
    }
  } else {
    material = Buffer.from(inline.trim(), 'utf8');
  }
  const variable = file !== '' ? 'EMAIL_HASH_KEY_FILE' : 'EMAIL_HASH_KEY';
  if (material.length < MIN_EMAIL_HASH_KEY_BYTES)
    throw new ConfigError(
      `invalid configuration: the key in ${variable} must be at least ${MIN_EMAIL_HASH_KEY_BYTES} bytes (e.g. openssl rand -hex 32)`,
    );
  if (id === '')
    throw new ConfigError('invalid configuration: EMAIL_HASH_KEY_ID is required with an emailHash key (e.g. 2026-01)');
  return { id, secret: createSecretKey(material) };
}
