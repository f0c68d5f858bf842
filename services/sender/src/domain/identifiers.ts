/**
 * The identifiers our mail carries that outsiders echo back to us (ADR 012): the Message-ID, the
 * SMTP ENVID (RFC 3461) and the one-click unsubscribe token. A sendId alone is a UUIDv5 of
 * (campaign, candidate, step) under a namespace in the public code, and every email names its
 * campaign, so anyone could compute another person's sendId and write a bounce or an unsubscribe
 * for it. Each identifier therefore carries a MAC under the identifier key, which only the sender
 * holds, and nothing an outsider sends us names a send unless its MAC verifies.
 *
 *   send identifier     `<sendId>.<keyId>.<mac>`: 32 lower-case hex digits (128 bits of
 *                       HMAC-SHA256 under the key's "send" subkey over `sendId|keyId`). The
 *                       Message-ID is `<send identifier@MESSAGE_ID_DOMAIN>`, the ENVID the send
 *                       identifier itself (at most 86 characters: ENVID allows 100, RFC 3461 §4.4).
 *                       Deterministic per (send, key): a retry under the same key repeats it, and
 *                       the provider lookup finds the send by it.
 *   unsubscribe token   `v2.<sendId>.<keyId>.<mac>`, the same under the "unsubscribe" subkey, so a
 *                       Message-ID (seen by every relay on the way) is never also an unsubscribe link.
 *
 * Lower-case hex and key ids of `[a-z0-9-]` only: some mail systems change the case of a Message-ID
 * on the way back, and such a spelling still verifies (checkMessageId lower-cases it); an
 * unsubscribe path is checked exactly.
 *
 * Rotation: the current key signs; the previous one, with the instant its window ends, is still
 * verified until then and never signs. A key id names each; an identifier under any other id (a
 * retired key, a made-up one) names nothing.
 *
 * Pure: keys come in as bytes, `now` as a value.
 */
import { createHmac, hkdfSync, timingSafeEqual } from 'node:crypto';

/** What an identifier key id may be (it travels inside Message-IDs and ENVIDs). */
export const IDENTIFIER_KEY_ID = /^[a-z0-9][a-z0-9-]{0,15}$/;

export interface IdentifierKey {
  readonly id: string;
  /** The key's bytes as configured; subkeys per purpose are derived from them (HKDF). */
  readonly material: Buffer;
}

export interface IdentifierKeyring {
  /** Signs every new identifier, and verifies. */
  readonly current: IdentifierKey;
  /** The key before the last rotation: verifies until `until` (epoch ms), never signs. */
  readonly previous?: IdentifierKey & { readonly until: number };
}

/** Why an identifier names no send. `legacy`: the bare `<sendId@domain>` of mail sent before ADR 012. */
export type IdentifierRefusal = 'malformed' | 'legacy' | 'unknown_key' | 'expired_key' | 'bad_mac';

export type IdentifierCheck =
  | { readonly kind: 'valid'; readonly sendId: string; readonly keyId: string }
  | { readonly kind: 'invalid'; readonly reason: IdentifierRefusal };

/** A Message-ID as feedback carries it: none, another system's, or one at our domain (checked). */
export type MessageIdCheck = { readonly kind: 'none' } | { readonly kind: 'foreign' } | IdentifierCheck;

const SEND_ID = '[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}';
const KEY_ID = '[a-z0-9][a-z0-9-]{0,15}';
const MAC = '[0-9a-f]{32}';
const SEND_IDENTIFIER = new RegExp(`^(${SEND_ID})\\.(${KEY_ID})\\.(${MAC})$`);
const UNSUBSCRIBE_TOKEN = new RegExp(`^v2\\.(${SEND_ID})\\.(${KEY_ID})\\.(${MAC})$`);
const BARE_SEND_ID = new RegExp(`^${SEND_ID}$`);
const LOOKS_OURS = new RegExp(`^${SEND_ID}(?:\\.|$)`);
const MAC_BYTES = 16;

type Purpose = 'send' | 'unsubscribe';

interface HeldKey {
  readonly subkeys: Readonly<Record<Purpose, Buffer>>;
  /** Verifies until then (epoch ms); the current key has none. */
  readonly until?: number;
}

function subkeys(material: Buffer): Readonly<Record<Purpose, Buffer>> {
  const derive = (info: string) => Buffer.from(hkdfSync('sha256', material, Buffer.alloc(0), info, 32));
  return { send: derive('outreach send identifier 1'), unsubscribe: derive('outreach unsubscribe token 2') };
}

export class SendIdentifiers {
  /** The id of the key that signs: recorded on a send when it is attempted (`message_key_id`). */
  readonly currentKeyId: string;
  private readonly keys = new Map<string, HeldKey>();

  constructor(ring: IdentifierKeyring) {
    for (const key of [ring.current, ...(ring.previous ? [ring.previous] : [])])
      if (!IDENTIFIER_KEY_ID.test(key.id)) throw new Error(`identifier key id must match ${IDENTIFIER_KEY_ID.source}`);
    if (ring.previous?.id === ring.current.id) throw new Error('the previous identifier key needs its own id');
    this.currentKeyId = ring.current.id;
    this.keys.set(ring.current.id, { subkeys: subkeys(ring.current.material) });
    if (ring.previous)
      this.keys.set(ring.previous.id, { subkeys: subkeys(ring.previous.material), until: ring.previous.until });
  }

  /**
   * The send identifier under key `keyId` (the current one by default); undefined when that key is
   * not held any more (a send attempted under a key since retired).
   */
  sendIdentifier(sendId: string, keyId: string = this.currentKeyId): string | undefined {
    const key = this.keys.get(keyId);
    return key && `${sendId}.${keyId}.${mac(key.subkeys.send, sendId, keyId)}`;
  }

  /**
   * The Message-ID of a send attempted under `keyId`; null: attempted before identifiers were signed,
   * so its Message-ID was the bare `<sendId@domain>`. Undefined when that key is not held.
   */
  messageId(sendId: string, domain: string, keyId: string | null): string | undefined {
    if (keyId === null) return `<${sendId}@${domain}>`;
    const identifier = this.sendIdentifier(sendId, keyId);
    return identifier && `<${identifier}@${domain}>`;
  }

  /** Checks a send identifier (an ENVID, or a Message-ID's local part), exactly as given. */
  checkSendIdentifier(text: string, now: number): IdentifierCheck {
    if (text.length > 100) return { kind: 'invalid', reason: 'malformed' };
    if (BARE_SEND_ID.test(text)) return { kind: 'invalid', reason: 'legacy' };
    const parts = SEND_IDENTIFIER.exec(text);
    return parts ? this.verify('send', parts, now) : { kind: 'invalid', reason: 'malformed' };
  }

  /**
   * Checks a Message-ID in the form feedback carries (normalizeMessageId: no brackets, the domain
   * lower-cased): another domain is another system's; at ours, its local part must verify, in any
   * case (a relay may have changed it).
   */
  checkMessageId(messageId: string | undefined, domain: string, now: number): MessageIdCheck {
    if (messageId === undefined) return { kind: 'none' };
    const at = messageId.lastIndexOf('@');
    if (at <= 0 || messageId.slice(at + 1) !== domain.toLowerCase()) return { kind: 'foreign' };
    return this.checkSendIdentifier(messageId.slice(0, at).toLowerCase(), now);
  }

  /**
   * Checks an ENVID as a DSN echoes it (Original-Envelope-Id), in any case: one that does not begin
   * with a sendId is another sender's (or none of ours), not a forgery of ours.
   */
  checkEnvelopeId(envelopeId: string | undefined, now: number): MessageIdCheck {
    if (envelopeId === undefined) return { kind: 'none' };
    const lower = envelopeId.toLowerCase();
    if (!LOOKS_OURS.test(lower)) return { kind: 'foreign' };
    return this.checkSendIdentifier(lower, now);
  }

  /** The token of a send's one-click unsubscribe URL, under the current key. */
  unsubscribeToken(sendId: string): string {
    const key = this.keys.get(this.currentKeyId) as HeldKey;
    return `v2.${sendId}.${this.currentKeyId}.${mac(key.subkeys.unsubscribe, sendId, this.currentKeyId)}`;
  }

  /** Checks an unsubscribe token exactly as it arrived (already percent-decoded once by the router). */
  checkUnsubscribeToken(token: string, now: number): IdentifierCheck {
    if (token.length > 200) return { kind: 'invalid', reason: 'malformed' };
    const parts = UNSUBSCRIBE_TOKEN.exec(token);
    return parts ? this.verify('unsubscribe', parts, now) : { kind: 'invalid', reason: 'malformed' };
  }

  private verify(purpose: Purpose, [, sendId, keyId, given]: RegExpExecArray, now: number): IdentifierCheck {
    const key = this.keys.get(keyId as string);
    if (key === undefined) return { kind: 'invalid', reason: 'unknown_key' };
    if (key.until !== undefined && !(now < key.until)) return { kind: 'invalid', reason: 'expired_key' };
    const expected = Buffer.from(mac(key.subkeys[purpose], sendId as string, keyId as string), 'hex');
    if (!timingSafeEqual(Buffer.from(given as string, 'hex'), expected)) return { kind: 'invalid', reason: 'bad_mac' };
    return { kind: 'valid', sendId: sendId as string, keyId: keyId as string };
  }
}

function mac(subkey: Buffer, sendId: string, keyId: string): string {
  return createHmac('sha256', subkey)
    .update(`${sendId}|${keyId}`, 'utf8')
    .digest()
    .subarray(0, MAC_BYTES)
    .toString('hex');
}
