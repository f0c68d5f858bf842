import { randomBytes } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { csrfMatches, newSession, safeNext, signSession, verifySession, type Session } from './session.js';

const key = randomBytes(32);
const operator = () => newSession({ user: 'ada', role: 'operator', via: 'local' }, 60_000);

describe('signed session cookies', () => {
  it('round-trips a session and an anonymous one', () => {
    const session = operator();
    expect(verifySession(signSession(session, key), [key])).toEqual(session);
    const anonymous = newSession(null, 60_000);
    expect(verifySession(signSession(anonymous, key), [key])).toEqual(anonymous);
  });

  it('refuses a raised role, another key, an expired session, and malformed cookies', () => {
    const session = newSession({ user: 'bob', role: 'reader', via: 'local' }, 60_000);
    const cookie = signSession(session, key);
    const [, mac] = cookie.split('.');
    const raised = Buffer.from(JSON.stringify({ ...session, role: 'operator' })).toString('base64url');
    expect(verifySession(`${raised}.${mac}`, [key])).toBeUndefined();
    expect(verifySession(cookie, [randomBytes(32)])).toBeUndefined();
    expect(verifySession(cookie, [key], session.exp)).toBeUndefined();
    for (const bad of [undefined, '', 'x', 'a.b.c', `${cookie}x`, `.${mac}`, 'x'.repeat(5000)]) {
      expect(verifySession(bad, [key])).toBeUndefined();
    }
  });

  it('refuses a validly signed payload that is not a session (unknown role, short token)', () => {
    const forge = (value: unknown) => signSession(value as Session, key);
    expect(verifySession(forge({ ...operator(), role: 'admin' }), [key])).toBeUndefined();
    expect(verifySession(forge({ ...operator(), csrf: 'short' }), [key])).toBeUndefined();
    expect(verifySession(forge({ ...operator(), user: null }), [key])).toBeUndefined();
  });

  it('accepts a cookie under any of the keys (rotation)', () => {
    const old = randomBytes(32);
    const session = operator();
    expect(verifySession(signSession(session, old), [key, old])).toEqual(session);
  });

  it('gives each session its own CSRF token', () => {
    expect(operator().csrf).not.toBe(operator().csrf);
  });
});

describe('CSRF token', () => {
  it('matches only the session’s own token', () => {
    const session = operator();
    expect(csrfMatches(session, session.csrf)).toBe(true);
    expect(csrfMatches(session, operator().csrf)).toBe(false);
    expect(csrfMatches(session, `${session.csrf}x`)).toBe(false);
    expect(csrfMatches(session, undefined)).toBe(false);
    expect(csrfMatches(session, [session.csrf])).toBe(false);
    expect(csrfMatches(undefined, session.csrf)).toBe(false);
  });
});

describe('where to go after sign-in', () => {
  it('keeps a same-origin path with its query', () => {
    expect(safeNext('/ambiguous?after=abc')).toBe('/ambiguous?after=abc');
    expect(safeNext('/campaigns')).toBe('/campaigns');
  });

  it('sends everything else home: other origins, protocol-relative, backslashes, schemes, control characters', () => {
    for (const next of [
      'https://evil.example/',
      '//evil.example',
      '/\\evil.example',
      '\\\\evil.example',
      '/%0d%0aSet-Cookie:x',
      '/\t/evil.example',
      'javascript:alert(1)',
      'evil.example',
      '',
      undefined,
      ['/'],
      `/${'a'.repeat(3000)}`,
    ]) {
      expect(safeNext(next), String(next)).toMatch(/^\/(?!\/)/);
      expect(safeNext(next) === '/' || safeNext(next).startsWith('/%0d')).toBe(true);
    }
  });
});
