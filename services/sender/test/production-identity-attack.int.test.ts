/**
 * Attack (issue #16, SMTP identity): NODE_ENV=production refuses placeholder identities, but only
 * as spelled without the root dot. `example.com.` is the same name in DNS (a fully qualified name),
 * yet MAIL_FROM, MESSAGE_ID_DOMAIN and UNSUBSCRIBE_URL accept it; so do `localhost.` and IP literals,
 * which no recipient can answer or unsubscribe at.
 */
import { describe, expect, it } from 'vitest';
import { checkOf, PRODUCTION_IDENTITY } from './config-env.js';

const production = { NODE_ENV: 'production', MAIL_PROVIDER: 'smtp', ...PRODUCTION_IDENTITY };
const check = (env: Record<string, string>) => checkOf({ ...production, ...env });

describe('production identity: placeholder names in other spellings', () => {
  it('the baseline starts', () => {
    expect(check({})).not.toThrow();
  });

  it.each([
    ['MAIL_FROM', 'Outreach <outreach@example.com.>'],
    ['MAIL_FROM', 'outreach@EXAMPLE.COM.'],
    ['MAIL_FROM', 'outreach@localhost.'],
    ['MAIL_FROM', 'outreach@127.0.0.1'],
    ['MESSAGE_ID_DOMAIN', 'example.com.'],
    ['MESSAGE_ID_DOMAIN', 'mail.example.org.'],
    ['MESSAGE_ID_DOMAIN', '127.0.0.1'],
    ['UNSUBSCRIBE_MAILTO', 'unsubscribe@example.com.'],
    ['UNSUBSCRIBE_URL', 'https://example.com./v1/unsubscribe'],
    ['UNSUBSCRIBE_URL', 'https://localhost./v1/unsubscribe'],
    ['UNSUBSCRIBE_URL', 'https://127.0.0.1/v1/unsubscribe'],
    ['UNSUBSCRIBE_URL', 'https://[::1]/v1/unsubscribe'],
    ['UNSUBSCRIBE_URL', 'https://mail.home.arpa/v1/unsubscribe'],
    ['MAIL_FROM', 'outreach@[127.0.0.1]'],
    ['MAIL_FROM', 'outreach@[IPv6:::1]'],
    ['MAIL_FROM', 'outreach@mail.localdomain'],
    ['MAIL_FROM', 'outreach@router.HOME.ARPA.'],
    ['MESSAGE_ID_DOMAIN', 'Example.'],
    ['MESSAGE_ID_DOMAIN', 'host.test.'],
    ['UNSUBSCRIBE_MAILTO', 'Unsub <unsubscribe@mail.invalid.>'],
  ])('%s=%s is refused', (name, value) => {
    expect(check({ [name]: value })).toThrow(new RegExp(`${name} must be set to your own domain`));
  });

  it.each([
    ['MAIL_FROM', 'x@example.com, y@mail.acme-corp.com'],
    ['MAIL_FROM', 'y@mail.acme-corp.com, x@example.com'],
    ['MAIL_FROM', 'Team: x@example.com, y@mail.acme-corp.com;'],
    ['UNSUBSCRIBE_MAILTO', 'unsubscribe@mail.acme-corp.com, x@localhost'],
    ['MAIL_FROM', 'Outreach'],
  ])('%s=%s is not exactly one address: refused', (name, value) => {
    expect(check({ [name]: value })).toThrow(new RegExp(`${name} must be exactly one address`));
  });

  it.each(['Production', 'PRODUCTION', ' production '])('NODE_ENV=%s is production: the check runs', (nodeEnv) => {
    expect(check({ NODE_ENV: nodeEnv, MESSAGE_ID_DOMAIN: 'example.com' })).toThrow(
      /MESSAGE_ID_DOMAIN must be set to your own domain/,
    );
  });

  it.each(['prod', 'staging', 'dev'])('NODE_ENV=%s is no known environment: the start stops', (nodeEnv) => {
    expect(check({ NODE_ENV: nodeEnv, MESSAGE_ID_DOMAIN: 'example.com' })).toThrow(/NODE_ENV/);
  });

  it('the scheme is case-insensitive: HTTPS:// is https, and http:// is still refused', () => {
    expect(check({ UNSUBSCRIBE_URL: 'HTTPS://outreach.acme-corp.com/v1/unsubscribe' })).not.toThrow();
    expect(check({ UNSUBSCRIBE_URL: 'HTTP://outreach.acme-corp.com/v1/unsubscribe' })).toThrow(/must be an https URL/);
  });

  it('own names that merely contain a reserved word start', () => {
    expect(
      check({
        MAIL_FROM: '"Acme, Recruiting" <recruiting@examples.acme-corp.com.>',
        MESSAGE_ID_DOMAIN: 'testing.acme-corp.com',
        UNSUBSCRIBE_URL: 'https://localhost-free.acme-corp.com/v1/unsubscribe',
      }),
    ).not.toThrow();
  });
});
