/**
 * Secrets come from a file named by `<NAME>_FILE` (a mounted Secret; the way production runs) or,
 * for development, from `<NAME>` itself; never both, so a forgotten inline value cannot shadow the
 * mounted one. Errors name the variable and never carry the value: a secret must not reach a log
 * line, an exit message or a stack trace.
 */
import { readFileSync } from 'node:fs';
import { ConfigError } from '../config.js';

export type Env = Readonly<Record<string, string | undefined>>;
export type ReadFile = (path: string) => string;

export const readTextFile: ReadFile = (path) => readFileSync(path, 'utf8');

/**
 * The secret `<name>` from `<name>_FILE` or `<name>`; undefined when neither is set. A file's one
 * trailing newline is dropped (`echo` and most editors add it); other whitespace is part of the value.
 */
export function readSecret(env: Env, name: string, readFile: ReadFile = readTextFile): string | undefined {
  const file = env[`${name}_FILE`] ?? '';
  const inline = env[name] ?? '';
  if (file !== '' && inline !== '') {
    throw new ConfigError(`invalid configuration: set ${name}_FILE or ${name}, not both`);
  }
  if (file !== '') return readSecretFile(`${name}_FILE`, file, readFile);
  return inline === '' ? undefined : inline;
}

/** The content of the file a `*_FILE` variable names; an unreadable or empty file stops the start. */
export function readSecretFile(variable: string, path: string, readFile: ReadFile = readTextFile): string {
  let content: string;
  try {
    content = readFile(path);
  } catch (error) {
    throw new ConfigError(`invalid configuration: ${variable} (${path}) cannot be read (${errorCode(error)})`);
  }
  const value = content.replace(/\r?\n$/, '');
  if (value === '') throw new ConfigError(`invalid configuration: ${variable} (${path}) is empty`);
  return value;
}

/** A PEM file (CA, certificate, key) named by `variable`; read once, at start. */
export function readPemFile(variable: string, path: string, readFile: ReadFile = readTextFile): string {
  let content: string;
  try {
    content = readFile(path);
  } catch (error) {
    throw new ConfigError(`invalid configuration: ${variable} (${path}) cannot be read (${errorCode(error)})`);
  }
  if (!content.includes('-----BEGIN ')) {
    throw new ConfigError(`invalid configuration: ${variable} (${path}) is not a PEM file`);
  }
  return content;
}

function errorCode(error: unknown): string {
  return (error as NodeJS.ErrnoException)?.code ?? 'unreadable';
}
