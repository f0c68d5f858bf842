/** Issue #18, feedback settings: what the sender refuses at start (a ConfigError naming the variable, exit 78). */
import { generateKeyPairSync } from 'node:crypto';
import { ConfigError } from '@outreach/shared';
import { TEST_SNS_TOPIC_ARN } from './fixtures/feedback-fixtures.js';
import { describe, expect, it } from 'vitest';
import { createHmac } from 'node:crypto';
import { checkConfig, mailgunWebhookSigningKey, sendGridWebhookKey, sesTopicArns } from '../src/config.js';
import { configOf } from './config-env.js';

const ec = generateKeyPairSync('ec', { namedCurve: 'prime256v1' }).publicKey;
const der = ec.export({ type: 'spki', format: 'der' }).toString('base64');
const pem = ec.export({ type: 'spki', format: 'pem' }).toString();

describe('SES_SNS_TOPIC_ARNS', () => {
  it('is off when empty, and a list of ARNs otherwise', () => {
    expect(sesTopicArns(configOf({}))).toEqual([]);
    const other = 'arn:aws:sns:eu-west-1:123456789012:bounces';
    expect(sesTopicArns(configOf({ SES_SNS_TOPIC_ARNS: ` ${TEST_SNS_TOPIC_ARN}, ${other} ` }))).toEqual([
      TEST_SNS_TOPIC_ARN,
      other,
    ]);
  });

  it('refuses at start a value that is no SNS topic ARN, naming the variable and entry', () => {
    const bad = configOf({ SES_SNS_TOPIC_ARNS: `${TEST_SNS_TOPIC_ARN},arn:aws:sqs:us-east-1:123456789012:q` });
    expect(() => checkConfig(bad)).toThrow(ConfigError);
    expect(() => checkConfig(bad)).toThrow(/SES_SNS_TOPIC_ARNS entry 2/);
  });
});

describe('SENDGRID_WEBHOOK_PUBLIC_KEY[_FILE]', () => {
  const read = (files: Record<string, string>) => (path: string) => {
    const text = files[path];
    if (text === undefined) throw Object.assign(new Error('no such file'), { code: 'ENOENT' });
    return text;
  };

  it('is off when neither is set; reads the base64 DER SendGrid shows, or a PEM, inline or from a file', () => {
    expect(sendGridWebhookKey(configOf({}))).toBeUndefined();
    expect(sendGridWebhookKey(configOf({ SENDGRID_WEBHOOK_PUBLIC_KEY: der }))?.asymmetricKeyType).toBe('ec');
    const fromFile = sendGridWebhookKey(
      configOf({ SENDGRID_WEBHOOK_PUBLIC_KEY_FILE: '/k/key' }),
      read({ '/k/key': `${pem}\n` }),
    );
    expect(fromFile?.asymmetricKeyType).toBe('ec');
  });

  it('refuses both at once, an unreadable file, and a key that is not EC P-256', () => {
    expect(() =>
      sendGridWebhookKey(configOf({ SENDGRID_WEBHOOK_PUBLIC_KEY: der, SENDGRID_WEBHOOK_PUBLIC_KEY_FILE: '/k/key' })),
    ).toThrow(/not both/);
    expect(() => sendGridWebhookKey(configOf({ SENDGRID_WEBHOOK_PUBLIC_KEY_FILE: '/nope' }), read({}))).toThrow(
      /SENDGRID_WEBHOOK_PUBLIC_KEY_FILE cannot be read \(ENOENT\)/,
    );
    const rsa = generateKeyPairSync('rsa', { modulusLength: 2048 })
      .publicKey.export({ type: 'spki', format: 'der' })
      .toString('base64');
    const p384 = generateKeyPairSync('ec', { namedCurve: 'secp384r1' })
      .publicKey.export({ type: 'spki', format: 'der' })
      .toString('base64');
    for (const value of [rsa, p384, 'not a key']) {
      expect(() => sendGridWebhookKey(configOf({ SENDGRID_WEBHOOK_PUBLIC_KEY: value }))).toThrow(
        /SENDGRID_WEBHOOK_PUBLIC_KEY is not an EC P-256 public key/,
      );
    }
  });
});

describe('MAILGUN_WEBHOOK_SIGNING_KEY[_FILE]', () => {
  const KEY = 'key-0123456789abcdef0123456789abcdef';
  const read = (files: Record<string, string>) => (path: string) => {
    const text = files[path];
    if (text === undefined) throw Object.assign(new Error('no such file'), { code: 'ENOENT' });
    return text;
  };
  /** What the key signs with: the HMAC Mailgun would send for timestamp + token. */
  const signs = (key: ReturnType<typeof mailgunWebhookSigningKey>) =>
    key && createHmac('sha256', key).update('1768471200token').digest('hex');
  const expected = createHmac('sha256', KEY).update('1768471200token').digest('hex');

  it('is off when neither is set; reads the key inline or from a file (its one trailing newline dropped)', () => {
    expect(mailgunWebhookSigningKey(configOf({}))).toBeUndefined();
    expect(signs(mailgunWebhookSigningKey(configOf({ MAILGUN_WEBHOOK_SIGNING_KEY: KEY })))).toBe(expected);
    const fromFile = mailgunWebhookSigningKey(
      configOf({ MAILGUN_WEBHOOK_SIGNING_KEY_FILE: '/k/mailgun' }),
      read({ '/k/mailgun': `${KEY}\n` }),
    );
    expect(signs(fromFile)).toBe(expected);
  });

  it('refuses both at once, an unreadable or empty file, and values that cannot be a signing key, never quoting them', () => {
    expect(() =>
      mailgunWebhookSigningKey(
        configOf({ MAILGUN_WEBHOOK_SIGNING_KEY: KEY, MAILGUN_WEBHOOK_SIGNING_KEY_FILE: '/k/mailgun' }),
      ),
    ).toThrow(/not both/);
    expect(() => mailgunWebhookSigningKey(configOf({ MAILGUN_WEBHOOK_SIGNING_KEY_FILE: '/nope' }), read({}))).toThrow(
      /MAILGUN_WEBHOOK_SIGNING_KEY_FILE \(\/nope\) cannot be read \(ENOENT\)/,
    );
    for (const content of ['', '\n', `${KEY}\n${KEY}\n`, `\uFEFF${KEY}`])
      expect(() =>
        mailgunWebhookSigningKey(
          configOf({ MAILGUN_WEBHOOK_SIGNING_KEY_FILE: '/k/mailgun' }),
          read({ '/k/mailgun': content }),
        ),
      ).toThrow(ConfigError);
    for (const value of ['short', `${KEY} ${KEY}`, `${KEY}\u00a0`, 'k'.repeat(257)]) {
      let error: unknown;
      try {
        mailgunWebhookSigningKey(configOf({ MAILGUN_WEBHOOK_SIGNING_KEY: value }));
      } catch (caught) {
        error = caught;
      }
      expect(error, value).toBeInstanceOf(ConfigError);
      expect((error as Error).message).toMatch(/MAILGUN_WEBHOOK_SIGNING_KEY is not a Mailgun webhook signing key/);
      expect((error as Error).message).not.toContain(value);
    }
  });
});

describe('SNS_MAX_MESSAGE_AGE_MS', () => {
  it('defaults to two hours (SNS retries for one at most), and is refused past 7 days or under a minute', () => {
    expect(configOf({}).SNS_MAX_MESSAGE_AGE_MS).toBe(7_200_000);
    expect(configOf({ SNS_MAX_MESSAGE_AGE_MS: String(7 * 86_400_000) }).SNS_MAX_MESSAGE_AGE_MS).toBe(604_800_000);
    for (const value of [String(7 * 86_400_000 + 1), '59999', '-1', '1e99', 'two hours'])
      expect(() => configOf({ SNS_MAX_MESSAGE_AGE_MS: value }), value).toThrow(/SNS_MAX_MESSAGE_AGE_MS/);
  });
});
