import { mailgunEventData, mailgunWebhook, signMailgunWebhook } from '../../../test/fixtures/feedback-fixtures.js';
import { describe, expect, it } from 'vitest';
import { mailgunSigningKey, type MailgunSigned } from '../../domain/feedback/mailgun.js';
import { MailgunFeedbackIntake } from './mailgun-intake.js';

const KEY = 'test-mailgun-signing-key-0123456789abcdef';
const WINDOW = 10 * 60 * 1000;
const now = new Date('2026-01-15T10:00:00Z');
const later = (ms: number) => new Date(now.getTime() + ms);
const signedAt = (at: Date, token: string): MailgunSigned => ({
  timestamp: String(Math.floor(at.getTime() / 1000)),
  token,
  signedAt: Math.floor(at.getTime() / 1000) * 1000,
});
const token = (i: number) => `token${String(i).padStart(45, '0')}`;

describe('MailgunFeedbackIntake: each signature token taken once', () => {
  const intake = (maxTokens?: number) =>
    new MailgunFeedbackIntake({
      signingKey: mailgunSigningKey(KEY),
      ...(maxTokens === undefined ? {} : { maxTokens }),
    });

  it('receives a signed body, and refuses its token a second time while the timestamp is in the window', () => {
    const mailgun = intake();
    const body = mailgunWebhook(
      KEY,
      mailgunEventData({ event: 'delivered', recipient: 'ada@example.com' }),
      signMailgunWebhook(KEY, String(now.getTime() / 1000)),
    );
    const result = mailgun.receive(body, now);
    if (result.kind !== 'ok') throw new Error(`expected ok, got ${JSON.stringify(result)}`);
    expect(mailgun.claim(result.signed, now)).toBe('taken');
    // The same delivery again, or the same signature carrying another event: the token is spent.
    expect(mailgun.claim(result.signed, later(1_000))).toBe('replayed');
    expect(mailgun.claim(result.signed, later(WINDOW - 1))).toBe('replayed');
    // Past the window the signature check refuses it before it gets here; the entry is gone.
    expect(mailgun.receive(body, later(WINDOW + 1_000)).kind).toBe('refused');
    expect(mailgun.claim(result.signed, later(WINDOW + 1_000))).toBe('taken');
  });

  it('a token released after a failure on our side is taken again (Mailgun retries)', () => {
    const mailgun = intake();
    const signed = signedAt(now, token(1));
    expect(mailgun.claim(signed, now)).toBe('taken');
    mailgun.release(signed);
    expect(mailgun.claim(signed, now)).toBe('taken');
    expect(mailgun.claim(signed, now)).toBe('replayed');
  });

  it('stays bounded: expired tokens are forgotten, and at the bound a new one is refused, never taken unchecked', () => {
    const mailgun = intake(1_000);
    for (let i = 0; i < 1_000; i++) expect(mailgun.claim(signedAt(now, token(i)), now)).toBe('taken');
    expect(mailgun.size).toBe(1_000);
    expect(mailgun.claim(signedAt(now, token(1_000)), later(1_000))).toBe('full');
    // Earlier tokens are still refused: nothing was evicted to make room.
    expect(mailgun.claim(signedAt(now, token(0)), later(1_000))).toBe('replayed');
    // Once their window passed, they make room.
    expect(mailgun.claim(signedAt(later(WINDOW), token(1_000)), later(WINDOW + 1))).toBe('taken');
    expect(mailgun.size).toBe(1);
  });

  it('forgets out-of-order expired tokens at the bound', () => {
    const mailgun = intake(3);
    expect(mailgun.claim(signedAt(later(60_000), token(1)), now)).toBe('taken');
    expect(mailgun.claim(signedAt(now, token(2)), now)).toBe('taken');
    expect(mailgun.claim(signedAt(later(120_000), token(3)), now)).toBe('taken');
    // token 2 expires first but is not the oldest entry: the sweep at the bound still finds it.
    expect(mailgun.claim(signedAt(later(WINDOW), token(4)), later(WINDOW + 1))).toBe('taken');
    expect(mailgun.claim(signedAt(later(60_000), token(1)), later(WINDOW + 1))).toBe('replayed');
  });
});
