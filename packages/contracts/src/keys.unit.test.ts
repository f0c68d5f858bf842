import { createHash, createSecretKey } from 'node:crypto';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import {
  addressCandidateKey,
  canonicalAddress,
  canonicalCampaignId,
  canonicalCorrelationId,
  canonicalSendKeys,
  canonicalStep,
  candidateKeyFor,
  emailHash,
  exactIdProblem,
  idProblem,
  normalizeCandidateKey,
  normalizeEmail,
  sendIdFor,
  uuidV5,
  type RawSendKeys,
} from './keys.js';

const hashKey = { id: 'k1', secret: createSecretKey(Buffer.from('k'.repeat(32))) };
const EVENT_ID = '0b7f9a52-4a67-4e35-8b0c-1d7a3f1e9c11';
const raw = (fields: Partial<RawSendKeys> = {}): RawSendKeys => ({
  eventId: EVENT_ID,
  correlationId: 'corr-1',
  requestId: 'req-1',
  campaignId: 'camp-1',
  candidateId: 'cand-1',
  step: 'intro',
  email: 'ada@example.com',
  experimentId: null,
  ...fields,
});

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

  it('collapses the examples the Keys table (schemas/README.md) gives', () => {
    expect(canonicalCampaignId('CAMP-\uff11')).toBe('camp-1');
    expect(canonicalCampaignId(' Camp-1\u200b')).toBe('camp-1');
    for (const step of ['Intro', ' intro', 'intro\u200b', '\uff29\uff4e\uff54\uff52\uff4f', '\u3164intro'])
      expect(canonicalStep(step), JSON.stringify(step)).toBe('intro');
    for (const candidate of ['cand-1', ' cand-1\ufeff', 'cand-\uff11'])
      expect(normalizeCandidateKey(candidate), JSON.stringify(candidate)).toBe('cand-1');
    for (const address of [
      'Ada@Example.COM',
      ' ada@example.com\u200b',
      'ada@\uff25\uff38\uff21\uff2d\uff30\uff2c\uff25.com',
    ])
      expect(normalizeEmail(address), JSON.stringify(address)).toBe('ada@example.com');
    for (const address of ['ada@b\u00fccher.de', 'ada@bu\u0308cher.de', 'ada@XN--BCHER-KVA.DE', 'ADA@B\u00dcCHER.DE'])
      expect(normalizeEmail(address), JSON.stringify(address)).toBe('ada@xn--bcher-kva.de');
  });

  it('does not fold dashes: NFKC leaves U+2010 HYPHEN alone, and so does the campaign id (keys.ts says so)', () => {
    // `camp‐1` (U+2010) is a look-alike of `camp-1`, not a compatibility form of it.
    expect(canonicalCampaignId('camp\u2010\uff11\u200b')).toBe('camp\u20101');
    expect(canonicalCampaignId('camp\u2010\uff11')).not.toBe(canonicalCampaignId('camp-1'));
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
    const a = canonicalSendKeys(raw(), hashKey);
    const b = canonicalSendKeys(
      raw({ campaignId: 'CAMP-1 ', candidateId: '\u200bcand-1', step: 'Intro', email: ' ADA@Example.com\ufeff' }),
      hashKey,
    );
    expect(a.ok && b.ok).toBe(true);
    if (!a.ok || !b.ok) return;
    expect(b.keys).toEqual({ ...a.keys, email: 'ADA@example.com' });
    expect(b.keys.sendId).toBe(a.keys.sendId);
  });

  it('names the fields it refuses, never their values', () => {
    const result = canonicalSendKeys(
      raw({ campaignId: '\u200b ', candidateId: 'x\ny', step: 's'.repeat(300), email: 'secret.person@' }),
      hashKey,
    );
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

  it.each([
    ['campaignId', { campaignId: 'carol@leak.example' }],
    ['campaignId', { campaignId: 'carol\u200b@leak.example' }],
    ['campaignId', { campaignId: 'carol\uff20leak.example' }],
    ['campaignId', { campaignId: 'carol%40leak.example' }],
    ['step', { step: 'dave@leak.example' }],
    ['requestId', { requestId: 'gina@leak.example' }],
    ['experimentId', { experimentId: 'frank@leak.example' }],
    ['variant', { variant: 'v@leak.example' }],
    ['conversationId', { conversationId: 'thread:olga@leak.example' }],
  ] as Array<[string, Partial<RawSendKeys>]>)('refuses an at-sign in %s without quoting it (%j)', (field, fields) => {
    const result = canonicalSendKeys(raw(fields), hashKey);
    expect(result).toEqual({
      ok: false,
      problems: [`${field} must not contain an at-sign (ids travel on topics free of addresses)`],
    });
    expect(JSON.stringify(result)).not.toMatch(/leak/);
  });

  it.each([
    ['campaignId', { campaignId: '..' }],
    ['campaignId', { campaignId: ' . ' }],
    ['step', { step: '.' }],
    ['requestId', { requestId: '..' }],
    ['experimentId', { experimentId: '.' }],
    ['variant', { variant: '..' }],
  ] as Array<[string, Partial<RawSendKeys>]>)('refuses a dot segment as %s (%j): URLs collapse it', (field, fields) => {
    const result = canonicalSendKeys(raw({ experimentId: 'exp-1', variant: 'a', ...fields }), hashKey);
    expect(result.ok).toBe(false);
    expect(!result.ok && result.problems.join('; ')).toMatch(new RegExp(`${field} (must not be "\\." or|has leading)`));
  });

  it('keeps ids that merely hold dots', () => {
    for (const campaignId of ['...', '.hidden', 'a.b', '..x']) {
      expect(canonicalSendKeys(raw({ campaignId }), hashKey).ok, campaignId).toBe(true);
    }
  });

  it('refuses an event id that is not a UUID (it travels on as causationId)', () => {
    expect(canonicalSendKeys(raw({ eventId: 'eve@leak.example' }), hashKey)).toEqual({
      ok: false,
      problems: ['eventId is not a UUID'],
    });
  });

  it('replaces a correlation id that is not a plain token with one derived from the event id', () => {
    for (const correlationId of ['ada@leak.example', 'x'.repeat(129), 'a b', 'line\nbreak', '']) {
      const result = canonicalSendKeys(raw({ correlationId }), hashKey);
      expect(result.ok && result.keys.correlationId, JSON.stringify(correlationId)).toBe(
        uuidV5('correlation', EVENT_ID),
      );
    }
    const kept = canonicalSendKeys(raw({ correlationId: 'corr-1' }), hashKey);
    expect(kept.ok && kept.keys.correlationId).toBe('corr-1');
    expect(canonicalCorrelationId('bad id', EVENT_ID)).toBe(canonicalCorrelationId('other bad id', EVENT_ID));
  });

  it("files a candidate whose id is an address under the address's keyed hash, as the backfill does", () => {
    const result = canonicalSendKeys(raw({ candidateId: ' Bob@Leak.Example\u200b' }), hashKey);
    expect(result.ok).toBe(true);
    if (!result.ok) return;
    const pseudonym = addressCandidateKey('bob@leak.example', hashKey);
    expect(pseudonym).toBe(`address:k1:${emailHash('bob@leak.example', hashKey)}`);
    expect(result.keys.candidateKey).toBe(pseudonym);
    expect(result.keys.sendId).toBe(sendIdFor('camp-1', pseudonym, 'intro'));
    expect(JSON.stringify(result.keys)).not.toMatch(/leak/i);
    // Every spelling of the address is one candidate; ids without an at-sign keep their case.
    expect(candidateKeyFor('bob\uff20leak.example', hashKey)).toBe(pseudonym);
    expect(candidateKeyFor('Cand-1', hashKey)).toBe('Cand-1');
  });

  it("keeps a producer's address key made under another key id (a rotation in flight), never a made-up one", () => {
    const old = { id: 'k0', secret: createSecretKey(Buffer.from('o'.repeat(32))) };
    const underOld = addressCandidateKey('bob@leak.example', old);
    const kept = canonicalSendKeys(raw({ candidateId: 'bob@leak.example', candidateKey: underOld }), hashKey);
    expect(kept.ok && kept.keys.candidateKey).toBe(underOld);
    for (const claimed of ['bob@leak.example', `address:k1:${'0'.repeat(64)}`, 'cand-1']) {
      const derived = canonicalSendKeys(raw({ candidateId: 'bob@leak.example', candidateKey: claimed }), hashKey);
      expect(derived.ok && derived.keys.candidateKey).toBe(addressCandidateKey('bob@leak.example', hashKey));
    }
  });
});

describe('exactIdProblem (ids stored and published as given)', () => {
  it.each([
    ['req ', 'requestId has leading or trailing whitespace'],
    ['\u3000req', 'requestId has leading or trailing whitespace'],
    [`req${'\u2003'.repeat(3000)}`, 'requestId has leading or trailing whitespace'],
    ['req\n', 'requestId contains line breaks or control characters'],
    ['re\u0085q', 'requestId contains line breaks or control characters'],
    ['re\ud800q', 'requestId is not well-formed Unicode (a lone surrogate)'],
    ['\u4e00'.repeat(171), 'requestId is longer than 512 bytes in UTF-8'],
  ])('refuses %j as it is, never a trimmed copy', (value, problem) => {
    expect(exactIdProblem('requestId', value)).toBe(problem);
  });

  it('takes an id within every bound, a paired surrogate included', () => {
    expect(exactIdProblem('requestId', `ats-${'\u4e00'.repeat(169)}`)).toBeUndefined();
    expect(exactIdProblem('requestId', 'ats-\u{1F600}-7')).toBeUndefined();
  });
});

describe('idProblem', () => {
  it('refuses an at-sign however it is spelled, after canonicalization', () => {
    for (const spelling of ['a@b', 'a\u200b@b', 'a\uff20b', 'a\ufe6bb', 'a%40b'])
      expect(idProblem('campaignId', canonicalCampaignId(spelling)), JSON.stringify(spelling)).toMatch(/at-sign/);
    expect(idProblem('campaignId', 'camp-1')).toBeUndefined();
  });
});

describe('emailHash', () => {
  const key = hashKey;

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
