import { selfSignedCertificate } from '@outreach/testkit';
import {
  sesNotification,
  signedSnsMessage,
  TEST_SNS_CERT_URL,
  TEST_SNS_TOPIC_ARN,
  type SnsMessageFields,
} from '../../../test/fixtures/feedback-fixtures.js';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import {
  checkSnsOrigin,
  checkSnsTimestamp,
  DEFAULT_SNS_LIMITS,
  parseSnsEnvelope,
  SNS_MAX_BODY_BYTES,
  SNS_MAX_MESSAGE_BYTES,
  snsCertificateUrl,
  snsConfirmationUrl,
  snsStringToSign,
  verifySnsSignature,
  type SnsEnvelope,
} from './sns.js';

const now = new Date('2026-01-15T10:00:05Z');
const sns = selfSignedCertificate({ commonName: 'sns.amazonaws.com' });
const allowed = new Set([TEST_SNS_TOPIC_ARN]);
const bounce = sesNotification({ type: 'Bounce', recipients: ['ada@example.com'], messageId: '<s1@mail.test>' });

function envelope(body: unknown): SnsEnvelope {
  const parsed = parseSnsEnvelope(typeof body === 'string' ? body : JSON.stringify(body));
  if (parsed.kind !== 'ok') throw new Error(`fixture did not parse: ${parsed.reason}`);
  return parsed.envelope;
}

function signed(fields: Partial<SnsMessageFields> = {}): Record<string, string> {
  return signedSnsMessage({ Message: bounce, ...fields }, sns.privateKey);
}

describe('SNS signature', () => {
  it.each(['1', '2'] as const)('verifies SignatureVersion %s (SHA%s withRSA) over the documented fields', (version) => {
    const message = envelope(signed({ SignatureVersion: version, Subject: 'Amazon SES Email Event Notification' }));
    expect(verifySnsSignature(message, sns.certificatePem, now)).toEqual({ kind: 'verified' });
  });

  it('verifies subscription and unsubscribe confirmations, whose string to sign holds SubscribeURL and Token', () => {
    for (const Type of ['SubscriptionConfirmation', 'UnsubscribeConfirmation'] as const) {
      const message = envelope(signed({ Type, Message: 'You have chosen to subscribe...' }));
      expect(snsStringToSign(message)).toMatch(
        /^Message\n.*\nMessageId\n.*\nSubscribeURL\n.*\nTimestamp\n.*\nToken\n.*\nTopicArn\n.*\nType\n.*\n$/s,
      );
      expect(verifySnsSignature(message, sns.certificatePem, now)).toEqual({ kind: 'verified' });
    }
  });

  it('leaves an absent Subject out of the string to sign, and a null one too', () => {
    const body = signed();
    expect(snsStringToSign(envelope(body))).not.toContain('Subject');
    expect(verifySnsSignature(envelope({ ...body, Subject: null }), sns.certificatePem, now).kind).toBe('verified');
  });

  it.each([
    ['the Message changed', (b: Record<string, string>) => ({ ...b, Message: b.Message?.replace('ada@', 'eve@') })],
    ['a Subject added', (b: Record<string, string>) => ({ ...b, Subject: 'x' })],
    ['the MessageId changed', (b: Record<string, string>) => ({ ...b, MessageId: 'other' })],
    ['the Timestamp changed', (b: Record<string, string>) => ({ ...b, Timestamp: '2026-01-15T10:00:01.000Z' })],
    [
      'the Type changed',
      (b: Record<string, string>) => ({ ...b, Type: 'UnsubscribeConfirmation', Token: 't', SubscribeURL: 'u' }),
    ],
    ['the version changed (1 <-> 2)', (b: Record<string, string>) => ({ ...b, SignatureVersion: '1' })],
    ['the signature truncated', (b: Record<string, string>) => ({ ...b, Signature: b.Signature?.slice(8) })],
  ])('refuses a message with %s', (_name, tamper) => {
    expect(verifySnsSignature(envelope(tamper(signed())), sns.certificatePem, now)).toEqual({
      kind: 'refused',
      reason: 'SNS signature does not verify',
    });
  });

  it('refuses a signature by another key, an unreadable, expired, future or non-RSA certificate', () => {
    const message = envelope(signed());
    const other = selfSignedCertificate();
    expect(verifySnsSignature(message, other.certificatePem, now).kind).toBe('refused');
    expect(verifySnsSignature(message, 'not a certificate', now).kind).toBe('refused');
    const expired = selfSignedCertificate({ privateKey: sns.privateKey, notAfter: new Date('2025-12-31T00:00:00Z') });
    expect(verifySnsSignature(message, expired.certificatePem, now)).toMatchObject({
      reason: 'SNS signing certificate is not valid now',
    });
    const future = selfSignedCertificate({ privateKey: sns.privateKey, notBefore: new Date('2026-02-01T00:00:00Z') });
    expect(verifySnsSignature(message, future.certificatePem, now).kind).toBe('refused');
    const ec = selfSignedCertificate({ keyType: 'ec' });
    expect(verifySnsSignature(message, ec.certificatePem, now)).toMatchObject({
      reason: 'SNS signing certificate does not hold an RSA key',
    });
  });
});

describe('SNS envelope', () => {
  it('refuses unknown signature versions, missing fields and wrong types before anything is fetched', () => {
    const body = signed();
    const cases: Array<[string, unknown]> = [
      ['version 3', { ...body, SignatureVersion: '3' }],
      ['version as a number', { ...body, SignatureVersion: 2 }],
      ['no version', { ...body, SignatureVersion: undefined }],
      ['no Signature', { ...body, Signature: undefined }],
      ['no SigningCertURL', { ...body, SigningCertURL: undefined }],
      ['no TopicArn', { ...body, TopicArn: undefined }],
      ['no Message', { ...body, Message: undefined }],
      ['Message as an object', { ...body, Message: JSON.parse(bounce) }],
      ['MessageId as a number', { ...body, MessageId: 7 }],
      ['TopicArn not an ARN', { ...body, TopicArn: 'arn:aws:sqs:us-east-1:123456789012:q' }],
      ['Signature not base64', { ...body, Signature: 'not base64!' }],
      ['unknown Type', { ...body, Type: 'Notice' }],
      ['a confirmation without Token', { ...signed({ Type: 'SubscriptionConfirmation' }), Token: undefined }],
      ['Subject as an object', { ...body, Subject: { a: 1 } }],
      ['an array', [body]],
      ['a string', 'hello'],
      ['null', null],
    ];
    for (const [name, value] of cases) {
      expect(parseSnsEnvelope(JSON.stringify(value)).kind, name).toBe('invalid');
    }
    expect(parseSnsEnvelope('{not json').kind).toBe('invalid');
  });

  it('refuses a body over the size limit without parsing it', () => {
    const huge = JSON.stringify({ ...signed(), Message: 'x'.repeat(2 * 1024 * 1024) });
    expect(parseSnsEnvelope(huge)).toEqual({
      kind: 'invalid',
      reason: `SNS message larger than ${SNS_MAX_BODY_BYTES} bytes`,
    });
    expect(parseSnsEnvelope(Buffer.from(JSON.stringify(signed())), { ...DEFAULT_SNS_LIMITS, maxBytes: 100 }).kind).toBe(
      'invalid',
    );
  });

  it('takes a Message of 256 KiB and refuses one byte more; refuses nesting past the limit before parsing', () => {
    const withMessage = (message: string) => JSON.stringify({ ...signed(), Message: message });
    expect(parseSnsEnvelope(withMessage('é'.repeat(SNS_MAX_MESSAGE_BYTES / 2))).kind).toBe('ok');
    expect(parseSnsEnvelope(withMessage(`${'é'.repeat(SNS_MAX_MESSAGE_BYTES / 2)}x`))).toEqual({
      kind: 'invalid',
      reason: `SNS Message larger than ${SNS_MAX_MESSAGE_BYTES} bytes`,
    });
    expect(parseSnsEnvelope(`${'['.repeat(65)}${']'.repeat(65)}`)).toEqual({
      kind: 'invalid',
      reason: 'SNS message: JSON nested deeper than 64 levels (at offset 64)',
    });
  });

  it('never throws, whatever the body', () => {
    fc.assert(
      fc.property(
        fc.oneof(
          fc.string(),
          fc.jsonValue().map((v) => JSON.stringify(v)),
        ),
        (body) => {
          expect(['ok', 'invalid']).toContain(parseSnsEnvelope(body).kind);
        },
      ),
      { numRuns: 500 },
    );
    fc.assert(
      fc.property(fc.dictionary(fc.constantFrom(...Object.keys(signed())), fc.jsonValue()), (fields) => {
        const parsed = parseSnsEnvelope(JSON.stringify({ ...signed(), ...fields }));
        if (parsed.kind === 'ok')
          expect(['verified', 'refused']).toContain(verifySnsSignature(parsed.envelope, sns.certificatePem, now).kind);
      }),
      { numRuns: 300 },
    );
  });
});

describe('SNS origin: topic allow-list and certificate URL', () => {
  it('refuses a topic not on the allow-list (any AWS account can make SNS sign for its own topic)', () => {
    const foreign = envelope(signed({ TopicArn: 'arn:aws:sns:us-east-1:999999999999:ses-feedback' }));
    expect(checkSnsOrigin(foreign, allowed)).toEqual({ kind: 'refused', reason: 'SNS topic is not on the allow-list' });
    expect(checkSnsOrigin(envelope(signed()), allowed)).toEqual({ kind: 'allowed', certificateUrl: TEST_SNS_CERT_URL });
  });

  it("refuses a certificate URL outside the topic's region (a fetch anywhere region-shaped, found by an attack)", () => {
    const elsewhere = envelope(
      signed({ SigningCertURL: TEST_SNS_CERT_URL.replace('sns.us-east-1.', 'sns.xx-attacker-9.') }),
    );
    expect(checkSnsOrigin(elsewhere, allowed)).toEqual({
      kind: 'refused',
      reason: "SNS SigningCertURL is not in the topic's own region",
    });
  });

  it.each([
    'https://sns.us-east-1.amazonaws.com/SimpleNotificationService-abc.pem',
    'https://sns.us-gov-west-1.amazonaws.com/SimpleNotificationService-abc.pem',
    'https://sns.cn-north-1.amazonaws.com.cn/SimpleNotificationService-abc.pem',
    'https://sns.ap-southeast-2.amazonaws.com/SimpleNotificationService-0123456789abcdef.pem',
  ])('accepts %s', (url) => {
    expect(snsCertificateUrl(url)).toBe(url);
  });

  it.each([
    ['plain http', 'http://sns.us-east-1.amazonaws.com/SimpleNotificationService-abc.pem'],
    ['a lookalike suffix', 'https://sns.us-east-1.amazonaws.com.evil.com/SimpleNotificationService-abc.pem'],
    ['a lookalike .cn suffix', 'https://sns.us-east-1.amazonaws.com.cn.evil.com/x.pem'],
    ['user info', 'https://amazonaws.com@evil.com/x.pem'],
    ['user info before the SNS host', 'https://sns.us-east-1.amazonaws.com@evil.com/x.pem'],
    ['user info naming the SNS host', 'https://evil.com@sns.us-east-1.amazonaws.com/x.pem'],
    ['a percent-encoded dot', 'https://sns.us-east-1.amazonaws.com%2eevil.com/x.pem'],
    ['a percent-encoded path', 'https://sns.us-east-1.amazonaws.com/%2e%2e/x.pem'],
    ['a port', 'https://sns.us-east-1.amazonaws.com:8443/x.pem'],
    ['a query', 'https://sns.us-east-1.amazonaws.com/x.pem?x=1'],
    ['a fragment', 'https://sns.us-east-1.amazonaws.com/x.pem#a'],
    ['a trailing dot', 'https://sns.us-east-1.amazonaws.com./x.pem'],
    ['upper case', 'https://SNS.us-east-1.amazonaws.com/x.pem'],
    ['no region', 'https://sns.amazonaws.com/x.pem'],
    ['another service', 'https://s3.us-east-1.amazonaws.com/x.pem'],
    ['a bucket under amazonaws', 'https://sns.us-east-1.amazonaws.com.s3.amazonaws.com/x.pem'],
    ['a subdomain', 'https://evil.sns.us-east-1.amazonaws.com/x.pem'],
    ['a path segment', 'https://sns.us-east-1.amazonaws.com/a/x.pem'],
    ['a backslash', 'https://sns.us-east-1.amazonaws.com\\@evil.com/x.pem'],
    ['not a .pem', 'https://sns.us-east-1.amazonaws.com/x.pem.exe'],
    ['a Cyrillic a', 'https://sns.us-east-1.amazonаws.com/x.pem'],
    ['full-width dots', 'https://sns\uff0eus-east-1\uff0eamazonaws\uff0ecom/x.pem'],
    ['leading whitespace', ' https://sns.us-east-1.amazonaws.com/x.pem'],
    ['a control character', 'https://sns.us-east-1.amazonaws.com/x\t.pem'],
    ['javascript', 'javascript:alert(1)//sns.us-east-1.amazonaws.com/x.pem'],
    ['empty', ''],
    ['very long', `https://sns.us-east-1.amazonaws.com/${'a'.repeat(600)}.pem`],
  ])('refuses %s', (_name, url) => {
    expect(snsCertificateUrl(url)).toBeUndefined();
    expect(checkSnsOrigin(envelope(signed({ SigningCertURL: url })), allowed).kind).toBe('refused');
  });
});

describe('SNS time window: a replay is refused before anything is fetched', () => {
  const window = { maxAgeMs: 2 * 3_600_000, maxFutureMs: 5 * 60_000 };
  const at = (timestamp: string) => checkSnsTimestamp({ timestamp }, now, window);

  it.each([
    ['a 2019 notification', '2019-06-01T10:00:00.000Z', 'refused'],
    ['one a millisecond past the window', new Date(now.getTime() - window.maxAgeMs - 1).toISOString(), 'refused'],
    ['one exactly at the window', new Date(now.getTime() - window.maxAgeMs).toISOString(), 'within'],
    ['one a second old', '2026-01-15T10:00:04.000Z', 'within'],
    ['one without milliseconds', '2026-01-15T10:00:04Z', 'within'],
    ['one within the clock skew ahead', new Date(now.getTime() + window.maxFutureMs).toISOString(), 'within'],
    ['one past the clock skew ahead', new Date(now.getTime() + window.maxFutureMs + 1).toISOString(), 'refused'],
    ['a local time', '2026-01-15T10:00:04.000', 'invalid'],
    ['an offset instead of Z', '2026-01-15T11:00:04.000+01:00', 'invalid'],
    ['epoch seconds', '1768471204', 'invalid'],
    ['an empty string', '', 'invalid'],
    ['a date only', '2026-01-15', 'invalid'],
    ['leading whitespace', ' 2026-01-15T10:00:04.000Z', 'invalid'],
  ])('%s: %s', (_name, timestamp, kind) => {
    expect(at(timestamp).kind).toBe(kind);
  });

  it('says why, naming the window and never the value', () => {
    expect(at('2019-06-01T10:00:00.000Z')).toEqual({
      kind: 'refused',
      reason: 'SNS message older than 7200 s: a replay, refused',
    });
  });
});

describe('snsConfirmationUrl', () => {
  it('is built from the TopicArn region and the Token, whatever SubscribeURL says', () => {
    const message = envelope(
      signed({ Type: 'SubscriptionConfirmation', Token: 'tok+en/1', SubscribeURL: 'https://evil.example/confirm' }),
    );
    const url = new URL(snsConfirmationUrl(message) as string);
    expect(url.origin).toBe('https://sns.us-east-1.amazonaws.com');
    expect(Object.fromEntries(url.searchParams)).toEqual({
      Action: 'ConfirmSubscription',
      TopicArn: TEST_SNS_TOPIC_ARN,
      Token: 'tok+en/1',
    });
  });

  it('uses the China partition host for aws-cn topics, and gives nothing for a Notification', () => {
    const cn = envelope(
      signed({ Type: 'SubscriptionConfirmation', TopicArn: 'arn:aws-cn:sns:cn-north-1:123456789012:t' }),
    );
    expect(snsConfirmationUrl(cn)).toMatch(/^https:\/\/sns\.cn-north-1\.amazonaws\.com\.cn\/\?/);
    expect(snsConfirmationUrl(envelope(signed()))).toBeUndefined();
  });
});
