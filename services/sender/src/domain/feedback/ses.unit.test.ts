import { sesNotification } from '../../../test/fixtures/feedback-fixtures.js';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { parseSesNotification } from './ses.js';

const now = new Date('2026-01-15T10:00:05Z');
const context = { now, eventId: '22b80b92-fdea-4c2c-8f9d-bdfb0c7bf324' };

function events(message: string) {
  const parsed = parseSesNotification(message, context);
  if (parsed.kind !== 'ok') throw new Error(parsed.reason);
  return parsed;
}

describe('SES notifications', () => {
  it('a Permanent bounce is a hard bounce per recipient, with our Message-ID, the code and SES ids', () => {
    const message = sesNotification({
      type: 'Bounce',
      recipients: ['Ada@Example.COM', 'bob@example.com'],
      messageId: '<send-1@Mail.Test>',
      diagnosticCode: 'smtp; 550 5.1.1 user unknown',
    });
    expect(events(message)).toEqual({
      kind: 'ok',
      ignored: 0,
      events: ['ada@example.com', 'bob@example.com'].map((recipient) => ({
        kind: 'hard_bounce',
        source: 'ses',
        recipient,
        at: new Date('2026-01-15T09:59:58.000Z'),
        messageId: 'send-1@mail.test',
        providerMessageId: '0100018d0a1b2c3d-11111111-2222-3333-4444-555555555555-000000',
        eventId: context.eventId,
        diagnostic: '5.1.1',
        subtype: 'General',
      })),
    });
  });

  it.each(['Transient', 'Undetermined'] as const)('a %s bounce is a soft bounce', (bounceType) => {
    const message = sesNotification({
      type: 'Bounce',
      bounceType,
      bounceSubType: 'MailboxFull',
      status: '4.2.2',
      recipients: ['ada@example.com'],
    });
    expect(events(message).events).toMatchObject([
      { kind: 'soft_bounce', diagnostic: '4.2.2', subtype: 'MailboxFull' },
    ]);
  });

  it('reads event publishing (eventType) the same as identity notifications (notificationType)', () => {
    const a = events(sesNotification({ type: 'Bounce', recipients: ['ada@example.com'] }));
    const b = events(sesNotification({ type: 'Bounce', recipients: ['ada@example.com'], field: 'eventType' }));
    expect(b).toEqual(a);
  });

  it('a complaint suppresses; one the recipient marked not-spam does not', () => {
    expect(
      events(sesNotification({ type: 'Complaint', recipients: ['ada@example.com'], complaintFeedbackType: 'abuse' }))
        .events,
    ).toMatchObject([{ kind: 'complaint', recipient: 'ada@example.com', subtype: 'abuse' }]);
    expect(events(sesNotification({ type: 'Complaint', recipients: ['ada@example.com'] })).events).toMatchObject([
      { kind: 'complaint' },
    ]);
    expect(
      events(sesNotification({ type: 'Complaint', recipients: ['ada@example.com'], complaintFeedbackType: 'not-spam' }))
        .events,
    ).toMatchObject([{ kind: 'other', subtype: 'not-spam' }]);
  });

  it('deliveries and delivery delays', () => {
    expect(events(sesNotification({ type: 'Delivery', recipients: ['ada@example.com'] })).events).toMatchObject([
      { kind: 'delivered' },
    ]);
    expect(events(sesNotification({ type: 'DeliveryDelay', recipients: ['ada@example.com'] })).events).toMatchObject([
      { kind: 'soft_bounce', diagnostic: '4.2.2', subtype: 'MailboxFull' },
    ]);
  });

  it('other event types and SES setup messages are understood and ignored', () => {
    expect(parseSesNotification(sesNotification({ type: 'Open', recipients: ['ada@example.com'] }), context)).toEqual({
      kind: 'ok',
      events: [],
      ignored: 1,
    });
    expect(
      parseSesNotification(
        JSON.stringify({ notificationType: 'AmazonSnsSubscriptionSucceeded', message: 'x' }),
        context,
      ),
    ).toEqual({
      kind: 'ok',
      events: [],
      ignored: 1,
    });
  });

  it('takes the Message-ID from mail.headers when commonHeaders lack it', () => {
    const message = JSON.parse(
      sesNotification({ type: 'Bounce', recipients: ['ada@example.com'], messageId: '<a@b.test>' }),
    );
    delete message.mail.commonHeaders;
    message.mail.headers = [
      ...Array.from({ length: 10 }, (_, i) => ({ name: `X-${i}`, value: 'v' })),
      { name: 'MESSAGE-ID', value: '<c@d.test>' },
    ];
    expect(events(JSON.stringify(message)).events[0]?.messageId).toBe('c@d.test');
  });

  it('counts unusable recipients as ignored, and clamps a future time to now', () => {
    const message = JSON.parse(
      sesNotification({ type: 'Bounce', recipients: ['ada@example.com'], timestamp: '2099-01-01T00:00:00Z' }),
    );
    message.bounce.bouncedRecipients.push(
      { emailAddress: 'not an address' },
      { emailAddress: { nested: ['junk'] } },
      'ada@example.com',
      null,
    );
    const parsed = events(JSON.stringify(message));
    expect(parsed.ignored).toBe(4);
    expect(parsed.events).toHaveLength(1);
    expect(parsed.events[0]?.at).toBe(now);
  });

  it('refuses a recipient list longer than the cap (100k entries) whole, without reading it', () => {
    const message = JSON.parse(sesNotification({ type: 'Bounce', recipients: ['ada@example.com'] }));
    message.bounce.bouncedRecipients = Array.from({ length: 100_000 }, (_, i) => ({
      emailAddress: `u${i}@example.com`,
    }));
    const started = performance.now();
    expect(parseSesNotification(JSON.stringify(message), context)).toEqual({
      kind: 'invalid',
      reason: 'SES notification names more than 100 recipients',
    });
    expect(performance.now() - started).toBeLessThan(2_000);
  });

  it('refuses what is not an SES notification', () => {
    for (const message of [
      'not json',
      '[]',
      '"x"',
      '{}',
      '{"notificationType":7}',
      '{"notificationType":"Bounce"}',
      '{"notificationType":"Bounce","bounce":{"bouncedRecipients":"x"}}',
    ])
      expect(parseSesNotification(message, context).kind, message).toBe('invalid');
  });

  it('never throws, and never reports a recipient that is no canonical address', () => {
    const valid = JSON.parse(sesNotification({ type: 'Bounce', recipients: ['ada@example.com'] }));
    fc.assert(
      fc.property(
        fc.jsonValue(),
        fc.constantFrom('bounce', 'mail', 'notificationType', 'complaint', 'delivery'),
        (junk, key) => {
          const parsed = parseSesNotification(JSON.stringify({ ...valid, [key]: junk }), context);
          if (parsed.kind === 'ok')
            for (const e of parsed.events) expect(e.recipient).toMatch(/^[^\sA-Z]+@[a-z0-9.-]+$/);
        },
      ),
      { numRuns: 500 },
    );
  });
});
