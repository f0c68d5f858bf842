/** Issue #18, the delivery lookup's settings (ADR 009): what the sender refuses at start, and the timing it derives. */
import { describe, expect, it } from 'vitest';
import { handoverWithinMs, lookupSettleMs } from '../src/config.js';
import { checkOf, configOf } from './config-env.js';

describe('the delivery lookup settings', () => {
  it('is off by default: sends in doubt stay ambiguous, as before', () => {
    expect(configOf({}).PROVIDER_LOOKUP).toBe('none');
    expect(checkOf({})).not.toThrow();
  });

  it('takes the hand-over bound from the provider: the SMTP final-reply wait, or Mailgun’s late reply', () => {
    expect(handoverWithinMs(configOf({}))).toBe(600_000);
    expect(handoverWithinMs(configOf({ SMTP_FINAL_REPLY_TIMEOUT_MS: '1000', PROVIDER_TIMEOUT_MS: '3000' }))).toBe(
      3_000,
    );
    const mailgun = { MAIL_PROVIDER: 'mailgun', MAILGUN_DOMAIN: 'mg.example.org', MAILGUN_API_KEY: 'key' };
    expect(handoverWithinMs(configOf(mailgun))).toBe(20_000 + 60_000);
    expect(lookupSettleMs(configOf({ PROVIDER_LOOKUP: 'mailpit', LOOKUP_GIVE_UP_MS: '700000' }))).toBe(5_000);
    expect(lookupSettleMs(configOf({ ...mailgun, PROVIDER_LOOKUP: 'mailgun' }))).toBe(1_800_000);
    expect(
      lookupSettleMs(configOf({ PROVIDER_LOOKUP: 'mailpit', LOOKUP_SETTLE_MS: '0', LOOKUP_GIVE_UP_MS: '700000' })),
    ).toBe(0);
  });

  it('waits for delivery evidence: a not-found retries no sooner than DELIVERY_EVIDENCE_WINDOW_MS (#32)', () => {
    const window = { DELIVERY_EVIDENCE_WINDOW_MS: '900000' };
    expect(configOf({}).DELIVERY_EVIDENCE_WINDOW_MS).toBe(0);
    expect(lookupSettleMs(configOf({ ...window, PROVIDER_LOOKUP: 'mailpit', LOOKUP_GIVE_UP_MS: '2000000' }))).toBe(
      900_000,
    );
    // The evidence store as the lookup: absence means "never taken" only once the window has passed.
    expect(checkOf({ PROVIDER_LOOKUP: 'evidence' })).toThrow(
      /PROVIDER_LOOKUP=evidence needs DELIVERY_EVIDENCE_WINDOW_MS/,
    );
    expect(lookupSettleMs(configOf({ ...window, PROVIDER_LOOKUP: 'evidence' }))).toBe(900_000);
    expect(checkOf({ ...window, PROVIDER_LOOKUP: 'evidence', LOOKUP_GIVE_UP_MS: '1000000' })).toThrow(
      /LOOKUP_GIVE_UP_MS/,
    );
    expect(
      checkOf({
        ...window,
        PROVIDER_LOOKUP: 'evidence',
        SMTP_FINAL_REPLY_TIMEOUT_MS: '30000',
        LOOKUP_GIVE_UP_MS: '3600000',
      }),
    ).not.toThrow();
    expect(() => configOf({ DELIVERY_EVIDENCE_WINDOW_MS: String(8 * 86_400_000) })).toThrow();
  });

  it('refuses Mailgun without its domain, or with no key or two', () => {
    expect(checkOf({ MAIL_PROVIDER: 'mailgun', MAILGUN_API_KEY: 'key' })).toThrow(/MAILGUN_DOMAIN is required/);
    expect(checkOf({ MAIL_PROVIDER: 'mailgun', MAILGUN_DOMAIN: 'mg.example.org' })).toThrow(
      /exactly one of MAILGUN_API_KEY_FILE/,
    );
    expect(
      checkOf({
        MAIL_PROVIDER: 'mailgun',
        MAILGUN_DOMAIN: 'mg.example.org',
        MAILGUN_API_KEY: 'k',
        MAILGUN_API_KEY_FILE: '/k',
      }),
    ).toThrow(/exactly one/);
    expect(checkOf({ PROVIDER_LOOKUP: 'mailgun', MAILGUN_API_KEY: 'key' })).toThrow(/MAILGUN_DOMAIN is required/);
    expect(
      checkOf({ MAIL_PROVIDER: 'mailgun', MAILGUN_DOMAIN: 'mg.example.org', MAILGUN_API_KEY: 'key' }),
    ).not.toThrow();
  });

  it('refuses a give-up bound shorter than the time a not-found needs to be trusted', () => {
    // SMTP: 10 minutes of final-reply wait plus Mailpit's 5 s settle.
    expect(checkOf({ PROVIDER_LOOKUP: 'mailpit', LOOKUP_GIVE_UP_MS: '600000' })).toThrow(
      /LOOKUP_GIVE_UP_MS \(600000\) must be at least the hand-over bound plus the lookup's settle time \(605000 ms\)/,
    );
    expect(checkOf({ PROVIDER_LOOKUP: 'mailpit', LOOKUP_GIVE_UP_MS: '605000' })).not.toThrow();
    expect(checkOf({ PROVIDER_LOOKUP: 'mailpit' })).not.toThrow();
  });
});
