import { normalizeEmail } from '@outreach/contracts';
import { describe, expect, it } from 'vitest';
import {
  bestStatus,
  enhancedStatus,
  feedbackFromSmtpReply,
  instant,
  normalizeMessageId,
  recipientOf,
  statusInText,
  token,
} from './feedback.js';

const now = new Date('2026-01-15T12:00:00Z');

describe('recipientOf', () => {
  it('gives the identity the sender checks suppressions by', () => {
    for (const raw of ['Ada@Example.COM', ' ada@example.com ', '<Ada@EXAMPLE.com>', 'ada\u200B@example.com']) {
      expect(recipientOf(raw)).toBe('ada@example.com');
      expect(recipientOf(raw)).toBe(normalizeEmail('ada@example.com'));
    }
    expect(recipientOf('ada@Bücher.de')).toBe('ada@xn--bcher-kva.de');
  });

  it('refuses what is no deliverable address, and non-strings', () => {
    for (const raw of [
      '',
      'ada',
      'ada@',
      '@example.com',
      'a b@example.com',
      `${'a'.repeat(400)}@example.com`,
      42,
      null,
      {},
      ['a@b.c'],
    ])
      expect(recipientOf(raw)).toBeUndefined();
  });
});

describe('normalizeMessageId', () => {
  it('strips the brackets and lower-cases the domain only', () => {
    expect(normalizeMessageId('<Send-1@Mail.Example.COM>')).toBe('Send-1@mail.example.com');
    expect(normalizeMessageId('  <abc@x.test> (comment)')).toBe('abc@x.test');
    expect(normalizeMessageId('abc@x.test')).toBe('abc@x.test');
    expect(normalizeMessageId('<0102015fd91a5ca3-93c2@email.amazonses.com>')).toBe(
      '0102015fd91a5ca3-93c2@email.amazonses.com',
    );
  });

  it('refuses what cannot be a msg-id', () => {
    for (const raw of [
      '',
      '<>',
      '<a b@c>',
      '<a"b@c>',
      'a\nb@c',
      `<${'x'.repeat(300)}@c>`,
      'x'.repeat(2000),
      7,
      undefined,
    ])
      expect(normalizeMessageId(raw)).toBeUndefined();
  });
});

describe('status codes', () => {
  it('reads RFC 3463 codes at the start of a Status field', () => {
    expect(enhancedStatus('5.1.1')).toBe('5.1.1');
    expect(enhancedStatus(' 4.2.2 (mailbox full)')).toBe('4.2.2');
    expect(enhancedStatus('5.01.001')).toBe('5.1.1');
    for (const raw of ['550', '3.1.1', '5.1', 'x5.1.1', '5.1.1.4', 'smtp; 550 5.1.1', 5.11])
      expect(enhancedStatus(raw)).toBeUndefined();
  });

  it('finds a code standing alone in a diagnostic text, never an IP address', () => {
    expect(statusInText('smtp; 550 5.1.1 <ada@example.com>... User unknown')).toBe('5.1.1');
    expect(statusInText('smtp; 550 rejected by 5.1.1.4')).toBeUndefined();
    expect(statusInText('no code here')).toBeUndefined();
  });

  it('prefers the specific code of the same class over a generic x.0.0', () => {
    expect(bestStatus('5.0.0', 'smtp; 550 5.1.1 unknown')).toBe('5.1.1');
    expect(bestStatus('5.0.0', 'smtp; 452 4.2.2 full')).toBe('5.0.0');
    expect(bestStatus('5.2.1', 'smtp; 550 5.1.1 unknown')).toBe('5.2.1');
    expect(bestStatus(undefined, 'smtp; 550 5.1.1 unknown')).toBe('5.1.1');
  });
});

describe('instant', () => {
  it('reads ISO 8601, RFC 5322 dates and Unix seconds', () => {
    expect(instant('2026-01-15T10:00:00.000Z', now).toISOString()).toBe('2026-01-15T10:00:00.000Z');
    expect(instant('Thu, 15 Jan 2026 10:00:00 +0100 (CET)', now).toISOString()).toBe('2026-01-15T09:00:00.000Z');
    expect(instant(1768471200, now).toISOString()).toBe('2026-01-15T10:00:00.000Z');
  });

  it('falls back, and never returns a time after now', () => {
    const fallback = new Date('2026-01-15T11:00:00Z');
    expect(instant('garbage', now, fallback)).toBe(fallback);
    expect(instant(undefined, now)).toBe(now);
    expect(instant('2099-01-01T00:00:00Z', now)).toBe(now);
    expect(instant(Number.NaN, now)).toBe(now);
  });
});

describe('token', () => {
  it('keeps identifier-like values only, and never an at-sign', () => {
    expect(token('2FeCcG5VRWpck6mKqRgnDg==')).toBe('2FeCcG5VRWpck6mKqRgnDg==');
    for (const raw of ['a@b', 'two words', '', '-lead', 'x'.repeat(200), 'new\nline'])
      expect(token(raw)).toBeUndefined();
  });
});

describe('feedbackFromSmtpReply', () => {
  it('a 5xx for a recipient is a hard bounce, a 4xx a soft one, with the code only', () => {
    expect(
      feedbackFromSmtpReply({
        recipient: 'Ada@Example.com',
        code: 550,
        enhanced: '5.1.1',
        at: now,
        messageId: '<s1@mail.test>',
      }),
    ).toEqual({
      kind: 'hard_bounce',
      source: 'smtp',
      recipient: 'ada@example.com',
      at: now,
      messageId: 's1@mail.test',
      diagnostic: '5.1.1',
    });
    expect(feedbackFromSmtpReply({ recipient: 'ada@example.com', code: 452, at: now })?.kind).toBe('soft_bounce');
  });

  it('no feedback for other replies, bad addresses, or a code whose class contradicts the reply', () => {
    expect(feedbackFromSmtpReply({ recipient: 'ada@example.com', code: 250, at: now })).toBeUndefined();
    expect(feedbackFromSmtpReply({ recipient: 'not an address', code: 550, at: now })).toBeUndefined();
    expect(
      feedbackFromSmtpReply({ recipient: 'ada@example.com', code: 550, enhanced: '4.2.2', at: now })?.diagnostic,
    ).toBeUndefined();
  });
});
