/**
 * The emailHash key, read once at start. A service that publishes emailHash refuses to start
 * without it (exit 78, naming the variable): an unkeyed hash is reversible with a list of addresses,
 * so there is no fallback to one.
 */
import { createSecretKey } from 'node:crypto';
import { Type, type Static } from '@sinclair/typebox';
import { ConfigError } from './config.js';
import type { EmailHashKey } from '@outreach/contracts';
import { readTextFile, secretValueProblem, type ReadFile } from './security/secrets.js';

/** Spread into a service's config schema (`Type.Object({ ...EmailHashKeyConfigSchema.properties, ... })`). */
export const EmailHashKeyConfigSchema = Type.Object({
  /** A file holding the HMAC key as text (a mounted secret; `openssl rand -hex 32`); surrounding ASCII spaces and line ends are ignored. Preferred. */
  EMAIL_HASH_KEY_FILE: Type.String({ default: '' }),
  /** The key itself, for development and tests; exactly one of this and EMAIL_HASH_KEY_FILE. */
  EMAIL_HASH_KEY: Type.String({ default: '' }),
  /** Names the key in every event (`emailHashKeyId`); a new key gets a new id. */
  EMAIL_HASH_KEY_ID: Type.String({ default: '', pattern: '^([A-Za-z0-9][A-Za-z0-9._-]{0,63})?$' }),
});
export type EmailHashKeyConfig = Static<typeof EmailHashKeyConfigSchema>;

/** 256 bits: the key must not be guessable faster than the addresses it protects. */
export const MIN_EMAIL_HASH_KEY_BYTES = 32;

export function loadEmailHashKey(config: EmailHashKeyConfig, readFile: ReadFile = readTextFile): EmailHashKey {
  const { EMAIL_HASH_KEY_FILE: file, EMAIL_HASH_KEY: inline, EMAIL_HASH_KEY_ID: id } = config;
  const material = readKeyMaterial({ name: 'EMAIL_HASH_KEY', file, inline }, readFile);
  if (material === undefined)
    throw new ConfigError(
      'invalid configuration: EMAIL_HASH_KEY_FILE is required (a file holding the emailHash HMAC key; EMAIL_HASH_KEY for development)',
    );
  if (id === '')
    throw new ConfigError('invalid configuration: EMAIL_HASH_KEY_ID is required with an emailHash key (e.g. 2026-01)');
  return { id, secret: createSecretKey(material) };
}

/**
 * The bytes of an HMAC key written as text in the file `<name>_FILE` (a mounted Secret) or, for
 * development, inline in `<name>`; undefined when neither is set (the caller says whether that is
 * allowed). Both set, an unreadable or binary file, invisible characters, or fewer than
 * MIN_EMAIL_HASH_KEY_BYTES bytes stop the start with a ConfigError naming the variable, never the key.
 */
export function readKeyMaterial(
  source: { readonly name: string; readonly file: string; readonly inline: string },
  readFile: ReadFile = readTextFile,
): Buffer | undefined {
  const { name, file, inline } = source;
  if (file !== '' && inline !== '')
    throw new ConfigError(`invalid configuration: set ${name}_FILE or ${name}, not both`);
  if (file === '' && inline === '') return undefined;
  // The key is the text of the file (its UTF-8 bytes), as it always was: every emailHash published
  // depends on exactly these bytes. So the text must be text: a binary file (`head -c 32
  // /dev/urandom`) would have its invalid bytes turned into U+FFFD, and two different keys could
  // become one. Surrounding spaces and line ends are ignored; anything else invisible is refused.
  let text: string;
  if (file !== '') {
    try {
      text = readFile(file);
    } catch (error) {
      const code = (error as NodeJS.ErrnoException).code ?? 'unreadable';
      throw new ConfigError(
        `invalid configuration: ${name}_FILE cannot be read (${code}${code === 'not UTF-8 text' ? ': write the key as text, e.g. openssl rand -hex 32' : ''})`,
      );
    }
  } else {
    text = inline;
  }
  const variable = file !== '' ? `${name}_FILE` : name;
  const trimmed = text.replace(/^[ \t\r\n]+|[ \t\r\n]+$/g, '');
  const problem =
    trimmed !== '' && trimmed.trim() !== trimmed
      ? 'begins or ends with a space other than an ASCII one (NBSP, a byte-order mark, ...)'
      : trimmed === ''
        ? undefined
        : secretValueProblem(trimmed);
  if (problem !== undefined) throw new ConfigError(`invalid configuration: ${variable} ${problem}`);
  const material = Buffer.from(trimmed, 'utf8');
  if (material.length < MIN_EMAIL_HASH_KEY_BYTES)
    throw new ConfigError(
      `invalid configuration: the key in ${variable} must be at least ${MIN_EMAIL_HASH_KEY_BYTES} bytes (e.g. openssl rand -hex 32)`,
    );
  return material;
}
