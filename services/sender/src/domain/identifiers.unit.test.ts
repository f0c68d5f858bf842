import { sendIdFor } from '@outreach/contracts';
import { describe, expect, it } from 'vitest';
import { SendIdentifiers, type IdentifierKeyring } from './identifiers.js';

const DAY = 86_400_000;
const now = Date.parse('2026-03-01T00:00:00Z');
const key = (id: string, fill: number) => ({ id, material: Buffer.alloc(32, fill) });
const ring: IdentifierKeyring = { current: key('k2', 2), previous: { ...key('k1', 1), until: now + DAY } };
const ids = new SendIdentifiers(ring);
const before = new SendIdentifiers({ current: key('k1', 1) });
const stranger = new SendIdentifiers({ current: key('k2', 9) });
// An attacker computes the victim's sendId from the public namespace and the campaign in every email.
const victim = sendIdFor('camp-1', 'cand-victim', 'intro');
const other = sendIdFor('camp-1', 'cand-attacker', 'intro');
const DOMAIN = 'mail.acme-corp.com';

/** The local part of a Message-ID the sender makes for `sendId` under `maker`'s current key. */
const localOf = (maker: SendIdentifiers, sendId: string) =>
  (maker.messageId(sendId, DOMAIN, maker.currentKeyId) as string).slice(1, -1).split('@')[0] as string;

describe('send identifiers (Message-ID, ENVID)', () => {
  it('are deterministic per send and key, and verify', () => {
    const messageId = ids.messageId(victim, DOMAIN, 'k2');
    expect(messageId).toBe(ids.messageId(victim, DOMAIN, 'k2'));
    expect(messageId).toMatch(new RegExp(`^<${victim}\\.k2\\.[0-9a-f]{32}@${DOMAIN}>$`));
    const identifier = ids.sendIdentifier(victim) as string;
    expect(identifier.length).toBeLessThanOrEqual(100);
    expect(ids.checkSendIdentifier(identifier, now)).toEqual({ kind: 'valid', sendId: victim, keyId: 'k2' });
    expect(ids.checkMessageId(`${identifier}@${DOMAIN}`, DOMAIN, now)).toEqual({
      kind: 'valid',
      sendId: victim,
      keyId: 'k2',
    });
  });

  it('make the bare legacy Message-ID for a send attempted before them, and none under a key not held', () => {
    expect(ids.messageId(victim, DOMAIN, null)).toBe(`<${victim}@${DOMAIN}>`);
    expect(ids.messageId(victim, DOMAIN, 'k0')).toBeUndefined();
    expect(ids.messageId(victim, DOMAIN, 'k1')).toBe(before.messageId(victim, DOMAIN, 'k1'));
  });

  it.each([
    ['the bare sendId (legacy, or an attacker who only knows the sendId)', () => victim, 'legacy'],
    ['no MAC', () => `${victim}.k2`, 'malformed'],
    ['a MAC of zeros', () => `${victim}.k2.${'0'.repeat(32)}`, 'bad_mac'],
    ['the MAC of another send', () => localOf(ids, other).replace(other, victim), 'bad_mac'],
    ['another secret under the same key id', () => localOf(stranger, victim), 'bad_mac'],
    ['a key id never held', () => localOf(ids, victim).replace('.k2.', '.k9.'), 'unknown_key'],
    ['a truncated MAC', () => localOf(ids, victim).slice(0, -1), 'malformed'],
    ['a MAC one digit longer', () => `${localOf(ids, victim)}0`, 'malformed'],
    ['a non-hex MAC', () => `${localOf(ids, victim).slice(0, -1)}g`, 'malformed'],
    ['whitespace', () => ` ${localOf(ids, victim)}`, 'malformed'],
    ['a key id with a dot', () => `${victim}.k.2.${'0'.repeat(32)}`, 'malformed'],
    ['a huge input', () => `${victim}.${'a'.repeat(10_000)}`, 'malformed'],
  ])('name no send with %s', (_name, make, reason) => {
    expect(ids.checkMessageId(`${make()}@${DOMAIN}`, DOMAIN, now)).toEqual({ kind: 'invalid', reason });
  });

  it('verify in any case (a relay may change it), at our domain only', () => {
    const local = localOf(ids, victim);
    expect(ids.checkMessageId(`${local.toUpperCase()}@${DOMAIN}`, DOMAIN, now)).toMatchObject({ kind: 'valid' });
    expect(ids.checkMessageId(`${local}@elsewhere.example`, DOMAIN, now)).toEqual({ kind: 'foreign' });
    expect(ids.checkMessageId(`${local}@sub.${DOMAIN}`, DOMAIN, now)).toEqual({ kind: 'foreign' });
    expect(ids.checkMessageId(local, DOMAIN, now)).toEqual({ kind: 'foreign' });
    expect(ids.checkMessageId(undefined, DOMAIN, now)).toEqual({ kind: 'none' });
  });

  it('accept the previous key until its window ends, and never sign with it', () => {
    const underPrevious = localOf(before, victim);
    expect(ids.checkSendIdentifier(underPrevious, now + DAY - 1)).toEqual({
      kind: 'valid',
      sendId: victim,
      keyId: 'k1',
    });
    expect(ids.checkSendIdentifier(underPrevious, now + DAY)).toEqual({ kind: 'invalid', reason: 'expired_key' });
    expect(ids.sendIdentifier(victim)).toContain('.k2.');
    // A key retired from the ring (the window over and the setting removed) names nothing.
    expect(new SendIdentifiers({ current: key('k2', 2) }).checkSendIdentifier(underPrevious, now)).toEqual({
      kind: 'invalid',
      reason: 'unknown_key',
    });
  });

  it('read an ENVID of ours in any case; one that is not ours is foreign, not a forgery', () => {
    const envelopeId = ids.sendIdentifier(victim) as string;
    expect(ids.checkEnvelopeId(envelopeId.toUpperCase(), now)).toMatchObject({ kind: 'valid', sendId: victim });
    expect(ids.checkEnvelopeId(victim, now)).toEqual({ kind: 'invalid', reason: 'legacy' });
    expect(ids.checkEnvelopeId(`${victim}.k2.${'f'.repeat(32)}`, now)).toEqual({ kind: 'invalid', reason: 'bad_mac' });
    expect(ids.checkEnvelopeId('QQ1234.mta-envelope', now)).toEqual({ kind: 'foreign' });
    expect(ids.checkEnvelopeId(undefined, now)).toEqual({ kind: 'none' });
  });

  it('refuse a ring whose key ids are unfit or equal', () => {
    expect(() => new SendIdentifiers({ current: key('K2', 2) })).toThrow(/key id/);
    expect(() => new SendIdentifiers({ current: key('k.2', 2) })).toThrow(/key id/);
    expect(() => new SendIdentifiers({ current: key('k2', 2), previous: { ...key('k2', 1), until: now } })).toThrow(
      /own id/,
    );
  });
});

describe('unsubscribe tokens (v2)', () => {
  it('verify, and name their send', () => {
    const token = ids.unsubscribeToken(victim);
    expect(token).toMatch(new RegExp(`^v2\\.${victim}\\.k2\\.[0-9a-f]{32}$`));
    expect(ids.checkUnsubscribeToken(token, now)).toEqual({ kind: 'valid', sendId: victim, keyId: 'k2' });
  });

  it('are not send identifiers: the MAC from a Message-ID (seen by every relay) unsubscribes no one', () => {
    const fromMessageId = `v2.${localOf(ids, victim)}`;
    expect(ids.checkUnsubscribeToken(fromMessageId, now)).toEqual({ kind: 'invalid', reason: 'bad_mac' });
    const fromToken = ids.unsubscribeToken(victim).slice(3);
    expect(ids.checkSendIdentifier(fromToken, now)).toEqual({ kind: 'invalid', reason: 'bad_mac' });
  });

  it.each([
    ['the bare sendId', victim],
    ['upper case', ids.unsubscribeToken(victim).toUpperCase()],
    ['v1 prefix on a v2 MAC', ids.unsubscribeToken(victim).replace(/^v2/, 'v1')],
    ['a trailing newline', `${ids.unsubscribeToken(victim)}\n`],
    ['over 200 characters', `${ids.unsubscribeToken(victim)}${'0'.repeat(200)}`],
  ])('refuse %s', (_name, token) => {
    expect(ids.checkUnsubscribeToken(token, now)).toEqual({ kind: 'invalid', reason: 'malformed' });
  });

  it('for another send, or after the previous key window, are refused', () => {
    expect(ids.checkUnsubscribeToken(ids.unsubscribeToken(other).replace(other, victim), now)).toMatchObject({
      reason: 'bad_mac',
    });
    const old = before.unsubscribeToken(victim);
    expect(ids.checkUnsubscribeToken(old, now)).toMatchObject({ kind: 'valid' });
    expect(ids.checkUnsubscribeToken(old, now + DAY)).toMatchObject({ reason: 'expired_key' });
  });
});
