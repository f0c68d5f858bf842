/**
 * Secrets come from a file named by `<NAME>_FILE` (a mounted Secret; the way production runs) or,
 * for development, from `<NAME>` itself; never both, so a forgotten inline value cannot shadow the
 * mounted one. Errors name the variable and never carry the value: a secret must not reach a log
 * line, an exit message or a stack trace.
 */
import { closeSync, constants, fstatSync, openSync, readFileSync } from 'node:fs';
import { ConfigError } from '../config.js';
import type { Logger } from '../logger.js';
import { reloadEvery, type Reloading } from './reload.js';

export type Env = Readonly<Record<string, string | undefined>>;
export type ReadFile = (path: string) => string;

/**
 * The largest secret file read: room for a whole CA bundle (the system's is about 220 KB), which
 * goes through the same reader as passwords and tokens; far below what would strain the memory.
 */
export const MAX_SECRET_FILE_BYTES = 4 * 1024 * 1024;

const NOT_UTF8 = 'not UTF-8 text';

/**
 * A mounted secret's text: a regular file (symbolic links followed) of at most MAX_SECRET_FILE_BYTES,
 * in UTF-8. A FIFO or a device would hang the start or fill the memory (/dev/zero), and undecodable
 * bytes would silently become U+FFFD; each throws an error whose `code` says which, never the content.
 * A byte-order mark is kept, for the caller to refuse.
 */
export const readTextFile: ReadFile = (path) => {
  const maxBytes = MAX_SECRET_FILE_BYTES;
  // O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer.
  const fd = openSync(path, constants.O_RDONLY | constants.O_NONBLOCK);
  try {
    const stat = fstatSync(fd);
    if (stat.isDirectory()) throw Object.assign(new Error('a directory'), { code: 'EISDIR' });
    if (!stat.isFile()) throw Object.assign(new Error('not a regular file'), { code: 'not a regular file' });
    const tooLarge = () => Object.assign(new Error('too large'), { code: `larger than ${maxBytes / 1024 / 1024} MiB` });
    if (stat.size > maxBytes) throw tooLarge();
    const bytes = readFileSync(fd);
    if (bytes.length > maxBytes) throw tooLarge();
    try {
      return new TextDecoder('utf-8', { fatal: true, ignoreBOM: true }).decode(bytes);
    } catch {
      throw Object.assign(new Error('not UTF-8'), { code: NOT_UTF8 });
    }
  } finally {
    closeSync(fd);
  }
};

/**
 * Why `value` cannot be a secret (undefined when it can): a byte-order mark, a NUL, a line break of
 * any kind, another control character, or an invisible formatting character (zero-width space, soft
 * hyphen, direction marks). Each would be part of the password, token or key while nobody sees it,
 * and some break what carries it: a header, a SASL message (fields end at \x01), a log line.
 * Spaces, visible or not (NBSP), are kept: they may be part of a password.
 */
export function secretValueProblem(value: string): string | undefined {
  if (value === '') return 'is empty';
  if (value.startsWith('\uFEFF')) return 'begins with a byte-order mark (save it without one)';
  if (value.includes('\0')) return 'contains a NUL byte';
  if (/[\r\n\u0085\u2028\u2029]/u.test(value))
    return 'has more than one line (a secret holds one value; only a trailing newline of a file is dropped)';
  const at = value.search(/[\p{Cc}\p{Cf}]/u);
  if (at >= 0) return `contains a control or invisible formatting character (at character ${at + 1})`;
  return undefined;
}

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
  if (inline === '') return undefined;
  const problem = secretValueProblem(inline);
  if (problem !== undefined) throw new ConfigError(`invalid configuration: ${name} ${problem}`);
  return inline;
}

/**
 * The content of the file a `*_FILE` variable names, one line (its one trailing newline dropped).
 * An unreadable or empty file stops the start, and so does one that cannot be a single secret as
 * meant (secretValueProblem): a byte-order mark (an editor's, invisible, and part of the value
 * otherwise), a NUL byte, a second line (two values pasted into one Secret key, or a `\r` of a
 * Windows line end), a control or invisible character. Symbolic links are followed: a mounted
 * Kubernetes Secret is one. FIFOs, devices, files over 4 MiB and non-UTF-8 bytes are refused
 * (readTextFile).
 */
export function readSecretFile(variable: string, path: string, readFile: ReadFile = readTextFile): string {
  let content: string;
  try {
    content = readFile(path);
  } catch (error) {
    throw new ConfigError(`invalid configuration: ${variable} (${path}) cannot be read (${errorCode(error)})`);
  }
  const value = content.replace(/\r?\n$/, '');
  const problem = secretValueProblem(value);
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
    // A PEM's base64 is ASCII; the text around it (a bundle's comments) may be in another encoding,
    // which is no reason to refuse it. Only bytes: the file passed the regular-file and size checks.
    if (errorCode(error) === NOT_UTF8) content = readFileSync(path, 'latin1');
    else throw new ConfigError(`invalid configuration: ${variable} (${path}) cannot be read (${errorCode(error)})`);
  }
  if (!content.includes('-----BEGIN ')) {
    throw new ConfigError(`invalid configuration: ${variable} (${path}) is not a PEM file`);
  }
  return content;
}

function errorCode(error: unknown): string {
  return (error as NodeJS.ErrnoException)?.code ?? 'unreadable';
}
