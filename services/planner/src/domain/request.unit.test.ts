import { addressCandidateKey, sendIdFor, type OutreachRequested } from '@outreach/contracts';
import { testEmailHashKey } from '@outreach/testkit';
import { describe, expect, it } from 'vitest';
import { requestEvent } from '../../test/requests.js';
import { chooseContent, UNKNOWN_EXPERIMENT, validateRequest as validate, variantCoverage } from './request.js';

const key = testEmailHashKey();
const validateRequest = (event: OutreachRequested) => validate(event, key);

const request = (fields: Partial<OutreachRequested> = {}) =>
  requestEvent({ candidateId: ' Jose\u0301 ', email: ' Jose@Example.COM ', ...fields });

describe('validateRequest', () => {
  it('normalizes once, at the edge, and derives the send id and conversation', () => {
    const result = validateRequest(request());
    expect(result).toMatchObject({
      ok: true,
      request: {
        candidateKey: 'Jos\u00e9',
        email: 'Jose@example.com',
        emailNorm: 'jose@example.com',
        conversationId: 'camp:Jos\u00e9',
        sendId: sendIdFor('camp', 'Jos\u00e9', 'intro'),
      },
    });
  });

  it('files a given conversation id in its canonical form, case kept, and derives one otherwise', () => {
    const given = validateRequest(request({ conversationId: ' Thread-\uff17\u200b ' }));
    expect(given.ok && given.request.conversationId).toBe('Thread-7');
    const invisible = validateRequest(request({ conversationId: '\u200b\ufeff' }));
    expect(invisible).toMatchObject({ ok: false, reason: expect.stringMatching(/conversationId is empty/) });
  });

  it('collapses spellings of campaign, step, candidate and address to the same keys', () => {
    const plain = validateRequest(
      request({ campaignId: 'camp-1', candidateId: 'Jos\u00e9', email: 'jose@example.com' }),
    );
    const variant = validateRequest(
      request({
        campaignId: ' Camp-\uff11\u200b',
        step: 'INTRO',
        email: ' JOSE@EXAMPLE.COM\ufeff',
        followUps: [{ step: ' Follow-Up', delayMs: 10, contents: [{ variant: null, subject: 's', body: 'b' }] }],
      }),
    );
    expect(plain.ok && variant.ok).toBe(true);
    if (!plain.ok || !variant.ok) return;
    for (const field of ['campaignId', 'candidateKey', 'step', 'emailNorm', 'sendId', 'conversationId'] as const)
      expect(variant.request[field]).toBe(plain.request[field]);
    expect(variant.request.followUps.map((f) => f.step)).toEqual(['follow-up']);
  });

  it.each([
    [{ campaignId: '' }, /campaignId is missing/],
    [
      { followUps: [{ step: 'INTRO', delayMs: 10, contents: [{ variant: null, subject: 's', body: 'b' }] }] },
      /follow-up steps must differ/,
    ],
    [{ email: 'not an address' }, /email is not a deliverable address/],
    [{ contents: [] }, /contents are empty/],
    [{ contents: [{ variant: null, subject: 'a\r\nBcc: x@y.z', body: 'b' }] }, /header injection/],
    [{ contents: [{ variant: null, subject: 's', body: 'x'.repeat(100_001) }] }, /larger than 100000 bytes/],
    [{ contents: [{ variant: 'A', subject: 's', body: 'b' }] }, /name variants but the request has no experimentId/],
    [
      { followUps: [{ step: 'intro', delayMs: 10, contents: [{ variant: null, subject: 's', body: 'b' }] }] },
      /follow-up steps must differ/,
    ],
    [
      { followUps: [{ step: 'f', delayMs: 0, contents: [{ variant: null, subject: 's', body: 'b' }] }] },
      /delayMs must be positive/,
    ],
  ] as Array<[Partial<OutreachRequested>, RegExp]>)('rejects %j with a reason', (fields, reason) => {
    const result = validateRequest(request(fields));
    expect(!result.ok && result.reason).toMatch(reason);
  });

  it.each([
    [{ campaignId: 'carol@leak.example' }, 'campaignId'],
    [{ step: 'dave@leak.example' }, 'step'],
    [{ requestId: 'gina@leak.example' }, 'requestId'],
    [{ experimentId: 'frank@leak.example' }, 'experimentId'],
    [{ conversationId: 'olga@leak.example' }, 'conversationId'],
    [
      { followUps: [{ step: 'f@leak.example', delayMs: 10, contents: [{ variant: null, subject: 's', body: 'b' }] }] },
      'followUps[0].step',
    ],
  ] as Array<[Partial<OutreachRequested>, string]>)(
    'refuses an id holding an address (%j), naming %s and never quoting it',
    (fields, field) => {
      const result = validateRequest(request(fields));
      expect(!result.ok && result.reason).toContain(`${field} must not contain an at-sign`);
      expect(!result.ok && result.reason).not.toMatch(/leak/);
    },
  );

  it('keys a candidate whose id is an address by its keyed hash, in the send id and the conversation too', () => {
    const result = validateRequest(request({ candidateId: 'Bob@Leak.Example', correlationId: 'ada@leak.example' }));
    expect(result.ok).toBe(true);
    if (!result.ok) return;
    const candidateKey = addressCandidateKey('bob@leak.example', key);
    expect(result.request).toMatchObject({
      candidateKey,
      conversationId: `camp:${candidateKey}`,
      sendId: sendIdFor('camp', candidateKey, 'intro'),
    });
    const { candidateId: _raw, email: _email, emailNorm: _norm, ...travelling } = result.request;
    expect(JSON.stringify(travelling)).not.toMatch(/leak/i);
  });
});

describe('chooseContent', () => {
  const contents = [
    { variant: 'A', subject: 'a', body: 'a' },
    { variant: 'B', subject: 'b', body: 'b' },
  ];
  it("takes the sticky variant's content, never another", () => {
    expect(chooseContent(contents, { enrolled: true, variant: 'B' })).toMatchObject({
      ok: true,
      variant: 'B',
      content: { subject: 'b' },
    });
    expect(chooseContent(contents, { enrolled: true, variant: 'C' })).toEqual({
      ok: false,
      reason: 'request has no content for the assigned variant C',
      code: 'no_content_for_variant',
    });
  });
  it('uses shared variant-less content for an enrolled candidate, still tagged with its variant', () => {
    expect(chooseContent([{ variant: null, subject: 's', body: 'b' }], { enrolled: true, variant: 'A' })).toMatchObject(
      { ok: true, variant: 'A', content: { subject: 's' } },
    );
  });

  it('gives a candidate who is not enrolled the default content, or a reason', () => {
    expect(
      chooseContent([...contents, { variant: null, subject: 'd', body: 'd' }], { enrolled: false, reason: 'paused' }),
    ).toMatchObject({ ok: true, variant: null });
    expect(chooseContent(contents, { enrolled: false, reason: 'experiment is paused' })).toMatchObject({
      ok: false,
      reason: expect.stringMatching(/not enrolled/),
      code: 'no_default_content',
    });
  });
});

describe('variantCoverage (the rule the HTTP ingress applies before accepting a request)', () => {
  const arms = [
    { variant: 'A', subject: 'a', body: 'a' },
    { variant: 'B', subject: 'b', body: 'b' },
  ];
  const shared = { variant: null, subject: 's', body: 's' };

  it('given every variant has content, or a default covers the rest, then accepted', () => {
    expect(variantCoverage(arms, ['A', 'B'])).toEqual({ ok: true });
    expect(variantCoverage([arms[0] as (typeof arms)[number], shared], ['A', 'B', 'C'])).toEqual({ ok: true });
    expect(variantCoverage([shared], ['A'])).toEqual({ ok: true });
  });

  it('given a variant with no content and no default, then refused, naming each missing variant', () => {
    expect(variantCoverage(arms, ['A', 'B', 'C', 'D'])).toEqual({
      ok: false,
      reason: 'no content for variant(s) C, D of the experiment (and no content without a variant)',
      code: 'no_content_for_variant',
    });
  });

  it('given no such experiment, then refused', () => {
    expect(variantCoverage(arms, null)).toEqual({ ok: false, reason: UNKNOWN_EXPERIMENT, code: 'unknown_experiment' });
  });

  it('refuses exactly when some candidate enrolled in a variant would find no content (chooseContent)', () => {
    const contentSets = [
      arms,
      [arms[0] as (typeof arms)[number]],
      [shared],
      [arms[1] as (typeof arms)[number], shared],
    ];
    const variantSets = [[], ['A'], ['B'], ['A', 'B'], ['C']];
    for (const contents of contentSets)
      for (const variants of variantSets)
        expect(variantCoverage(contents, variants).ok).toBe(
          variants.every((variant) => chooseContent(contents, { enrolled: true, variant }).ok),
        );
  });
});
