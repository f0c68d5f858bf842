import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Type } from '@sinclair/typebox';
import { pino } from 'pino';
import { describe, expect, it } from 'vitest';
import { ConfigError, loadConfig } from '../config.js';
import { createLogger } from '../logger.js';
import { waitFor } from '../wait.js';
import { authenticate, parseTokens, scopedTokensFrom, TokenVerifier } from './auth.js';
import { buildHttpApp } from './http.js';

const base = { KAFKA_BROKERS: '127.0.0.1:9092', DATABASE_URL: 'postgres://u@h:5432/db' };
const config = (env: Record<string, string>) => loadConfig(Type.Object({}), { ...base, ...env });

describe('tokens', () => {
  it('reads each scope from its variable and its file (one per line, comments and blanks ignored)', () => {
    const files: Record<string, string> = {
      '/run/secrets/operate': '# rotated 2025-01\nnew-operate\n\n  old-operate  \r\n',
      '/run/secrets/dsn': 'hook-token\n',
    };
    const tokens = scopedTokensFrom(
      config({
        API_TOKENS_PUBLISH: 'p1, p2,',
        API_TOKENS_OPERATE: 'inline-operate',
        API_TOKENS_OPERATE_FILE: '/run/secrets/operate',
        API_TOKENS_DSN_FILE: '/run/secrets/dsn',
      }),
      (path) => files[path] ?? '',
    );
    expect(tokens).toEqual({
      publish: ['p1', 'p2'],
      operate: ['inline-operate', 'new-operate', 'old-operate'],
      read: [],
      dsn: ['hook-token'],
      erase: [],
    });
  });

  it('stops the start when a token file cannot be read, naming the variable', () => {
    expect(() => scopedTokensFrom(config({ API_TOKENS_READ_FILE: '/nonexistent/read-tokens' }))).toThrowError(
      expect.objectContaining({ name: 'ConfigError', message: expect.stringMatching(/API_TOKENS_READ_FILE/) }),
    );
  });

  it('refuses the retired API_TOKENS instead of starting with a different meaning', () => {
    expect(() => config({ API_TOKENS: 'one-token-for-everything' })).toThrowError(ConfigError);
    expect(() => config({ API_TOKENS: 'x' })).toThrowError(
      /API_TOKENS_PUBLISH, API_TOKENS_OPERATE and API_TOKENS_READ/,
    );
    expect(config({ API_TOKENS: '' }).API_TOKENS_READ).toBe('');
  });

  it('splits on commas and newlines', () => {
    expect(parseTokens('a,b\nc\r\n#d\n ,e ')).toEqual(['a', 'b', 'c', 'e']);
    // A comment is a whole line, commas and all.
    expect(parseTokens('# revoked, incident 42\nf\n  # g, h')).toEqual(['f']);
  });
});

describe('TokenVerifier', () => {
  const verifier = new TokenVerifier({
    publish: ['agent-token'],
    operate: ['ops-token', 'shared'],
    read: ['ops-token', 'reader'],
    dsn: ['hook-token'],
    erase: [],
  });

  it('grants every scope a token is listed in, and nothing to a near miss', () => {
    expect([...(verifier.verify('ops-token')?.scopes ?? [])].sort()).toEqual(['operate', 'read']);
    expect([...(verifier.verify('agent-token')?.scopes ?? [])]).toEqual(['publish']);
    // The bounce-mailbox hook's token holds its own scope and nothing an operator does.
    expect([...(verifier.verify('hook-token')?.scopes ?? [])]).toEqual(['dsn']);
    for (const nearMiss of [
      '',
      'ops-toke',
      'ops-tokenn',
      'Ops-token',
      'ops-token ',
      'ops-token\u0000',
      'agent-token,ops-token',
    ])
      expect(verifier.verify(nearMiss), JSON.stringify(nearMiss)).toBeNull();
  });

  it('gives a token a stable id that is neither the token nor shared by another token', () => {
    const id = verifier.verify('reader')?.id;
    expect(id).toBe(verifier.verify('reader')?.id);
    expect(id).not.toContain('reader');
    expect(id).not.toBe(verifier.verify('shared')?.id);
    // Another process (another key) gives another id: nothing recomputable from the token alone.
    expect(
      new TokenVerifier({ publish: [], operate: [], read: ['reader'], dsn: [], erase: [] }).verify('reader')?.id,
    ).not.toBe(id);
  });

  it('knows which scopes have no tokens at all', () => {
    const partial = new TokenVerifier({ publish: [], operate: ['x'], read: [], dsn: [], erase: [] });
    expect([partial.isConfigured('publish'), partial.isConfigured('operate')]).toEqual([false, true]);
  });

  it('reads the Authorization header without ever throwing', () => {
    expect(authenticate(undefined, verifier)).toMatchObject({
      kind: 'anonymous',
      reason: expect.stringMatching(/missing/),
    });
    expect(authenticate('Basic YTpi', verifier)).toMatchObject({ reason: expect.stringMatching(/scheme/) });
    expect(authenticate('Bearer a b', verifier)).toMatchObject({ reason: expect.stringMatching(/exactly one/) });
    expect(authenticate('Bearer reader', verifier)).toMatchObject({ kind: 'principal' });
    expect(authenticate('BEARER   reader  ', verifier)).toMatchObject({ kind: 'principal' });
    expect(authenticate(`Bearer ${'x'.repeat(100_000)}`, verifier)).toMatchObject({ reason: 'invalid bearer token' });
  });

  it('parses on ASCII only: a Unicode space around or inside the header makes the token invalid', () => {
    for (const space of ['\u00a0', '\u2028', '\ufeff', '\u3000', '\u200b']) {
      for (const header of [
        `Bearer reader${space}`,
        `${space}Bearer reader`,
        `Bearer${space}reader`,
        `Bearer ${space}reader`,
      ])
        expect(authenticate(header, verifier), JSON.stringify(header)).toMatchObject({ kind: 'anonymous' });
    }
    expect(authenticate('Bearer\treader', verifier)).toMatchObject({ kind: 'anonymous' });
    expect(authenticate(' \tBearer reader \t', verifier)).toMatchObject({ kind: 'principal' });
  });
});

describe('token files', () => {
  it('are read again while the service runs: a rotated token works, a revoked one stops', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'tokens-'));
    const file = join(dir, 'operate');
    writeFileSync(file, 'old-operate\n');
    const warnings: string[] = [];
    const logger = pino({ level: 'warn' }, { write: (line: string) => warnings.push(line) });
    const app = await buildHttpApp({
      name: 'probe',
      logger,
      apiTokens: () => scopedTokensFrom(config({ API_TOKENS_OPERATE_FILE: file })),
      apiTokensReloadMs: 50,
    });
    app.post('/v1/pause', { config: { scope: 'operate' } }, async () => ({ paused: true }));
    const status = async (token: string) =>
      (await app.inject({ method: 'POST', url: '/v1/pause', headers: { authorization: `Bearer ${token}` } }))
        .statusCode;
    const until = (condition: () => Promise<boolean> | boolean, description: string) =>
      waitFor(condition, { timeoutMs: 5_000, description });
    try {
      expect(await status('old-operate')).toBe(200);
      // Rotation: both for a while, then only the new one.
      writeFileSync(file, 'old-operate\nnew-operate\n');
      await until(async () => (await status('new-operate')) === 200, 'the new token');
      expect(await status('old-operate')).toBe(200);
      writeFileSync(file, 'new-operate\n');
      await until(async () => (await status('old-operate')) === 401, 'the old token revoked');
      // A file that vanishes keeps the tokens in hand instead of locking everyone out.
      rmSync(file);
      await until(() => warnings.some((w) => w.includes('could not be read again')), 'a reload of the missing file');
      expect(await status('new-operate')).toBe(200);
      // An emptied file (a rotation whose new value was never filled in) keeps them too.
      warnings.length = 0;
      writeFileSync(file, '\n');
      await until(
        () => warnings.some((w) => w.includes('could not be read again') && w.includes('is empty')),
        'a reload of the emptied file',
      );
      expect(await status('new-operate')).toBe(200);
      // Revoking every token is said in words: a file of comments only.
      writeFileSync(file, '# none: revoked, incident 42\n');
      await until(async () => (await status('new-operate')) === 401, 'every token revoked');
    } finally {
      await app.close();
      rmSync(dir, { recursive: true, force: true });
    }
  }, 20_000);

  it.each([
    ['empty', '', /is empty \(to revoke every token of the scope, write a comment: # none\)/],
    ['blank lines only', '\n \n', /is empty/],
    ['a byte-order mark', '\uFEFFtok-1\n', /byte-order mark/],
    ['a token with a NUL', 'tok-1\0\n', /token 1 holds a character no client can send/],
    ['a token with an inner space', 'tok-1\ntok 2\n', /token 2 holds a character no client can send/],
    ['a non-ASCII token', 'tök-1\n', /token 1 holds a character no client can send/],
  ])('refuse a token file that is %s at start, naming the variable and never a token', (_, content, message) => {
    const dir = mkdtempSync(join(tmpdir(), 'tokens-'));
    const file = join(dir, 'publish');
    writeFileSync(file, content);
    try {
      const read = () => scopedTokensFrom(config({ API_TOKENS_PUBLISH_FILE: file }));
      expect(read).toThrowError(ConfigError);
      expect(read).toThrowError(message);
      expect(read).toThrowError(/API_TOKENS_PUBLISH_FILE/);
      expect(read).not.toThrowError(/tok-1|tok 2|tök/);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('stop the start with a ConfigError when unreadable', async () => {
    await expect(
      buildHttpApp({
        name: 'probe',
        logger: createLogger({ name: 'probe', level: 'silent' }),
        apiTokens: () => scopedTokensFrom(config({ API_TOKENS_PUBLISH_FILE: '/nonexistent/publish' })),
      }),
    ).rejects.toThrowError(
      expect.objectContaining({ name: 'ConfigError', message: expect.stringMatching(/API_TOKENS_PUBLISH_FILE/) }),
    );
  });
});
