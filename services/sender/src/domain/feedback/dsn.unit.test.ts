import { deliveryStatusNotification, type DsnOptions } from '../../../test/fixtures/feedback-fixtures.js';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { DEFAULT_DSN_LIMITS, parseDeliveryStatusNotification } from './dsn.js';

const now = new Date('2026-01-15T12:00:00Z');
const unknownUser = {
  address: 'Ada@Example.COM',
  action: 'failed',
  status: '5.1.1',
  diagnosticCode: 'smtp; 550 5.1.1 <ada@example.com>: Recipient address rejected: User unknown',
};

function parse(raw: string | Uint8Array) {
  return parseDeliveryStatusNotification(raw, { now });
}

function dsn(options: Partial<DsnOptions> = {}): string {
  return deliveryStatusNotification({ recipients: [unknownUser], originalMessageId: '<send-1@Mail.Test>', ...options });
}

function events(raw: string | Uint8Array) {
  const parsed = parse(raw);
  if (parsed.kind !== 'ok') throw new Error(parsed.reason);
  return parsed.events;
}

describe('RFC 3464 delivery status notifications', () => {
  it('a failed recipient with a 5.x.x status is a hard bounce of our message', () => {
    const parsed = parse(dsn());
    expect(parsed).toEqual({
      kind: 'ok',
      ignored: 0,
      events: [
        {
          kind: 'hard_bounce',
          source: 'dsn',
          recipient: 'ada@example.com',
          at: new Date('2026-01-15T10:00:01Z'),
          messageId: 'send-1@mail.test',
          eventId: expect.stringMatching(/^dsn-[0-9a-f]{32}$/),
          diagnostic: '5.1.1',
        },
      ],
    });
    expect(JSON.stringify(parsed)).not.toContain('Recipient address rejected');
  });

  it('reads CRLF, LF and CR line endings, and bytes, alike', () => {
    const expected = events(dsn());
    expect(events(dsn({ eol: '\n' }))).toEqual(expected);
    expect(events(dsn().replace(/\r\n/g, '\r'))).toEqual(expected);
    expect(events(Buffer.from(dsn(), 'latin1'))).toEqual(expected);
    // Mixed: a part written by another hop with LF only.
    expect(events(dsn().replace('Action: failed\r\n', 'Action: failed\n'))).toEqual(expected);
  });

  it('takes the ENVID from Original-Envelope-Id (it names the send when nothing of the message came back), a token only', () => {
    const envid = '0b6f1d2e-8a3c-5e4f-9a1b-2c3d4e5f6a7b.k1.0123456789abcdef0123456789abcdef';
    const [withEnvid] = events(
      deliveryStatusNotification({ recipients: [unknownUser], returned: 'none', originalEnvelopeId: envid }),
    );
    expect(withEnvid).toMatchObject({ kind: 'hard_bounce', envelopeId: envid });
    expect(withEnvid?.messageId).toBeUndefined();
    expect(events(dsn())[0]).not.toHaveProperty('envelopeId');
    for (const odd of ['<a@b>', 'a b', 'x'.repeat(101), 'ada@example.com'])
      expect(events(dsn({ originalEnvelopeId: odd }))[0], odd).not.toHaveProperty('envelopeId');
  });

  it('takes the Message-ID from a returned message/rfc822, and from an Original-Message-ID field without one', () => {
    expect(events(dsn({ returned: 'message' }))[0]?.messageId).toBe('send-1@mail.test');
    const bare = dsn({ returned: 'none' });
    expect(events(bare)[0]?.messageId).toBeUndefined();
    expect(
      events(bare.replace('Reporting-MTA:', 'Original-Message-ID: <send-2@mail.test>\r\nReporting-MTA:'))[0]?.messageId,
    ).toBe('send-2@mail.test');
  });

  it('decodes a base64 or quoted-printable delivery-status part', () => {
    const expected = events(dsn());
    expect(events(dsn({ statusEncoding: 'base64' }))).toEqual(expected);
    expect(events(dsn({ statusEncoding: 'quoted-printable' }))).toEqual(expected);
  });

  it.each([
    [{ action: 'failed', status: '4.4.7' }, 'soft_bounce'],
    [{ action: 'failed' }, 'soft_bounce'],
    [{ action: 'delayed', status: '4.4.1' }, 'soft_bounce'],
    [{ action: 'delivered', status: '2.0.0' }, 'delivered'],
    [{ action: 'relayed', status: '2.0.0' }, 'accepted'],
    [{ action: 'expanded', status: '2.0.0' }, 'accepted'],
    [{ action: 'FAILED (permanent)', status: '5.2.1' }, 'hard_bounce'],
  ])('%o is %s', (fields, kind) => {
    expect(events(dsn({ recipients: [{ address: 'ada@example.com', ...fields }] }))[0]?.kind).toBe(kind);
  });

  it('takes the specific code from Diagnostic-Code when Status is generic, and the status from it when Status is missing', () => {
    expect(events(dsn({ recipients: [{ ...unknownUser, status: '5.0.0' }] }))[0]?.diagnostic).toBe('5.1.1');
    expect(
      events(
        dsn({ recipients: [{ address: 'ada@example.com', action: 'failed', diagnosticCode: 'smtp; 550 5.1.1 no' }] }),
      )[0],
    ).toMatchObject({
      kind: 'hard_bounce',
      diagnostic: '5.1.1',
    });
  });

  it('prefers the rfc822 Original-Recipient (what we sent to) and ignores other address types (x400;)', () => {
    expect(
      events(
        dsn({
          recipients: [{ ...unknownUser, address: 'ada.forwarded@gmail.test', originalRecipient: 'ada@example.com' }],
        }),
      )[0]?.recipient,
    ).toBe('ada@example.com');
    const parsed = parse(
      dsn({
        recipients: [
          { ...unknownUser, addressType: 'x400', address: '/C=US/ADMD=ATTMAIL/PRMD=X/O=Y/S=Lovelace/' },
          { ...unknownUser, address: 'bob@example.com' },
        ],
      }),
    );
    expect(parsed).toMatchObject({ kind: 'ok', ignored: 1, events: [{ recipient: 'bob@example.com' }] });
    expect(
      events(dsn({ recipients: [{ ...unknownUser, address: '<Ada@Example.com> (the user)' }] }))[0]?.recipient,
    ).toBe('ada@example.com');
  });

  it('unfolds folded field lines', () => {
    const folded = dsn()
      .replace('Final-Recipient: rfc822; Ada@Example.COM', 'Final-Recipient: rfc822;\r\n\tAda@Example.COM')
      .replace('Status: 5.1.1', 'Status:\r\n 5.1.1');
    expect(events(folded)).toEqual(events(dsn()));
  });

  it('uses Last-Attempt-Date, and never a time after now', () => {
    expect(
      events(dsn({ recipients: [{ ...unknownUser, lastAttemptDate: 'Thu, 15 Jan 2026 09:30:00 +0000' }] }))[0]?.at,
    ).toEqual(new Date('2026-01-15T09:30:00Z'));
    expect(events(dsn({ date: 'Fri, 1 Jan 2100 00:00:00 +0000' }))[0]?.at).toBe(now);
  });

  it('reads a UTF-8 report (RFC 6533) with an IDN domain', () => {
    const global = dsn({ recipients: [{ ...unknownUser, addressType: 'utf-8', address: 'ada@bücher.de' }] }).replace(
      'message/delivery-status',
      'message/global-delivery-status',
    );
    expect(events(Buffer.from(global, 'utf8'))[0]?.recipient).toBe('ada@xn--bcher-kva.de');
  });

  it('finds a report nested in a multipart/mixed (a forwarding wrapper), not one inside a returned message', () => {
    const inner = dsn();
    const [headers, ...rest] = inner.split('\r\n\r\n');
    const contentType = headers!
      .split('\r\n')
      .filter((l) => /^(Content-Type|\tboundary)/.test(l))
      .join('\r\n');
    const wrapped = [
      'From: a@b.test',
      'Content-Type: multipart/mixed; boundary="outer"',
      '',
      '--outer',
      'Content-Type: text/plain',
      '',
      'fyi',
      '--outer',
      contentType,
      '',
      rest.join('\r\n\r\n'),
      '--outer--',
      '',
    ].join('\r\n');
    // The wrapper is another message: its own Date and Message-ID (none here) make `at` and eventId.
    const { at: _at, eventId: _eventId, ...fact } = events(inner)[0]!;
    expect(events(wrapped)).toEqual([{ ...fact, at: now }]);
    const smuggled = [
      'From: a@b.test',
      'Content-Type: multipart/mixed; boundary="outer"',
      '',
      '--outer',
      'Content-Type: message/rfc822',
      '',
      inner,
      '--outer--',
      '',
    ].join('\r\n');
    expect(parse(smuggled).kind).toBe('invalid');
  });

  it('ignores a line that only starts with the boundary, and reads a report whose closing delimiter is missing', () => {
    const boundary = 'B6E1B1A0.1736935200/mx.receiver.test';
    const decoy = dsn().replace('This is the mail system', `--${boundary}X not a delimiter\r\nThis is the mail system`);
    expect(events(decoy)).toEqual(events(dsn()));
    expect(events(dsn({ returned: 'none' }).replace(`--${boundary}--`, ''))).toHaveLength(1);
  });

  it('refuses what is no delivery status notification', () => {
    const cases: Array<[string, string]> = [
      ['plain mail', 'From: a@b.test\r\nSubject: out of office\r\n\r\nI am away.\r\n'],
      ['no delivery-status part', dsn().replace('message/delivery-status', 'text/plain')],
      ['a report naming no recipient', dsn({ recipients: [] })],
      ['a multipart without boundary', 'Content-Type: multipart/report; report-type=delivery-status\r\n\r\n--x\r\n'],
      ['empty', ''],
      ['junk', '\u0000\u00ff'.repeat(1000)],
    ];
    for (const [name, raw] of cases) expect(parse(raw).kind, name).toBe('invalid');
  });

  it('refuses deep nesting, too many parts, huge headers, too many recipients and oversized messages', () => {
    let nested = dsn();
    for (let depth = 0; depth < 100; depth++)
      nested = `Content-Type: multipart/mixed; boundary="b${depth}"\r\n\r\n--b${depth}\r\n${nested}\r\n--b${depth}--\r\n`;
    expect(parse(nested)).toEqual({ kind: 'invalid', reason: 'multipart nested deeper than 8 levels' });
    const manyParts = `Content-Type: multipart/mixed; boundary="p"\r\n\r\n${'--p\r\nContent-Type: text/plain\r\n\r\nx\r\n'.repeat(1000)}--p--\r\n`;
    expect(parse(manyParts)).toEqual({ kind: 'invalid', reason: 'more than 256 MIME parts' });
    const hugeHeader = `X-Junk: ${'a'.repeat(70 * 1024)}\r\n${dsn()}`;
    expect(parse(hugeHeader)).toEqual({ kind: 'invalid', reason: 'header block larger than 65536 bytes' });
    const manyFields = `${'X-A: b\r\n'.repeat(1500)}${dsn()}`;
    expect(parse(manyFields)).toEqual({ kind: 'invalid', reason: 'header block with more than 1000 fields' });
    const many = dsn({
      recipients: Array.from({ length: 51 }, (_, i) => ({ ...unknownUser, address: `u${i}@example.com` })),
    });
    expect(parse(many)).toEqual({ kind: 'invalid', reason: 'delivery status names more than 50 recipients' });
    expect(parse(`${dsn()}${' '.repeat(DEFAULT_DSN_LIMITS.maxBytes)}`).kind).toBe('invalid');
  });

  it('reads hostile shapes of the size limit in linear time', () => {
    const boundary = 'B6E1B1A0.1736935200/mx.receiver.test';
    const size = DEFAULT_DSN_LIMITS.maxBytes - 10_000;
    const shapes = [
      // Junk field groups in the status part, each no recipient.
      dsn().replace('Reporting-MTA:', `${'X-A: b\r\n\r\n'.repeat(size / 12)}Reporting-MTA:`),
      // Lines that start like the delimiter and are not one.
      dsn().replace('This is the mail system', `${`--${boundary}X\r\n`.repeat(size / 42)}This`),
      // One enormous folded field in the status part.
      dsn().replace('Action: failed', `Action: failed${'\r\n '.repeat(20_000)}`),
      // Empty lines only.
      '\r\n'.repeat(size / 2),
      // An unclosed quoted boundary parameter, long.
      `Content-Type: multipart/report; boundary="${'a'.repeat(60_000)}\r\n\r\n`,
    ];
    for (const raw of shapes) {
      const started = performance.now();
      expect(['ok', 'invalid']).toContain(parse(raw).kind);
      expect(performance.now() - started).toBeLessThan(1_500);
    }
  });

  it('survives 8-bit junk: bytes that are no UTF-8 in the text part and in an address', () => {
    const junk = Buffer.concat([
      Buffer.from(
        dsn()
          .replace('This is the mail system', 'This is \u00ff\u00fe the mail system')
          .replace('Ada@Example.COM', 'a\u00e9\u0080\u00ff@example.com'),
        'latin1',
      ),
    ]);
    expect(parse(junk)).toMatchObject({ kind: 'ok', events: [], ignored: 1 });
  });

  it('never throws: random bytes, and random damage to a real report', () => {
    fc.assert(
      fc.property(fc.uint8Array({ maxLength: 4000 }), (bytes) => {
        expect(['ok', 'invalid']).toContain(parse(bytes).kind);
      }),
      { numRuns: 300 },
    );
    const real = dsn();
    fc.assert(
      fc.property(
        fc.array(fc.tuple(fc.nat(real.length), fc.nat(40), fc.string({ maxLength: 30 })), { maxLength: 8 }),
        (edits) => {
          let damaged = real;
          for (const [at, cut, insert] of edits) damaged = damaged.slice(0, at) + insert + damaged.slice(at + cut);
          const parsed = parse(damaged);
          expect(['ok', 'invalid']).toContain(parsed.kind);
          if (parsed.kind === 'ok')
            for (const e of parsed.events) expect(e.recipient).toMatch(/^[^\sA-Z]+@[a-z0-9.-]+$/);
        },
      ),
      { numRuns: 500 },
    );
  });
});
