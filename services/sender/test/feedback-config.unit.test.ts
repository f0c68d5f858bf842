/** Issue #18, feedback settings: what the sender refuses at start (a ConfigError naming the variable, exit 78). */
import { generateKeyPairSync } from 'node:crypto';
import { ConfigError } from '@outreach/shared';
import { TEST_SNS_TOPIC_ARN } from './fixtures/feedback-fixtures.js';
import { describe, expect, it } from 'vitest';
import { checkConfig, sendGridWebhookKey, sesTopicArns } from '../src/config.js';
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

describe('SNS_MAX_MESSAGE_AGE_MS', () => {
  it('defaults to two hours (SNS retries for one at most), and is refused past 7 days or under a minute', () => {
    expect(configOf({}).SNS_MAX_MESSAGE_AGE_MS).toBe(7_200_000);
    expect(configOf({ SNS_MAX_MESSAGE_AGE_MS: String(7 * 86_400_000) }).SNS_MAX_MESSAGE_AGE_MS).toBe(604_800_000);
    for (const value of [String(7 * 86_400_000 + 1), '59999', '-1', '1e99', 'two hours'])
      expect(() => configOf({ SNS_MAX_MESSAGE_AGE_MS: value }), value).toThrow(/SNS_MAX_MESSAGE_AGE_MS/);
  });
});
