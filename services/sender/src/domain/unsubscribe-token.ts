/**
 * The `v1.` one-click unsubscribe tokens (RFC 8058) of mail sent before ADR 012: checked, never made
 * any more (new mail carries `v2.` tokens under the identifier key, domain/identifiers.ts). The
 * sendId alone is derived from known inputs (campaign, candidate, step), so a URL holding only it
 * would let anyone unsubscribe anyone; the token adds an HMAC that only the platform can make.
 *
 * The MAC key is derived (HKDF) from the emailHash key with its own label. A token names the key id
 * it was made with; tokens from a retired emailHash key are refused (the page then points to the
 * mailto, which still works). `unsubscribeToken` makes one for tests of that acceptance.
 */
import { createHmac, hkdfSync, timingSafeEqual, type KeyObject } from 'node:crypto';

export interface UnsubscribeKey {
  readonly id: string;
  readonly mac: Buffer;
}

// One derivation per emailHash key object: every email's headers are composed with it.
const derived = new WeakMap<object, UnsubscribeKey>();

export function unsubscribeKey(emailHashKey: { readonly id: string; readonly secret: KeyObject }): UnsubscribeKey {
  const known = derived.get(emailHashKey);
  if (known) return known;
  const mac = Buffer.from(
    hkdfSync('sha256', emailHashKey.secret.export(), Buffer.alloc(0), 'outreach unsubscribe token v1', 32),
  );
  const key = { id: emailHashKey.id, mac };
  derived.set(emailHashKey, key);
  return key;
}

const SEND_ID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;
const KEY_ID = /^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$/;
const MAC = /^[A-Za-z0-9_-]{43}$/;

function macOf(key: UnsubscribeKey, sendId: string): Buffer {
  return createHmac('sha256', key.mac).update(`v1|${sendId}|${key.id}`, 'utf8').digest();
}

export function unsubscribeToken(key: UnsubscribeKey, sendId: string): string {
  return `v1.${sendId}.${key.id}.${macOf(key, sendId).toString('base64url')}`;
}

export type TokenCheck =
  | { readonly kind: 'valid'; readonly sendId: string }
  | { readonly kind: 'invalid'; readonly reason: 'malformed' | 'unknown_key' | 'bad_signature' };

/** Checks a token as it arrived in the path (already percent-decoded once by the router). */
export function checkUnsubscribeToken(key: UnsubscribeKey, token: string): TokenCheck {
  if (token.length > 200) return { kind: 'invalid', reason: 'malformed' };
  const parts = token.split('.');
  // The key id may hold dots; the version, send id and MAC never do.
  if (parts.length < 4 || parts[0] !== 'v1') return { kind: 'invalid', reason: 'malformed' };
  const sendId = parts[1] as string;
  const mac = parts.at(-1) as string;
  const keyId = parts.slice(2, -1).join('.');
  if (!SEND_ID.test(sendId) || !KEY_ID.test(keyId) || !MAC.test(mac)) return { kind: 'invalid', reason: 'malformed' };
  if (keyId !== key.id) return { kind: 'invalid', reason: 'unknown_key' };
  const given = Buffer.from(mac, 'base64url');
  const expected = macOf(key, sendId);
  // A canonical base64url spelling only: a second spelling of the same bytes is not the same token.
  if (given.length !== expected.length || given.toString('base64url') !== mac || !timingSafeEqual(given, expected))
    return { kind: 'invalid', reason: 'bad_signature' };
  return { kind: 'valid', sendId };
}
