/** Issue #16, SMTP settings: what the sender refuses at start (exit 78, naming the variable). */
import { describe, expect, it } from 'vitest';
import { checkOf, configOf, PRODUCTION_IDENTITY } from './config-env.js';

describe('sender SMTP and identity settings', () => {
  it('requires TLS by default', () => {
    expect(configOf({}).SMTP_REQUIRE_TLS).toBe(true);
  });

  it('refuses credentials without TLS', () => {
    expect(checkOf({ SMTP_USER: 'u', SMTP_PASSWORD: 'p', SMTP_REQUIRE_TLS: 'false' })).toThrow(/clear text/);
    expect(checkOf({ SMTP_USER: 'u', SMTP_PASSWORD: 'p' })).not.toThrow();
    expect(
      checkOf({ SMTP_USER: 'u', SMTP_PASSWORD: 'p', SMTP_REQUIRE_TLS: 'false', SMTP_SECURE: 'true' }),
    ).not.toThrow();
  });

  it('refuses a password given twice', () => {
    expect(checkOf({ SMTP_PASSWORD: 'p', SMTP_PASSWORD_FILE: '/run/secrets/p' })).toThrow(/not both/);
  });

  it('in production, refuses every placeholder identity, naming the variable', () => {
    const prod = { NODE_ENV: 'production', ...PRODUCTION_IDENTITY };
    expect(checkOf(prod)).not.toThrow();
    expect(checkOf({ NODE_ENV: 'production' })).toThrow(/MAIL_FROM must be set/);
    for (const [name, value] of [
      ['MAIL_FROM', 'Outreach <outreach@example.com>'],
      ['MAIL_FROM', 'outreach@EXAMPLE.ORG'],
      ['MAIL_FROM', 'Outreach <o@mail.example.net>'],
      ['MESSAGE_ID_DOMAIN', 'outreach.local'],
      ['MESSAGE_ID_DOMAIN', 'localhost'],
      ['UNSUBSCRIBE_MAILTO', 'unsubscribe@example.com'],
      ['UNSUBSCRIBE_MAILTO', 'u@corp.invalid'],
      ['UNSUBSCRIBE_URL', ''],
      ['UNSUBSCRIBE_URL', 'https://example.com/u'],
      ['UNSUBSCRIBE_URL', 'not a url'],
    ] as const) {
      expect(checkOf({ ...prod, [name]: value }), `${name}=${value}`).toThrow(new RegExp(`${name} must be set`));
    }
    expect(checkOf({ ...prod, UNSUBSCRIBE_URL: 'http://outreach.acme-corp.com/u' })).toThrow(/https/);
  });

  it('refuses the development stand-ins in production: the null provider and the Mailpit lookup', () => {
    const prod = {
      NODE_ENV: 'production',
      MAIL_FROM: 'Outreach <outreach@acme-corp.com>',
      MESSAGE_ID_DOMAIN: 'mail.acme-corp.com',
      UNSUBSCRIBE_MAILTO: 'unsubscribe@acme-corp.com',
      UNSUBSCRIBE_URL: 'https://outreach.acme-corp.com/v1/unsubscribe',
    };
    expect(checkOf(prod)).not.toThrow();
    // With or without a valid identity: it is the provider that is refused, named, and how to fix it.
    expect(checkOf({ NODE_ENV: 'production', MAIL_PROVIDER: 'null' })).toThrow(
      /MAIL_PROVIDER=null .* refused when NODE_ENV=production/,
    );
    expect(checkOf({ ...prod, MAIL_PROVIDER: 'null' })).toThrow(/MAIL_PROVIDER=null/);
    expect(checkOf({ ...prod, PROVIDER_LOOKUP: 'mailpit' })).toThrow(
      /PROVIDER_LOOKUP=mailpit .* refused when NODE_ENV=production/,
    );
    // Outside production both stay available (the demo, the benchmarks, docker-compose).
    expect(checkOf({ NODE_ENV: 'development', MAIL_PROVIDER: 'null' })).not.toThrow();
    expect(checkOf({ NODE_ENV: 'development', PROVIDER_LOOKUP: 'mailpit' })).not.toThrow();
  });
});
