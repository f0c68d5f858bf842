import { addressCandidateKey } from '@outreach/contracts';
import { testEmailHashKey } from '@outreach/testkit';
import { describe, expect, it } from 'vitest';
import {
  conversationEventFrom,
  SEQUENCE_COMPLETED,
  type ConversationEventRequest,
  type IngressContext,
} from './conversation-event.js';

const hashKey = testEmailHashKey();
const context: IngressContext = {
  conversationId: ' Camp-1:cand-1\u200B ',
  now: 1_700_000_000_000,
  correlationId: 'corr-1',
  producer: 'planner-http',
  freshEventId: '11111111-1111-4111-8111-111111111111',
  hashKey,
};
const reply = (fields: Partial<ConversationEventRequest> = {}) =>
  ({
    type: 'MessageReceived',
    campaignId: 'Camp-1',
    candidateKey: 'cand-1',
    messageId: 'm-1',
    ...fields,
  }) as ConversationEventRequest;

describe('conversationEventFrom', () => {
  it('gives a reply its canonical keys, the envelope of the ingress and an id derived from its message id', () => {
    const first = conversationEventFrom(reply(), context);
    expect(first).toEqual({
      ok: true,
      event: {
        type: 'MessageReceived',
        eventId: expect.stringMatching(/^[0-9a-f]{8}-[0-9a-f]{4}-5/),
        occurredAt: context.now,
        producer: 'planner-http',
        correlationId: 'corr-1',
        causationId: null,
        // Case kept (an id from another system), invisible characters and spaces gone.
        conversationId: 'Camp-1:cand-1',
        campaignId: 'camp-1',
        candidateKey: 'cand-1',
        messageId: 'm-1',
      },
    });
    // Another spelling of the same message in the same conversation is the same event.
    const again = conversationEventFrom(reply({ campaignId: 'CAMP-1 ' }), {
      ...context,
      conversationId: 'Camp-1:cand-1',
    });
    expect(again.ok && first.ok && again.event.eventId).toBe(first.ok && first.event.eventId);
    const other = conversationEventFrom(reply({ messageId: 'm-2' }), context);
    expect(other.ok && first.ok && other.event.eventId).not.toBe(first.ok && first.event.eventId);
  });

  it("keeps the caller's event id, and makes a fresh one only when nothing identifies the fact", () => {
    const given = '22222222-2222-4222-8222-222222222222';
    expect(conversationEventFrom(reply({ eventId: given }), context)).toMatchObject({ event: { eventId: given } });
    expect(conversationEventFrom(reply({ messageId: null }), context)).toMatchObject({
      event: { eventId: context.freshEventId, messageId: null },
    });
    const close = { type: 'ConversationClosed', campaignId: 'c', candidateKey: 'k', reason: 'hired' } as const;
    expect(conversationEventFrom(close, context)).toMatchObject({ event: { eventId: context.freshEventId } });
    const step = { type: 'StepCompleted', campaignId: 'c', candidateKey: 'k', stepId: ' Call ' } as const;
    const completed = conversationEventFrom(step, context);
    expect(completed).toMatchObject({ ok: true, event: { stepId: 'call' } });
    expect(conversationEventFrom({ ...step, stepId: 'CALL' }, context)).toMatchObject({
      event: { eventId: completed.ok ? completed.event.eventId : '' },
    });
  });

  it('keys a candidate given as an address by its keyed hash, as the outreach ingress does', () => {
    const result = conversationEventFrom(reply({ candidateKey: 'Ada@Example.COM' }), context);
    expect(result).toMatchObject({ event: { candidateKey: addressCandidateKey('ada@example.com', hashKey) } });
  });

  it('refuses ids and reasons holding an address, naming the field and never the value', () => {
    const refused = (request: ConversationEventRequest, conversationId = 'conv-1') => {
      const result = conversationEventFrom(request, { ...context, conversationId });
      expect(result.ok).toBe(false);
      const reason = result.ok ? '' : result.reason;
      expect(reason).not.toMatch(/ada|example/i);
      return reason;
    };
    expect(refused(reply({ campaignId: 'ada@example.com' }))).toMatch(/campaignId must not contain an at-sign/);
    expect(refused(reply({ messageId: '<ada@example.com>' }))).toMatch(/messageId must not contain an at-sign/);
    expect(refused(reply(), 'ada\uFF20example.com')).toMatch(/conversationId must not contain an at-sign/);
    expect(
      refused({ type: 'ConversationClosed', campaignId: 'c', candidateKey: 'k', reason: 'moved to ada@example.com' }),
    ).toMatch(/reason must not contain an at-sign/);
    expect(refused({ type: 'StepCompleted', campaignId: 'c', candidateKey: 'k', stepId: 'ada%40example.com' })).toMatch(
      /stepId must not contain an at-sign/,
    );
  });

  it('refuses empty ids, control characters and the liveness service’s own close, with every reason', () => {
    const result = conversationEventFrom(reply({ campaignId: ' \u200B', candidateKey: 'a\nb' }), {
      ...context,
      conversationId: ' ',
    });
    expect(result).toEqual({
      ok: false,
      reason:
        'invalid MessageReceived: conversationId is empty or contains line breaks or control characters; ' +
        'campaignId is missing or empty; candidateKey contains line breaks or control characters',
    });
    const close = {
      type: 'ConversationClosed',
      campaignId: 'c',
      candidateKey: 'k',
      reason: SEQUENCE_COMPLETED,
    } as const;
    expect(conversationEventFrom(close, context)).toMatchObject({ ok: false, reason: /liveness service's own/ });
    expect(conversationEventFrom({ ...close, reason: null }, context)).toMatchObject({
      ok: true,
      event: { reason: null },
    });
  });
});
