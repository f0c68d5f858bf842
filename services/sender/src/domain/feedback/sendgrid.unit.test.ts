import { generateKeyPairSync, sign } from 'node:crypto';
import { signSendGridWebhook } from '../../../test/fixtures/feedback-fixtures.js';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { parseSendGridEvents, receiveSendGridWebhook, sendGridPublicKey, verifySendGridSignature } from './sendgrid.js';

const keys = generateKeyPairSync('ec', { namedCurve: 'prime256v1' });
const publicKey = keys.publicKey;
const now = new Date('2026-01-15T10:00:00Z');
const timestamp = String(now.getTime() / 1000);

const body = JSON.stringify([
  {
    email: 'Ada@Example.com',
    timestamp: 1768471100,
    'smtp-id': '<send-1@mail.test>',
    event: 'bounce',
    type: 'bounce',
    status: '5.1.1',
    reason: '550 5.1.1 The email account that you tried to reach does not exist. ada@example.com',
    sg_event_id: 'ZmFrZS1ldmVudC1pZA==',
    sg_message_id: '14c5d75ce93.dfd.64b469.filter0001.16648.5515E0B88.0',
  },
]);

function request(
  overrides: { body?: string | Uint8Array; signature?: string | undefined; timestamp?: string | undefined } = {},
) {
  const b = overrides.body ?? body;
  const t = 'timestamp' in overrides ? overrides.timestamp : timestamp;
  return {
    body: b,
    timestamp: t,
    signature: 'signature' in overrides ? overrides.signature : signSendGridWebhook(b, t ?? '', keys.privateKey),
  };
}

describe('SendGrid Signed Event Webhook', () => {
  it("verifies SendGrid's own published test vector (base64 DER key and signature, timestamp + payload)", () => {
    // From @sendgrid/eventwebhook's tests: a key, payload and signature SendGrid's code produced.
    const key = sendGridPublicKey(
      'MFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAEEDr2LjtURuePQzplybdC+u4CwrqDqBaWjcMMsTbhdbcwHBcepxo7yAQGhHPTnlvFYPAZFceEu/1FwCM/QmGUhA==',
    );
    expect(key).toBeDefined();
    const vector = {
      body: JSON.stringify({ category: 'example_payload', event: 'test_event', message_id: 'message_id' }),
      signature: 'MEUCIQCtIHJeH93Y+qpYeWrySphQgpNGNr/U+UyUlBkU6n7RAwIgJTz2C+8a8xonZGi6BpSzoQsbVRamr2nlxFDWYNH2j/0=',
      timestamp: '1588788367',
    };
    const at = new Date(1588788367_000);
    expect(verifySendGridSignature(vector, { publicKey: key!, now: at })).toEqual({ kind: 'verified' });
    expect(
      verifySendGridSignature(
        { ...vector, body: vector.body.replace('test_event', 'test_evenT') },
        { publicKey: key!, now: at },
      ).kind,
    ).toBe('refused');
  });

  it('verifies a body signed with the account key, as a string or as the raw bytes', () => {
    expect(verifySendGridSignature(request(), { publicKey, now })).toEqual({ kind: 'verified' });
    expect(verifySendGridSignature(request({ body: Buffer.from(body) }), { publicKey, now })).toEqual({
      kind: 'verified',
    });
  });

  it.each([
    [
      'another key',
      () => ({
        ...request(),
        signature: signSendGridWebhook(
          body,
          timestamp,
          generateKeyPairSync('ec', { namedCurve: 'prime256v1' }).privateKey,
        ),
      }),
    ],
    ['the body changed by one byte', () => ({ ...request(), body: body.replace('"5.1.1"', '"5.1.2"') })],
    ['a trailing newline added', () => ({ ...request(), body: `${body}\n` })],
    ['the body re-serialized', () => ({ ...request(), body: JSON.stringify(JSON.parse(body), null, 1) })],
    ['the timestamp changed', () => ({ ...request(), timestamp: String(Number(timestamp) + 1) })],
    [
      'a raw r||s (IEEE P1363) signature',
      () => ({
        ...request(),
        signature: sign('sha256', Buffer.from(timestamp + body), {
          key: keys.privateKey,
          dsaEncoding: 'ieee-p1363',
        }).toString('base64'),
      }),
    ],
    [
      'a hex signature',
      () => ({ ...request(), signature: Buffer.from(request().signature ?? '', 'base64').toString('hex') }),
    ],
    ['an empty signature', () => ({ ...request(), signature: '' })],
    ['no signature header', () => request({ signature: undefined })],
    ['no timestamp header', () => request({ timestamp: undefined })],
    ['a timestamp in milliseconds', () => request({ timestamp: String(now.getTime()) })],
    ['a timestamp that is not a number', () => request({ timestamp: '1e9' })],
    ['a replayed (stale) timestamp', () => request({ timestamp: String(Number(timestamp) - 11 * 60) })],
    ['a timestamp from the future', () => request({ timestamp: String(Number(timestamp) + 11 * 60) })],
    ['a signature of a 1 KB', () => ({ ...request(), signature: 'A'.repeat(1024) })],
  ])('refuses %s', (_name, make) => {
    expect(verifySendGridSignature(make(), { publicKey, now }).kind).toBe('refused');
  });

  it('the replay window is configurable', () => {
    const old = request({ timestamp: String(Number(timestamp) - 60) });
    expect(verifySendGridSignature(old, { publicKey, now }).kind).toBe('verified');
    expect(verifySendGridSignature(old, { publicKey, now, toleranceMs: 30_000 })).toEqual({
      kind: 'refused',
      reason: 'SendGrid timestamp is outside the replay window',
    });
  });

  it('reads the verification key as SendGrid shows it (base64 DER) or as PEM, and only an EC P-256 public key', () => {
    const der = publicKey.export({ type: 'spki', format: 'der' }).toString('base64');
    const pem = publicKey.export({ type: 'spki', format: 'pem' }).toString();
    expect(sendGridPublicKey(der)?.equals(publicKey)).toBe(true);
    expect(sendGridPublicKey(`  ${pem}\n`)?.equals(publicKey)).toBe(true);
    const rsa = generateKeyPairSync('rsa', { modulusLength: 1024 })
      .publicKey.export({ type: 'spki', format: 'der' })
      .toString('base64');
    const p384 = generateKeyPairSync('ec', { namedCurve: 'secp384r1' })
      .publicKey.export({ type: 'spki', format: 'der' })
      .toString('base64');
    const privatePem = keys.privateKey.export({ type: 'pkcs8', format: 'pem' }).toString();
    for (const value of [rsa, p384, privatePem, '', 'not a key', 'AAAA'])
      expect(sendGridPublicKey(value)).toBeUndefined();
  });
});

describe('SendGrid events', () => {
  const at = (seconds: number) => new Date(seconds * 1000);
  const event = (fields: Record<string, unknown>) => ({ email: 'ada@example.com', timestamp: 1768471100, ...fields });

  it('maps the documented delivery events', () => {
    const parsed = parseSendGridEvents(
      JSON.stringify([
        event({ event: 'bounce', type: 'bounce', status: '5.1.1' }),
        event({ event: 'bounce', type: 'blocked', status: '4.0.0' }),
        event({ event: 'bounce', status: '5.7.1' }),
        event({ event: 'bounce', status: 421 }),
        event({ event: 'dropped', reason: 'Bounced Address' }),
        event({ event: 'dropped', reason: 'Spam Reporting Address' }),
        event({ event: 'dropped', reason: 'Unsubscribed Address' }),
        event({ event: 'deferred', attempt: '5', response: '400 try again later' }),
        event({ event: 'spamreport' }),
        event({ event: 'delivered', response: '250 OK' }),
        event({ event: 'group_unsubscribe' }),
        event({ event: 'processed' }),
        event({ event: 'open' }),
        event({ event: 'click' }),
      ]),
      { now },
    );
    expect(parsed.kind).toBe('ok');
    if (parsed.kind !== 'ok') return;
    expect(parsed.ignored).toBe(2);
    expect(parsed.events.map((e) => [e.kind, e.diagnostic, e.subtype])).toEqual([
      ['hard_bounce', '5.1.1', 'bounce'],
      ['soft_bounce', '4.0.0', 'blocked'],
      ['hard_bounce', '5.7.1', undefined],
      ['soft_bounce', undefined, undefined],
      ['hard_bounce', undefined, 'dropped_bounced_address'],
      ['complaint', undefined, 'dropped_spam_reporting_address'],
      ['other', undefined, 'dropped'],
      ['other', undefined, 'deferred'],
      ['complaint', undefined, 'spamreport'],
      ['delivered', undefined, undefined],
      ['other', undefined, 'unsubscribe'],
      ['accepted', undefined, 'processed'],
    ]);
  });

  it('carries our Message-ID, SendGrid message id (X-Message-Id part) and event id, and no free text', () => {
    const parsed = receiveSendGridWebhook(request(), { publicKey, now });
    expect(parsed).toEqual({
      kind: 'ok',
      ignored: 0,
      events: [
        {
          kind: 'hard_bounce',
          source: 'sendgrid',
          recipient: 'ada@example.com',
          at: at(1768471100),
          messageId: 'send-1@mail.test',
          providerMessageId: '14c5d75ce93.dfd.64b469',
          eventId: 'ZmFrZS1ldmVudC1pZA==',
          diagnostic: '5.1.1',
          subtype: 'bounce',
        },
      ],
    });
    expect(JSON.stringify(parsed)).not.toContain('does not exist');
  });

  it('refuses a body that is not a JSON array, and one over the caps (size before signature)', () => {
    for (const b of ['{}', '"x"', 'null', '{"0":{}}', 'not json', ''])
      expect(receiveSendGridWebhook(request({ body: b }), { publicKey, now }).kind, b).toBe('invalid');
    const million = `[${Array(1_000_000).fill('{}').join(',')}]`;
    expect(receiveSendGridWebhook({ body: million, timestamp, signature: 'x' }, { publicKey, now })).toEqual({
      kind: 'invalid',
      reason: 'SendGrid body larger than 1048576 bytes',
    });
    expect(
      receiveSendGridWebhook(request({ body: million }), {
        publicKey,
        now,
        limits: { maxBytes: 4 * 1024 * 1024, maxEvents: 10_000 },
      }),
    ).toEqual({
      kind: 'invalid',
      reason: 'SendGrid body holds more than 10000 events',
    });
  });

  it('ignores nested junk, and refuses an unsigned body before parsing it', () => {
    const junk = JSON.stringify([
      null,
      1,
      'x',
      [],
      [[[{ event: 'bounce' }]]],
      { email: { $gt: '' }, event: 'bounce' },
      { email: 'ada@example.com', event: ['bounce'] },
      event({ event: 'bounce', type: 'bounce', 'smtp-id': { a: 1 }, sg_event_id: 'has@at', sg_message_id: ['x'] }),
    ]);
    const parsed = receiveSendGridWebhook(request({ body: junk }), { publicKey, now });
    expect(parsed).toMatchObject({ kind: 'ok', ignored: 7 });
    expect(parsed.kind === 'ok' && parsed.events[0]).toEqual({
      kind: 'hard_bounce',
      source: 'sendgrid',
      recipient: 'ada@example.com',
      at: at(1768471100),
      subtype: 'bounce',
    });
    expect(
      receiveSendGridWebhook({ ...request({ body: junk }), signature: request().signature }, { publicKey, now }).kind,
    ).toBe('refused');
    // Nesting past MAX_JSON_DEPTH is refused before JSON.parse sees it (contracts' json-depth.ts).
    const deep = '['.repeat(100_000) + ']'.repeat(100_000);
    expect(parseSendGridEvents(deep, { now })).toEqual({
      kind: 'invalid',
      reason: 'SendGrid body: JSON nested deeper than 64 levels (at offset 64)',
    });
  });

  it('never throws on any body or headers', () => {
    fc.assert(
      fc.property(
        fc.oneof(
          fc.string(),
          fc.jsonValue().map((v) => JSON.stringify(v)),
        ),
        fc.option(fc.string()),
        fc.option(fc.string()),
        (b, signature, ts) => {
          const result = receiveSendGridWebhook(
            { body: b, signature: signature ?? undefined, timestamp: ts ?? undefined },
            { publicKey, now },
          );
          expect(['ok', 'invalid', 'refused']).toContain(result.kind);
          expect(['ok', 'invalid']).toContain(parseSendGridEvents(b, { now }).kind);
        },
      ),
      { numRuns: 500 },
    );
  });
});
