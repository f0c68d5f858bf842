import { createHash, createSecretKey } from 'node:crypto';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import {
  canonicalAddress,
  canonicalCampaignId,
  canonicalSendKeys,
  canonicalStep,
  emailHash,
  normalizeCandidateKey,
  normalizeEmail,
  sendIdFor,
} from './keys.js';

describe('canonical keys', () => {
  it.each([
    [
      'campaign',
      canonicalCampaignId,
      ['camp-1', 'camp-1 ', ' CAMP-1', 'Camp\u200b-1', 'camp-\uff11', '\ufeffcamp-1\u3000'],
    ],
    ['step', canonicalStep, ['intro', 'Intro', ' INTRO\u200d', 'in\u2060tro', '\uff49\uff4e\uff54\uff52\uff4f']],
    ['candidate', normalizeCandidateKey, ['Jos\u00e9', ' Jose\u0301 ', 'Jos\u200b\u00e9', '\ufeffJos\u00e9\u00a0']],
    [
      'address',
      normalizeEmail,
      [
        'ada@example.com',
        ' Ada@Example.COM ',
        'ada\u200b@example.com',
        'ada@\uff45\uff58\uff41\uff4d\uff50\uff4c\uff45.com',
        'ADA@EXAMPLE.COM\ufeff',
      ],
    ],
  ] as Array<[string, (value: string) => string, string[]]>)(
    '%s: every variant has one canonical form',
    (_, fold, variants) => {
      const forms = new Set(variants.map(fold));
      expect([...forms]).toHaveLength(1);
    },
  );

  it('keeps what distinguishes: candidate case, plus-tags, dots, internal spaces', () => {
    expect(normalizeCandidateKey('Cand-1')).not.toBe(normalizeCandidateKey('cand-1'));
    expect(normalizeEmail('ada+jobs@example.com')).not.toBe(normalizeEmail('ada@example.com'));
    expect(normalizeEmail('a.da@example.com')).not.toBe(normalizeEmail('ada@example.com'));
    expect(canonicalCampaignId('camp 1')).not.toBe(canonicalCampaignId('camp1'));
  });

  it('folds case beyond ASCII for campaigns and steps (ß = ss, final sigma)', () => {
    expect(canonicalStep('STRASSE')).toBe(canonicalStep('Straße'));
    expect(canonicalCampaignId('ΟΔΟΣ')).toBe(canonicalCampaignId('οδος'));
  });

  it('is a fixed point: canonicalizing a canonical key changes nothing', () => {
    fc.assert(
      fc.property(
        fc.oneof(fc.string({ unit: 'grapheme', maxLength: 40 }), fc.string({ unit: 'binary', maxLength: 40 })),
        (raw) => {
          for (const fold of [canonicalCampaignId, canonicalStep, normalizeCandidateKey, normalizeEmail]) {
            const once = fold(raw);
            expect(fold(once)).toBe(once);
          }
        },
      ),
      { numRuns: 5_000 },
    );
  });

  it('derives the send id from canonical keys, whatever spelling the caller passes', () => {
    expect(sendIdFor(' Camp-1', 'cand\u200b-1', 'Intro ')).toBe(sendIdFor('camp-1', 'cand-1', 'intro'));
    expect(sendIdFor('camp-1', 'Cand-1', 'intro')).not.toBe(sendIdFor('camp-1', 'cand-1', 'intro'));
  });
});

describe('canonicalAddress', () => {
  it('maps the domain through IDNA to ASCII and keeps the local part as given for mailing', () => {
    expect(canonicalAddress(' Ada@B\u00fccher.DE ')).toEqual({
      address: 'Ada@xn--bcher-kva.de',
      norm: 'ada@xn--bcher-kva.de',
    });
    expect(normalizeEmail('ada@xn--bcher-kva.de')).toBe(normalizeEmail('ADA@bücher.de'));
  });

  it('refuses, rather than rewrites, a local part that is not ASCII after NFC', () => {
    expect(canonicalAddress('\uff41\uff44\uff41@example.com')).toBeNull();
    expect(canonicalAddress('j\u00f6rg@example.com')).toBeNull();
  });

  it.each([
    'no-at-sign',
    'a@b',
    'a b@example.com',
    'a@example.com\r\nBcc: x@example.com',
    '@example.com',
    'ada@',
    'ada@example.com.',
    'ada@exa mple.com',
    `${'a'.repeat(65)}@example.com`,
    `ada@${'a'.repeat(63)}.${'b'.repeat(63)}.${'c'.repeat(63)}.${'d'.repeat(63)}.com`,
    '\u200b',
  ])('refuses %j', (raw) => {
    expect(canonicalAddress(raw)).toBeNull();
  });

  it('accepts a 254-character address and refuses 255', () => {
    const address = (lastLabel: number) =>
      `${'l'.repeat(64)}@${'d'.repeat(63)}.${'e'.repeat(63)}.${'f'.repeat(lastLabel)}.com`;
    expect(address(57)).toHaveLength(254);
    expect(canonicalAddress(address(57))).not.toBeNull();
    expect(canonicalAddress(address(58))).toBeNull();
  });
});

describe('canonicalSendKeys', () => {
  it('collapses the variants of one send to one set of keys', () => {
    const a = canonicalSendKeys({
      campaignId: 'camp-1',
      candidateId: 'cand-1',
      step: 'intro',
      email: 'ada@example.com',
    });
    const b = canonicalSendKeys({
      campaignId: 'CAMP-1 ',
      candidateId: '\u200bcand-1',
      step: 'Intro',
      email: ' ADA@Example.com\ufeff',
    });
    expect(a.ok && b.ok).toBe(true);
    if (!a.ok || !b.ok) return;
    expect(b.keys).toEqual({ ...a.keys, email: 'ADA@example.com' });
    expect(b.keys.sendId).toBe(a.keys.sendId);
  });

  it('names the fields it refuses, never their values', () => {
    const result = canonicalSendKeys({
      campaignId: '\u200b ',
      candidateId: 'x\ny',
      step: 's'.repeat(300),
      email: 'secret.person@',
    });
    expect(result).toEqual({
      ok: false,
      problems: [
        'campaignId is missing or empty',
        'candidateId contains line breaks or control characters',
        'step is longer than 256 characters',
        'email is not a deliverable address',
      ],
    });
    expect(JSON.stringify(result)).not.toContain('secret.person');
  });
});

describe('emailHash', () => {
  const key = { id: 'k1', secret: createSecretKey(Buffer.from('k'.repeat(32))) };

  it('is an HMAC: not the unsalted SHA-256 a list of addresses reverses, and different per key', () => {
    const hash = emailHash('ada@example.com', key);
    expect(hash).toMatch(/^[0-9a-f]{64}$/);
    expect(hash).not.toBe(createHash('sha256').update('ada@example.com').digest('hex'));
    expect(emailHash('ada@example.com', { id: 'k2', secret: createSecretKey(Buffer.from('j'.repeat(32))) })).not.toBe(
      hash,
    );
    expect(emailHash(normalizeEmail(' ADA@example.COM'), key)).toBe(hash);
  });

  it('keeps its secret out of logs and JSON', () => {
    expect(JSON.stringify(key)).not.toContain('kkkk');
  });
});
