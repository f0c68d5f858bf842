import { emailHash, sendIdFor, type SendRequested } from '@outreach/contracts';
import { testEmailHashKey } from '@outreach/testkit';
import { describe, expect, it } from 'vitest';
import { validateSendRequest as validate } from './request.js';

const key = testEmailHashKey();
const validateSendRequest = (event: SendRequested) => validate(event, key);

function request(fields: Partial<SendRequested> = {}): SendRequested {
  const campaignId = fields.campaignId ?? 'camp';
  const candidateId = fields.candidateId ?? 'cand-1';
  const step = fields.step ?? 'intro';
  return {
    type: 'SendRequested',
    eventId: '0b7f9a52-4a67-4e35-8b0c-1d7a3f1e9c11',
    occurredAt: 0,
    producer: 'test',
    correlationId: 'corr',
    causationId: null,
    sendId: sendIdFor(campaignId, candidateId, step),
    requestId: 'req',
    campaignId,
    candidateId,
    candidateKey: candidateId,
    email: 'Ada@Example.com',
    emailNorm: 'ada@example.com',
    step,
    experimentId: null,
    variant: null,
    subject: 'Hello',
    body: 'Body',
    scheduledFor: null,
    conversationId: null,
    ...fields,
  };
}

describe('validateSendRequest', () => {
  it('accepts a well-formed request and derives every key itself', () => {
    const result = validateSendRequest(
      request({ email: '  Ada@Example.COM ', emailNorm: 'whatever the producer said' }),
    );
    expect(result).toMatchObject({
      ok: true,
      send: {
        email: 'Ada@example.com',
        emailNorm: 'ada@example.com',
        candidateKey: 'cand-1',
        emailHash: emailHash('ada@example.com', key),
        emailHashKeyId: key.id,
      },
    });
  });

  it('collapses spellings of one send to one sendId and one set of keys, whatever the producer derived', () => {
    const canonical = validateSendRequest(request());
    const variant = validateSendRequest(
      request({
        campaignId: ' CAMP\u200b',
        candidateId: '\ufeffcand-1 ',
        step: 'Intro',
        email: 'ADA@EXAMPLE.com\u200b',
        sendId: sendIdFor('camp', 'cand-1', 'intro'),
      }),
    );
    expect(canonical.ok && variant.ok).toBe(true);
    if (!canonical.ok || !variant.ok) return;
    // candidateId stays as the caller sent it (it is not a key); everything derived is identical.
    expect(variant.send).toEqual({ ...canonical.send, email: 'ADA@example.com', candidateId: '\ufeffcand-1 ' });
  });

  it('refuses with reasons that never repeat the address', () => {
    const result = validateSendRequest(request({ email: 'ada.secret@', subject: '' }));
    expect(result.ok).toBe(false);
    expect(JSON.stringify(result)).not.toContain('ada.secret');
  });

  it('normalizes candidate ids (trim, NFC) but keeps their case', () => {
    const decomposed = 'Jose\u0301';
    const result = validateSendRequest(request({ candidateId: ` ${decomposed} ` }));
    expect(result.ok && result.send.candidateKey).toBe('Jos\u00e9');
    const upper = validateSendRequest(request({ candidateId: 'CAND-1' }));
    expect(upper.ok && upper.send.sendId).not.toBe(sendIdFor('camp', 'cand-1', 'intro'));
  });

  it.each([
    [{ email: 'no-at-sign' }, /email is not a deliverable address/],
    [{ email: 'a@b' }, /email is not a deliverable address/],
    [{ email: 'a b@example.com' }, /email is not a deliverable address/],
    [{ email: 'a@example.com\r\nBcc: x@example.com' }, /email is not a deliverable address/],
    [{ subject: 'Hi\nBcc: victim@example.com' }, /header injection/],
    [{ subject: '   ' }, /subject is empty/],
    [{ body: '' }, /body is empty/],
    [{ step: '' }, /step is missing or empty/],
    [{ campaignId: '\u200b' }, /campaignId is missing or empty/],
    [{ email: '\uff41da@example.com' }, /email is not a deliverable address/],
    [{ experimentId: 'exp' }, /experimentId and variant must be given together/],
    [{ sendId: '6f9e3c1e-4b2a-5f0e-9d7c-5a3b1e0f2d4c' }, /sendId is not the id of/],
  ] as Array<[Partial<SendRequested>, RegExp]>)('rejects %j with a reason', (fields, reason) => {
    const result = validateSendRequest(request(fields));
    expect(result.ok).toBe(false);
    expect(!result.ok && result.reason).toMatch(reason);
  });
});
