/**
 * Issue #16 follow-up, the planner's token for the experiment service as a mounted file: what stops
 * the start (a ConfigError, exit 78, naming the variable and the path, never the token), and the
 * file read again on a timer, a bad read keeping the token in hand; no log line carries a token.
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ConfigError, createLogger, loadConfig } from '@outreach/shared';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { ConfigSchema } from '../config.js';
import { experimentToken } from './experiment-token.js';

const OLD = 'old-9f8e7d6c5b4a39281706f5e4d3c2b1a0';
const NEW = 'new-0a1b2c3d4e5f60718293a4b5c6d7e8f9';
let dir: string;
let file: string;
beforeEach(() => {
  dir = mkdtempSync(join(tmpdir(), 'experiment-token-'));
  file = join(dir, 'token');
});
afterEach(() => {
  vi.useRealTimers();
  rmSync(dir, { recursive: true, force: true });
});

const settings = (env: { EXPERIMENT_TOKEN?: string; EXPERIMENT_TOKEN_FILE?: string }) => ({
  EXPERIMENT_TOKEN: '',
  EXPERIMENT_TOKEN_FILE: '',
  SECRET_FILE_REFRESH_MS: 30_000,
  ...env,
});

/** The ConfigError the start would exit 78 with. */
function refusal(env: { EXPERIMENT_TOKEN?: string; EXPERIMENT_TOKEN_FILE?: string }): ConfigError {
  try {
    experimentToken(settings(env)).stop();
  } catch (error) {
    expect(error).toBeInstanceOf(ConfigError);
    return error as ConfigError;
  }
  throw new Error('expected a ConfigError');
}

describe('EXPERIMENT_TOKEN_FILE at start', () => {
  it('reads the token from the file, its one trailing newline dropped', () => {
    writeFileSync(file, `${OLD}\n`);
    const token = experimentToken(settings({ EXPERIMENT_TOKEN_FILE: file }));
    expect(token.current()).toBe(OLD);
    token.stop();
  });

  it('refuses both variables set, naming both and quoting neither token', () => {
    writeFileSync(file, OLD);
    const error = refusal({ EXPERIMENT_TOKEN_FILE: file, EXPERIMENT_TOKEN: NEW });
    expect(error.message).toMatch(/EXPERIMENT_TOKEN_FILE or EXPERIMENT_TOKEN, not both/);
    expect(error.message).not.toContain(OLD);
    expect(error.message).not.toContain(NEW);
  });

  it('refuses an empty file (or one holding only a newline), naming the variable and the path', () => {
    for (const content of ['', '\n', '\r\n']) {
      writeFileSync(file, content);
      expect(refusal({ EXPERIMENT_TOKEN_FILE: file }).message).toBe(
        `invalid configuration: EXPERIMENT_TOKEN_FILE (${file}) is empty`,
      );
    }
  });

  it('refuses a file it cannot read: missing, a directory', () => {
    expect(refusal({ EXPERIMENT_TOKEN_FILE: join(dir, 'missing') }).message).toBe(
      `invalid configuration: EXPERIMENT_TOKEN_FILE (${join(dir, 'missing')}) cannot be read (ENOENT)`,
    );
    expect(refusal({ EXPERIMENT_TOKEN_FILE: dir }).message).toMatch(
      new RegExp(`EXPERIMENT_TOKEN_FILE \\(${dir}\\) cannot be read \\(EISDIR\\)`),
    );
  });

  it('refuses what is not one bearer token, naming the path and never quoting the content', () => {
    // Two tokens (the API token files' rotation habit), inner spaces, a comma, non-ASCII, a NUL.
    for (const content of [`${OLD}\n${NEW}\n`, `${OLD} ${NEW}`, ` ${OLD}`, `${OLD},${NEW}`, `${OLD}é`, `${OLD}\0`]) {
      writeFileSync(file, content);
      const { message } = refusal({ EXPERIMENT_TOKEN_FILE: file });
      // Two lines and a NUL are refused by any secret file's rules (security/secrets.ts), the rest
      // by the bearer token's shape.
      expect(message, JSON.stringify(content)).toMatch(
        new RegExp(
          `^invalid configuration: EXPERIMENT_TOKEN_FILE \\(${file}\\) (must hold exactly one bearer token|has more than one line|contains a NUL byte)`,
        ),
      );
      expect(message).not.toContain(OLD.slice(4));
    }
    // The development form is held to the same shape: a line break would put the header in an error.
    expect(refusal({ EXPERIMENT_TOKEN: `${OLD}\r\nX-Injected: 1` }).message).toMatch(
      /^invalid configuration: EXPERIMENT_TOKEN (must hold exactly one bearer token|has more than one line)/,
    );
  });

  it('takes EXPERIMENT_TOKEN alone (development) and is empty with neither', () => {
    expect(experimentToken(settings({ EXPERIMENT_TOKEN: OLD })).current()).toBe(OLD);
    expect(experimentToken(settings({})).current()).toBeUndefined();
  });

  it('is part of the config schema; SECRET_FILE_REFRESH_MS defaults to 30 s and has a floor', () => {
    const base = { KAFKA_BROKERS: '127.0.0.1:9092', DATABASE_URL: 'postgres://p@127.0.0.1/t' };
    const config = loadConfig(ConfigSchema, { ...base, EXPERIMENT_TOKEN_FILE: file });
    expect(config).toMatchObject({ EXPERIMENT_TOKEN_FILE: file, EXPERIMENT_TOKEN: '', SECRET_FILE_REFRESH_MS: 30_000 });
    expect(() => loadConfig(ConfigSchema, { ...base, SECRET_FILE_REFRESH_MS: '10' })).toThrow(/SECRET_FILE_REFRESH_MS/);
  });
});

describe('EXPERIMENT_TOKEN_FILE while the planner runs', () => {
  it('is read again every SECRET_FILE_REFRESH_MS; a bad read keeps the token in hand; no log line holds a token', () => {
    vi.useFakeTimers();
    const lines: string[] = [];
    const logger = createLogger(
      { name: 'planner-test', level: 'debug' },
      { write: (line: string) => lines.push(line) },
    );
    writeFileSync(file, `${OLD}\n`);
    const token = experimentToken(settings({ EXPERIMENT_TOKEN_FILE: file }), logger);
    const latest = () => JSON.parse(lines.at(-1) ?? '{}') as Record<string, unknown>;

    // Rotated: in use after the next read, not before.
    writeFileSync(file, `${NEW}\n`);
    vi.advanceTimersByTime(29_999);
    expect(token.current()).toBe(OLD);
    vi.advanceTimersByTime(1);
    expect(token.current()).toBe(NEW);
    expect(latest()).toMatchObject({ level: 'info', variable: 'EXPERIMENT_TOKEN_FILE', path: file });

    // An unchanged file logs nothing.
    const logged = lines.length;
    vi.advanceTimersByTime(90_000);
    expect(lines).toHaveLength(logged);

    // Mid-update (empty), gone, or two tokens: the token in hand stays, with a warning each time.
    for (const breakIt of [
      () => writeFileSync(file, ''),
      () => writeFileSync(file, `${OLD}\n${NEW}`),
      () => rmSync(file),
    ]) {
      breakIt();
      vi.advanceTimersByTime(30_000);
      expect(token.current()).toBe(NEW);
      expect(latest()).toMatchObject({ level: 'warn', variable: 'EXPERIMENT_TOKEN_FILE', path: file });
      expect(String(latest().reason)).toMatch(/EXPERIMENT_TOKEN_FILE/);
    }

    // Back, and stopped: no read after stop().
    writeFileSync(file, OLD);
    vi.advanceTimersByTime(30_000);
    expect(token.current()).toBe(OLD);
    token.stop();
    writeFileSync(file, NEW);
    vi.advanceTimersByTime(60_000);
    expect(token.current()).toBe(OLD);

    const all = lines.join('\n');
    expect(all).not.toContain(OLD);
    expect(all).not.toContain(NEW);
    expect(all).not.toContain(OLD.slice(4, 20));
  });
});
