import { mailgunEventData, mailgunWebhook, signMailgunWebhook } from '../../../test/fixtures/feedback-fixtures.js';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import {
  DEFAULT_MAILGUN_LIMITS,
  mailgunSigningKey,
  parseMailgunEvent,
  receiveMailgunWebhook,
  verifyMailgunSignature,
} from './mailgun.js';

const KEY = 'test-mailgun-signing-key-0123456789abcdef';
const signingKey = mailgunSigningKey(KEY);
const now = new Date('2026-01-15T10:00:00Z');
const seconds = String(now.getTime() / 1000);
const TOKEN = 'e0b5477167110d68991efc6b9f89f0a11066af27834600e123';
const signed = signMailgunWebhook(KEY, seconds, TOKEN);
const options = { signingKey, now };

const delivered = mailgunEventData({
  event: 'delivered',
  recipient: 'Ada@Example.com',
  messageId: 'send-1.k1.0123456789abcdef0123456789abcdef@mail.test',
  id: 'CPgfbmQMTCKtHW6uIWtuVe',
  timestamp: 1768471100.908181,
});
const body = mailgunWebhook(KEY, delivered, signed);

describe('Mailgun webhook signature', () => {
  it('verifies the HMAC of timestamp + token under the signing key, in a body as a string or as bytes', () => {
    expect(verifyMailgunSignature(signed, options)).toEqual({
      kind: 'verified',
      timestamp: seconds,
      token: TOKEN,
      signedAt: now.getTime(),
    });
    for (const b of [body, Buffer.from(body)])
      expect(receiveMailgunWebhook(b, options)).toMatchObject({ kind: 'ok', events: [{ kind: 'delivered' }] });
  });

  it('takes the timestamp as an integer too (documented type int; Mailgun sends a string)', () => {
    expect(verifyMailgunSignature({ ...signed, timestamp: Number(seconds) }, options).kind).toBe('verified');
  });

  it.each([
    ['another key', () => signMailgunWebhook('another-signing-key-0123456789abcdef', seconds, TOKEN)],
    ['the timestamp changed', () => ({ ...signed, timestamp: String(Number(seconds) + 1) })],
    ['the timestamp with a leading zero', () => ({ ...signed, timestamp: `0${seconds}` })],
    ['the token changed', () => ({ ...signed, token: TOKEN.replace('e0', 'e1') })],
    ['the signature one digit off', () => ({ ...signed, signature: `${signed.signature.slice(0, -1)}0` })],
    ['the signature in upper case', () => ({ ...signed, signature: signed.signature.toUpperCase() })],
    ['the signature not hex', () => ({ ...signed, signature: `${signed.signature.slice(0, -1)}g` })],
    [
      'the signature as base64',
      () => ({ ...signed, signature: Buffer.from(signed.signature, 'hex').toString('base64') }),
    ],
    ['the signature 63 digits', () => ({ ...signed, signature: signed.signature.slice(1) })],
    ['the signature 65 digits', () => ({ ...signed, signature: `${signed.signature}0` })],
    ['the signature twice', () => ({ ...signed, signature: signed.signature.repeat(2) })],
    ['an empty signature', () => ({ ...signed, signature: '' })],
    ['a 200 KB signature', () => ({ ...signed, signature: 'a'.repeat(200 * 1024) })],
    ['a signature as a number', () => ({ ...signed, signature: 12345 })],
    ['a signature as an array', () => ({ ...signed, signature: [signed.signature] })],
    ['no signature field', () => ({ timestamp: seconds, token: TOKEN })],
    ['a stale timestamp (11 minutes)', () => signMailgunWebhook(KEY, String(Number(seconds) - 11 * 60), TOKEN)],
    [
      'a timestamp from the future (11 minutes)',
      () => signMailgunWebhook(KEY, String(Number(seconds) + 11 * 60), TOKEN),
    ],
    ['a timestamp in milliseconds', () => signMailgunWebhook(KEY, String(now.getTime()), TOKEN)],
    ['a timestamp as a float', () => ({ ...signed, timestamp: Number(seconds) + 0.5 })],
    ['a negative timestamp', () => ({ ...signed, timestamp: -1 })],
    ['a timestamp "1e9"', () => signMailgunWebhook(KEY, '1e9', TOKEN)],
    ['a timestamp as an array', () => ({ ...signed, timestamp: [seconds] })],
    ['a timestamp as an object', () => ({ ...signed, timestamp: { toString: seconds } })],
    ['a boolean timestamp', () => ({ ...signed, timestamp: true })],
    ['no timestamp', () => ({ token: TOKEN, signature: signed.signature })],
    ['a token with other characters', () => signMailgunWebhook(KEY, seconds, `${TOKEN.slice(0, 49)}-`)],
    ['a token of 15 characters', () => signMailgunWebhook(KEY, seconds, TOKEN.slice(0, 15))],
    ['a token of 129 characters', () => signMailgunWebhook(KEY, seconds, 'a'.repeat(129))],
    ['a token of 200 KB', () => signMailgunWebhook(KEY, seconds, 'a'.repeat(200 * 1024))],
    ['a token as a number', () => ({ ...signed, token: 1234567890123456 })],
    ['no token', () => ({ timestamp: seconds, signature: signed.signature })],
    ['the signature object as a string', () => JSON.stringify(signed)],
    ['the signature object as an array', () => [signed]],
    ['null', () => null],
  ])('refuses %s', (_name, make) => {
    expect(verifyMailgunSignature(make(), options).kind).toBe('refused');
    expect(receiveMailgunWebhook(mailgunWebhook(KEY, delivered, make()), options).kind).toBe('refused');
  });

  it('the replay window is configurable', () => {
    const old = signMailgunWebhook(KEY, String(Number(seconds) - 60), TOKEN);
    expect(verifyMailgunSignature(old, options).kind).toBe('verified');
    expect(verifyMailgunSignature(old, { ...options, toleranceMs: 30_000 })).toEqual({
      kind: 'refused',
      reason: 'Mailgun signature timestamp is outside the replay window',
    });
  });

  it('does not cover the event: the same signature verifies with another event (hence each token is taken once)', () => {
    const forged = mailgunEventData({ event: 'delivered', recipient: 'bob@example.com', messageId: 'other@mail.test' });
    expect(receiveMailgunWebhook(mailgunWebhook(KEY, forged, signed), options)).toMatchObject({
      kind: 'ok',
      events: [{ recipient: 'bob@example.com' }],
      signed: { token: TOKEN, timestamp: seconds },
    });
  });
});

describe('Mailgun webhook events', () => {
  const event = (fields: Parameters<typeof mailgunEventData>[0]) =>
    parseMailgunEvent(mailgunEventData({ timestamp: 1768471100, ...fields }), { now });

  it('maps the documented events, and ignores the rest', () => {
    const recipient = 'ada@example.com';
    const cases: Array<[Parameters<typeof mailgunEventData>[0], [string, string | undefined] | undefined]> = [
      [{ event: 'accepted', recipient }, ['accepted', undefined]],
      [{ event: 'delivered', recipient }, ['delivered', undefined]],
      [{ event: 'failed', severity: 'permanent', reason: 'bounce', recipient }, ['hard_bounce', 'bounce']],
      [
        { event: 'failed', severity: 'permanent', reason: 'suppress-bounce', recipient },
        ['hard_bounce', 'suppress-bounce'],
      ],
      [{ event: 'failed', severity: 'temporary', reason: 'generic', recipient }, ['soft_bounce', 'generic']],
      [{ event: 'complained', recipient }, ['complaint', 'complained']],
      [{ event: 'unsubscribed', recipient }, ['other', 'unsubscribe']],
      [{ event: 'opened', recipient }, undefined],
      [{ event: 'clicked', recipient }, undefined],
      [{ event: 'stored', recipient }, undefined],
      [{ event: 'rejected', recipient }, undefined],
      [{ event: 'DELIVERED', recipient }, undefined],
    ];
    for (const [fields, expected] of cases) {
      const parsed = event(fields);
      expect(parsed.kind, fields.event).toBe('ok');
      const found = parsed.kind === 'ok' ? parsed.feedback : undefined;
      expect(found && [found.kind, found.subtype], fields.event).toEqual(expected);
    }
    const unknownSeverity = mailgunEventData({ event: 'failed', recipient });
    delete unknownSeverity.severity;
    expect(parseMailgunEvent(unknownSeverity, { now })).toMatchObject({
      kind: 'ok',
      feedback: { kind: 'other', subtype: 'failed' },
    });
  });

  it('carries our Message-ID, the event id, its time and status code, and no free text', () => {
    const parsed = receiveMailgunWebhook(
      mailgunWebhook(
        KEY,
        mailgunEventData({
          event: 'failed',
          severity: 'permanent',
          recipient: 'Ada@Example.COM',
          messageId: '<Send-1.k1.ab@Mail.Test>',
          id: 'G9Bn5sl1TC6nu79C8C0bwg',
          timestamp: 1768471100.5,
          enhancedCode: '5.1.1',
        }),
        signed,
      ),
      options,
    );
    expect(parsed).toEqual({
      kind: 'ok',
      ignored: 0,
      signed: { timestamp: seconds, token: TOKEN, signedAt: now.getTime() },
      events: [
        {
          kind: 'hard_bounce',
          source: 'mailgun',
          recipient: 'ada@example.com',
          at: new Date(1768471100_500),
          messageId: 'Send-1.k1.ab@mail.test',
          eventId: 'G9Bn5sl1TC6nu79C8C0bwg',
          diagnostic: '5.1.1',
          subtype: 'bounce',
        },
      ],
    });
    expect(JSON.stringify(parsed)).not.toContain('does not exist');
  });

  it('a time in the future or none is now; an event naming no address we send to is ignored', () => {
    expect(
      event({ event: 'delivered', recipient: 'ada@example.com', timestamp: now.getTime() / 1000 + 3600 }),
    ).toMatchObject({
      feedback: { at: now },
    });
    const untimed = mailgunEventData({ event: 'delivered', recipient: 'ada@example.com' });
    delete untimed.timestamp;
    expect(parseMailgunEvent(untimed, { now })).toMatchObject({ feedback: { at: now } });
    for (const recipient of ['not an address', '', 'ada@', '<>'])
      expect(event({ event: 'delivered', recipient }), recipient).toEqual({ kind: 'ok' });
    expect(
      receiveMailgunWebhook(
        mailgunWebhook(KEY, mailgunEventData({ event: 'opened', recipient: 'a@b.c' }), signed),
        options,
      ),
    ).toMatchObject({
      kind: 'ok',
      events: [],
      ignored: 1,
    });
  });

  it('a Message-ID that is no msg-id names nothing (the event is kept without one)', () => {
    for (const messageId of ['', 'two words@x', '<a@b', '"quoted"@x'])
      expect(event({ event: 'delivered', recipient: 'ada@example.com', messageId }), messageId).toMatchObject({
        kind: 'ok',
        feedback: { kind: 'delivered' },
      });
    const parsed = event({ event: 'delivered', recipient: 'ada@example.com', messageId: 'two words@x' });
    expect(parsed.kind === 'ok' && parsed.feedback?.messageId).toBeUndefined();
  });

  const base = () => mailgunEventData({ event: 'delivered', recipient: 'ada@example.com', messageId: 'a@b.c' });
  const withField = (path: string[], value: unknown) => {
    const data = base();
    let at: Record<string, unknown> = data;
    for (const key of path.slice(0, -1)) at = at[key] as Record<string, unknown>;
    at[path.at(-1) as string] = value;
    return data;
  };
  it.each([
    ['no event-data', undefined],
    ['event-data as an array', [base()]],
    ['event-data as a string', JSON.stringify(base())],
    ['event as an array', withField(['event'], ['delivered'])],
    ['event as a number', withField(['event'], 1)],
    ['no event', withField(['event'], undefined)],
    ['an event name of 90 KB', withField(['event'], 'delivered'.repeat(10_000))],
    ['no id', withField(['id'], undefined)],
    ['id as a number', withField(['id'], 42)],
    ['id with an at-sign', withField(['id'], 'ada@example.com')],
    ['id of 257 characters', withField(['id'], 'a'.repeat(257))],
    ['timestamp as a string', withField(['timestamp'], '1768471100')],
    ['timestamp as an object', withField(['timestamp'], { $gt: 0 })],
    ['recipient as an array', withField(['recipient'], ['ada@example.com'])],
    ['recipient as an object', withField(['recipient'], { $ne: null })],
    ['no recipient', withField(['recipient'], undefined)],
    ['a recipient of 100 KB', withField(['recipient'], `${'a'.repeat(100_000)}@example.com`)],
    ['message as an array', withField(['message'], [])],
    ['message.headers as a string', withField(['message', 'headers'], 'message-id: a@b.c')],
    ['message-id as an array', withField(['message', 'headers', 'message-id'], ['a@b.c'])],
    ['a message-id of 100 KB', withField(['message', 'headers', 'message-id'], `${'a'.repeat(100_000)}@b.c`)],
  ])('refuses a verified body with %s (400, nothing taken)', (_name, eventData) => {
    const result = receiveMailgunWebhook(mailgunWebhook(KEY, eventData, signed), options);
    expect(result.kind).toBe('invalid');
  });

  it('refuses a body that is not a JSON object of bounded size and depth, before its signature is looked at', () => {
    for (const b of ['', 'not json', 'null', '[]', '"x"', '42', `[${body}]`])
      expect(receiveMailgunWebhook(b, options), b).toMatchObject({ kind: 'invalid' });
    const big = mailgunWebhook(KEY, { ...delivered, padding: 'x'.repeat(DEFAULT_MAILGUN_LIMITS.maxBytes) }, signed);
    expect(receiveMailgunWebhook(big, options)).toEqual({
      kind: 'invalid',
      reason: `Mailgun body larger than ${DEFAULT_MAILGUN_LIMITS.maxBytes} bytes`,
    });
    // 10,000 nested arrays, alone and in the event: refused before JSON.parse walks them.
    const nested = '['.repeat(10_000) + ']'.repeat(10_000);
    expect(receiveMailgunWebhook(nested, options)).toEqual({
      kind: 'invalid',
      reason: 'Mailgun body: JSON nested deeper than 64 levels (at offset 64)',
    });
    const inEvent = `{"signature":${JSON.stringify(signed)},"event-data":${nested}}`;
    expect(receiveMailgunWebhook(inEvent, options)).toMatchObject({
      kind: 'invalid',
      reason: expect.stringMatching(/nested deeper than 64 levels/),
    });
  });

  it('never throws on any body', () => {
    fc.assert(
      fc.property(
        fc.oneof(
          fc.string(),
          fc.jsonValue().map((v) => JSON.stringify(v)),
          fc.jsonValue().map((v) => mailgunWebhook(KEY, v, signed)),
          fc.jsonValue().map((v) => mailgunWebhook(KEY, delivered, v)),
          fc
            .dictionary(fc.constantFrom('event', 'id', 'timestamp', 'recipient', 'severity', 'message'), fc.jsonValue())
            .map((fields) => mailgunWebhook(KEY, { ...delivered, ...fields }, signed)),
        ),
        (b) => {
          const result = receiveMailgunWebhook(b, options);
          expect(['ok', 'invalid', 'refused']).toContain(result.kind);
          expect(['ok', 'invalid']).toContain(parseMailgunEvent(b, { now }).kind);
        },
      ),
      { numRuns: 500 },
    );
  });
});
