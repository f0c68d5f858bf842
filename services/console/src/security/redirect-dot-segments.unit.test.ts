/**
 * An attack on safeNext (ADR 015: "after sign-in only a same-origin relative path is followed"):
 * a dot segment before an empty one resolves to a protocol-relative path. `/.//evil.example`
 * passes the prefix checks (it starts with one slash), and the URL parser then removes the `.`
 * segment, leaving `//evil.example`, which safeNext returns and the browser follows to another
 * origin: GET /login?next=/.//evil.example answers a signed-in user 303 `location: //evil.example`.
 * safeNext now checks what it resolves to, and sends such a path home.
 */
import { describe, expect, it } from 'vitest';
import { safeNext } from './session.js';

const spellings = ['/.//evil.example', '/..//evil.example/x', '/%2e%2e//evil.example', '/a/..//evil.example'];

describe('safeNext and dot segments', () => {
  it('never returns a protocol-relative path, whatever dot segments the input holds', () => {
    for (const next of spellings) expect(safeNext(next), next).toMatch(/^\/(?![/\\])/);
  });

  it('sends such a path home, and keeps a same-origin path with its dot segments resolved', () => {
    expect(safeNext('/.//evil.example')).toBe('/');
    expect(safeNext('/campaigns/../sends?x=1')).toBe('/sends?x=1');
  });
});
