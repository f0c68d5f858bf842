/**
 * Secrets come from a file named by `<NAME>_FILE` (a mounted Secret; the way production runs) or,
 * for development, from `<NAME>` itself; never both, so a forgotten inline value cannot shadow the
 * mounted one. Errors name the variable and never carry the value: a secret must not reach a log
 * line, an exit message or a stack trace.
 */
import { readFileSync } from 'node:fs';
import { ConfigError } from '../config.js';
import type { Logger } from '../logger.js';
import { reloadEvery, type Reloading } from './reload.js';

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

/**
 * The content of the file a `*_FILE` variable names, one line (its one trailing newline dropped).
 * An unreadable or empty file stops the start, and so does one that cannot be a single secret as
 * meant: a byte-order mark (an editor's, invisible, and part of the value otherwise), a NUL byte,
 * or a second line (two values pasted into one Secret key, or a `\r` of a Windows line end).
 * Symbolic links are followed: a mounted Kubernetes Secret is one.
 */
export function readSecretFile(variable: string, path: string, readFile: ReadFile = readTextFile): string {
  let content: string;
  try {
    content = readFile(path);
  } catch (error) {
    throw new ConfigError(`invalid configuration: ${variable} (${path}) cannot be read (${errorCode(error)})`);
  }
  const value = content.replace(/\r?\n$/, '');
  const problem =
    value === ''
      ? 'is empty'
      : value.startsWith('\uFEFF')
        ? 'begins with a byte-order mark (save it without one)'
        : value.includes('\0')
          ? 'contains a NUL byte'
          : /[\r\n]/.test(value)
            ? 'has more than one line (a secret file holds one value; only a trailing newline is dropped)'
            : undefined;
  if (problem !== undefined) throw new ConfigError(`invalid configuration: ${variable} (${path}) ${problem}`);
  return value;
}

export interface ReloadingSecretOptions {
  /** How often the file is read again: SECRET_FILE_REFRESH_MS. */
  readonly intervalMs: number;
  /** Hears of a change and of a failed read, by the variable and path, never the value. */
  readonly logger?: Pick<Logger, 'info' | 'warn'>;
  /** Why a value cannot be used (undefined when it can), asked at start and at every read; never quotes it. */
  readonly check?: (value: string) => string | undefined;
  readonly readFile?: ReadFile;
}

/**
 * The secret `<name>` as readSecret reads it (its file or, for development, the inline value; never
 * both) and, from a file, read again every `intervalMs` (security/reload.ts): a rotated Secret takes
 * effect without a restart. At start a bad file or value stops it (ConfigError); later, a bad read
 * keeps the value in hand and is logged as a warning. `current()` is undefined when neither is set.
 */
export function reloadingSecret(
  env: Env,
  name: string,
  options: ReloadingSecretOptions,
): Reloading<string | undefined> {
  const variable = `${name}_FILE`;
  const path = env[variable] ?? '';
  const where = path === '' ? name : `${variable} (${path})`;
  const checked = (value: string | undefined): string | undefined => {
    const problem = value === undefined ? undefined : options.check?.(value);
    if (problem !== undefined) throw new ConfigError(`invalid configuration: ${where} ${problem}`);
    return value;
  };
  const first = checked(readSecret(env, name, options.readFile));
  if (path === '') return { current: () => first, stop: () => undefined };
  return reloadEvery(first, () => checked(readSecretFile(variable, path, options.readFile)), {
    intervalMs: options.intervalMs,
    onChange: () => options.logger?.info({ variable, path }, `${variable} changed; using the new secret`),
    onError: (error) =>
      options.logger?.warn(
        { variable, path, reason: error instanceof Error ? error.message : String(error) },
        `${variable} could not be read again; keeping the previous secret`,
      ),
  });
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
