import { createSecretKey } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { checkUnsubscribeToken, unsubscribeKey, unsubscribeToken } from './unsubscribe-token.js';

const key = unsubscribeKey({ id: 'k-2026.1', secret: createSecretKey(Buffer.alloc(32, 7)) });
const other = unsubscribeKey({ id: 'k-2026.1', secret: createSecretKey(Buffer.alloc(32, 8)) });
const sendId = '0b6f1d2e-8a3c-5e4f-9a1b-2c3d4e5f6a7b';

describe('unsubscribe tokens', () => {
  it('a token the platform made is valid and names its send', () => {
    expect(checkUnsubscribeToken(key, unsubscribeToken(key, sendId))).toEqual({ kind: 'valid', sendId });
  });

  it('the bare sendId, or a token for another send with this MAC, is refused', () => {
    expect(checkUnsubscribeToken(key, sendId)).toMatchObject({ kind: 'invalid', reason: 'malformed' });
    const token = unsubscribeToken(key, sendId);
    const otherSend = '1b6f1d2e-8a3c-5e4f-9a1b-2c3d4e5f6a7b';
    expect(checkUnsubscribeToken(key, token.replace(sendId, otherSend))).toMatchObject({ reason: 'bad_signature' });
  });

  it('a token made with another secret (same key id) is refused', () => {
    expect(checkUnsubscribeToken(key, unsubscribeToken(other, sendId))).toMatchObject({ reason: 'bad_signature' });
  });

  it('a token from a retired key id is refused as unknown_key', () => {
    const retired = unsubscribeKey({ id: 'k-2025', secret: createSecretKey(Buffer.alloc(32, 7)) });
    expect(checkUnsubscribeToken(key, unsubscribeToken(retired, sendId))).toMatchObject({ reason: 'unknown_key' });
  });

  it.each([
    ['empty', ''],
    ['wrong version', unsubscribeToken(key, sendId).replace(/^v1/, 'v2')],
    ['upper-case send id', unsubscribeToken(key, sendId).replace(sendId, sendId.toUpperCase())],
    ['truncated MAC', unsubscribeToken(key, sendId).slice(0, -1)],
    ['padded MAC', `${unsubscribeToken(key, sendId)}=`],
    ['standard base64 alphabet', `${unsubscribeToken(key, sendId).slice(0, -1)}+`],
    ['whitespace', ` ${unsubscribeToken(key, sendId)}`],
    ['huge', `v1.${sendId}.${'a'.repeat(10_000)}.x`],
    ['dot segments', `v1.${sendId}..${unsubscribeToken(key, sendId).split('.').at(-1)}`],
    ['unicode key id', unsubscribeToken(key, sendId).replace('k-2026.1', 'k-2026\u00b71')],
  ])('refuses a %s token', (_name, token) => {
    expect(checkUnsubscribeToken(key, token).kind).toBe('invalid');
  });

  it('a non-canonical spelling of the same MAC bytes is refused', () => {
    const token = unsubscribeToken(key, sendId);
    const mac = token.split('.').at(-1) as string;
    // The last base64url character of a 32-byte MAC carries 2 unused bits; flipping them decodes to
    // the same bytes. Such a token is not one we issued.
    const alphabet = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_';
    const last = alphabet.indexOf(mac.at(-1) as string);
    const twin = mac.slice(0, -1) + alphabet[(last & ~3) | ((last + 1) & 3)];
    expect(Buffer.from(twin, 'base64url')).toEqual(Buffer.from(mac, 'base64url'));
    expect(checkUnsubscribeToken(key, token.slice(0, -mac.length) + twin)).toMatchObject({ reason: 'bad_signature' });
  });
});
