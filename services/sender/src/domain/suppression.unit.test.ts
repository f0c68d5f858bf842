import { describe, expect, it } from 'vitest';
import type { DeliveryFeedback, FeedbackKind, FeedbackSource } from './feedback/index.js';
import {
  addressSuppressed,
  decideFeedback,
  EVENT_REASON,
  feedbackEventId,
  SUPPRESSION_REASONS,
  type SendMatch,
} from './suppression.js';

const sendId = '0b6f1d2e-8a3c-5e4f-9a1b-2c3d4e5f6a7b';
const ours: SendMatch = { sendId, campaignId: 'camp-1', emailNorm: 'ada@example.com' };
const at = new Date('2026-01-15T10:00:00Z');

const report = (
  kind: FeedbackKind,
  source: FeedbackSource = 'ses',
  extra: Partial<DeliveryFeedback> = {},
): DeliveryFeedback => ({ kind, source, recipient: 'ada@example.com', at, ...extra });

describe('decideFeedback: given a report and the send its Message-ID names', () => {
  it('a hard bounce or a complaint suppresses, tied to our send to that recipient', () => {
    expect(decideFeedback(report('hard_bounce'), ours)).toEqual({
      kind: 'suppress',
      reason: 'bounce',
      send: { sendId, campaignId: 'camp-1' },
    });
    expect(decideFeedback(report('complaint', 'sendgrid'), ours)).toMatchObject({
      kind: 'suppress',
      reason: 'complaint',
    });
  });

  it('a signed report that names no send of ours still suppresses its recipient, with no send', () => {
    expect(decideFeedback(report('hard_bounce', 'ses'), undefined)).toEqual({
      kind: 'suppress',
      reason: 'bounce',
      send: null,
    });
    expect(decideFeedback(report('complaint', 'sendgrid'), undefined)).toMatchObject({ kind: 'suppress', send: null });
  });

  it('our Message-ID on a report about another recipient ties it to no send', () => {
    const other = { ...ours, emailNorm: 'someone-else@example.com' };
    expect(decideFeedback(report('hard_bounce', 'ses'), other)).toMatchObject({ kind: 'suppress', send: null });
    expect(decideFeedback(report('soft_bounce', 'ses'), other)).toEqual({ kind: 'record', send: null });
  });

  it('a DSN acts only on a send of ours to that same recipient', () => {
    expect(decideFeedback(report('hard_bounce', 'dsn'), ours)).toMatchObject({ kind: 'suppress', reason: 'bounce' });
    expect(decideFeedback(report('hard_bounce', 'dsn'), undefined)).toEqual({ kind: 'ignore', send: null });
    expect(decideFeedback(report('complaint', 'dsn'), { ...ours, emailNorm: 'x@example.com' })).toEqual({
      kind: 'ignore',
      send: null,
    });
  });

  it('a soft bounce of our send counts toward auto-pause; one we cannot tie to a send is recorded', () => {
    expect(decideFeedback(report('soft_bounce'), ours)).toEqual({
      kind: 'count',
      send: { sendId, campaignId: 'camp-1' },
    });
    expect(decideFeedback(report('soft_bounce', 'sendgrid'), undefined)).toEqual({ kind: 'record', send: null });
  });

  it('delivery evidence naming our send to that recipient is evidence; any other delivery is only recorded', () => {
    const send = { sendId, campaignId: 'camp-1' };
    for (const source of ['ses', 'sendgrid', 'mailgun', 'dsn'] as const) {
      expect(decideFeedback(report('delivered', source), ours)).toEqual({ kind: 'evidence', send });
      expect(decideFeedback(report('accepted', source), ours)).toEqual({ kind: 'evidence', send });
    }
    // Our identifier, another recipient: proves nothing about the send.
    const other = { ...ours, emailNorm: 'someone-else@example.com' };
    expect(decideFeedback(report('delivered', 'ses'), other)).toEqual({ kind: 'record', send: null });
    expect(decideFeedback(report('accepted', 'sendgrid'), undefined)).toEqual({ kind: 'record', send: null });
    // An unauthenticated DSN about no send of ours does nothing.
    expect(decideFeedback(report('delivered', 'dsn'), undefined)).toEqual({ kind: 'ignore', send: null });
    expect(decideFeedback(report('delivered', 'dsn'), other)).toEqual({ kind: 'ignore', send: null });
  });

  it('other reports are recorded, never suppress', () => {
    expect(decideFeedback(report('other'), ours)).toMatchObject({ kind: 'record' });
    expect(decideFeedback(report('other', 'sendgrid'), undefined)).toEqual({ kind: 'record', send: null });
  });

  it('a Mailgun failure or complaint suppresses nothing here (Mailgun keeps its own list; AddressSuppressed names no Mailgun source)', () => {
    expect(decideFeedback(report('hard_bounce', 'mailgun'), ours)).toEqual({
      kind: 'record',
      send: { sendId, campaignId: 'camp-1' },
    });
    expect(decideFeedback(report('complaint', 'mailgun'), undefined)).toEqual({ kind: 'record', send: null });
  });
});

describe('feedbackEventId', () => {
  it("is the source's own id when there is one", () => {
    expect(feedbackEventId(report('hard_bounce', 'ses', { eventId: 'sns-1' }))).toBe('sns-1');
  });

  it('is a digest of the report otherwise: the same report twice is one, another report another', () => {
    const a = report('soft_bounce', 'sendgrid', { messageId: `${sendId}@outreach.example` });
    expect(feedbackEventId(a)).toBe(feedbackEventId({ ...a }));
    expect(feedbackEventId(a)).toMatch(/^derived:[0-9a-f]{40}$/);
    expect(feedbackEventId({ ...a, kind: 'hard_bounce' })).not.toBe(feedbackEventId(a));
    expect(feedbackEventId({ ...a, at: new Date(at.getTime() + 1) })).not.toBe(feedbackEventId(a));
  });
});

describe('addressSuppressed', () => {
  const fact = {
    emailHash: 'a'.repeat(64),
    emailHashKeyId: 'k1',
    reason: 'unsubscribe',
    source: 'unsubscribe',
    campaignId: 'camp-1',
    sendId,
    correlationId: 'corr-1',
    suppressedAt: at.getTime(),
  } as const;

  it("says the stored reason in the event's words, and carries no address", () => {
    const event = addressSuppressed(fact);
    expect(event).toMatchObject({ type: 'AddressSuppressed', reason: 'unsubscribed', source: 'unsubscribe' });
    expect(JSON.stringify(event)).not.toMatch(/@/);
    for (const reason of SUPPRESSION_REASONS) {
      expect(addressSuppressed({ ...fact, reason }).reason).toBe(EVENT_REASON[reason]);
    }
  });

  it('derives its id from the write: the same write is one event, a later one another', () => {
    expect(addressSuppressed(fact).eventId).toBe(addressSuppressed({ ...fact }).eventId);
    expect(addressSuppressed({ ...fact, suppressedAt: fact.suppressedAt + 1 }).eventId).not.toBe(
      addressSuppressed(fact).eventId,
    );
  });
});
