import { sendIdFor, type SendRequested } from '@outreach/shared';
import { describe, expect, it } from 'vitest';
import { validateSendRequest } from './request.js';

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
    sendId: sendIdFor(campaignId, candidateId.trim().normalize('NFC'), step),
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
      send: { email: 'Ada@Example.COM', emailNorm: 'ada@example.com', candidateKey: 'cand-1' },
    });
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
    [{ step: '' }, /step is empty/],
    [{ experimentId: 'exp' }, /experimentId and variant must be given together/],
    [{ sendId: '6f9e3c1e-4b2a-5f0e-9d7c-5a3b1e0f2d4c' }, /sendId .* is not the id of/],
  ] as Array<[Partial<SendRequested>, RegExp]>)('rejects %j with a reason', (fields, reason) => {
    const result = validateSendRequest(request(fields));
    expect(result.ok).toBe(false);
    expect(!result.ok && result.reason).toMatch(reason);
  });
});
