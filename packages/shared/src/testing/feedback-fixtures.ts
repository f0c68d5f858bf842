/**
 * Delivery feedback as the providers send it, for tests: SNS envelopes signed the way SNS signs
 * them (with a test certificate standing in for SNS's), SES notifications, SendGrid Event Webhook
 * bodies with their ECDSA signature, and RFC 3464 delivery status notifications. Written from the
 * providers' documentation, independently of the parsers under test, so a test that signs here and
 * verifies there checks that both read the documentation alike.
 */
import { sign, type KeyObject } from 'node:crypto';

export const TEST_SNS_TOPIC_ARN = 'arn:aws:sns:us-east-1:123456789012:ses-feedback';
export const TEST_SNS_CERT_URL =
  'https://sns.us-east-1.amazonaws.com/SimpleNotificationService-0123456789abcdef0123456789abcdef.pem';

export interface SnsMessageFields {
  readonly Type?: 'Notification' | 'SubscriptionConfirmation' | 'UnsubscribeConfirmation';
  readonly MessageId?: string;
  readonly TopicArn?: string;
  readonly Message: string;
  readonly Timestamp?: string;
  readonly Subject?: string;
  readonly Token?: string;
  readonly SubscribeURL?: string;
  readonly SignatureVersion?: '1' | '2';
  readonly SigningCertURL?: string;
}

/**
 * An SNS HTTP delivery body (as an object; JSON.stringify it) signed with `privateKey`: SHA1withRSA
 * for SignatureVersion 1, SHA256withRSA for 2, over `Name\nvalue\n` of the documented fields.
 */
export function signedSnsMessage(fields: SnsMessageFields, privateKey: KeyObject): Record<string, string> {
  const type = fields.Type ?? 'Notification';
  const message: Record<string, string> = {
    Type: type,
    MessageId: fields.MessageId ?? '22b80b92-fdea-4c2c-8f9d-bdfb0c7bf324',
    TopicArn: fields.TopicArn ?? TEST_SNS_TOPIC_ARN,
    Message: fields.Message,
    Timestamp: fields.Timestamp ?? '2026-01-15T10:00:00.000Z',
    SignatureVersion: fields.SignatureVersion ?? '2',
    SigningCertURL: fields.SigningCertURL ?? TEST_SNS_CERT_URL,
  };
  if (fields.Subject !== undefined) message.Subject = fields.Subject;
  if (type !== 'Notification') {
    message.Token =
      fields.Token ??
      '2336412f37fb687f5d51e6e241d09c805a5a57b30d712f794cc5f6a988666d92768dd60a747ba6f3beb71854e285d6ad02428b09ceece29417f1f02d609c582afbacc99c583a916b9981dd2728f4ae6fdb82efd087cc3b7849e05798d2d2785c03b0879594eeac82c01f235d0e717736';
    message.SubscribeURL =
      fields.SubscribeURL ??
      `https://sns.us-east-1.amazonaws.com/?Action=ConfirmSubscription&TopicArn=${message.TopicArn}&Token=${message.Token}`;
  }
  const order =
    type === 'Notification'
      ? ['Message', 'MessageId', 'Subject', 'Timestamp', 'TopicArn', 'Type']
      : ['Message', 'MessageId', 'SubscribeURL', 'Timestamp', 'Token', 'TopicArn', 'Type'];
  const stringToSign = order
    .filter((name) => message[name] !== undefined)
    .map((name) => `${name}\n${message[name]}\n`)
    .join('');
  const algorithm = message.SignatureVersion === '1' ? 'sha1' : 'sha256';
  message.Signature = sign(algorithm, Buffer.from(stringToSign, 'utf8'), privateKey).toString('base64');
  return message;
}

export interface SesNotificationOptions {
  readonly type: 'Bounce' | 'Complaint' | 'Delivery' | 'DeliveryDelay' | 'Open';
  readonly recipients: readonly string[];
  /** `notificationType` (identity notifications, default) or `eventType` (event publishing). */
  readonly field?: 'notificationType' | 'eventType';
  readonly bounceType?: 'Permanent' | 'Transient' | 'Undetermined';
  readonly bounceSubType?: string;
  readonly status?: string;
  readonly diagnosticCode?: string;
  readonly complaintFeedbackType?: string;
  /** Our Message-ID, as SES reports it in commonHeaders and headers. */
  readonly messageId?: string;
  readonly sesMessageId?: string;
  readonly timestamp?: string;
}

/** An SES notification (the SNS `Message`), shaped like the SES developer guide's examples. */
export function sesNotification(options: SesNotificationOptions): string {
  const timestamp = options.timestamp ?? '2026-01-15T09:59:58.000Z';
  const mail: Record<string, unknown> = {
    timestamp: '2026-01-15T09:59:50.000Z',
    source: 'outreach@sender.test',
    sourceArn: 'arn:aws:ses:us-east-1:123456789012:identity/sender.test',
    sendingAccountId: '123456789012',
    messageId: options.sesMessageId ?? '0100018d0a1b2c3d-11111111-2222-3333-4444-555555555555-000000',
    destination: options.recipients,
  };
  if (options.messageId !== undefined) {
    mail.headersTruncated = false;
    mail.headers = [
      { name: 'From', value: 'outreach@sender.test' },
      { name: 'Message-ID', value: options.messageId },
    ];
    mail.commonHeaders = { from: ['outreach@sender.test'], to: options.recipients, messageId: options.messageId };
  }
  const notification: Record<string, unknown> = { [options.field ?? 'notificationType']: options.type, mail };
  switch (options.type) {
    case 'Bounce':
      notification.bounce = {
        bounceType: options.bounceType ?? 'Permanent',
        bounceSubType: options.bounceSubType ?? 'General',
        bouncedRecipients: options.recipients.map((emailAddress) => ({
          emailAddress,
          action: 'failed',
          status: options.status ?? '5.1.1',
          diagnosticCode: options.diagnosticCode ?? `smtp; 550 5.1.1 <${emailAddress}>... User unknown`,
        })),
        timestamp,
        feedbackId: '0100018d0a1b2c3d-feedback-000000',
        reportingMTA: 'dsn; a8-70.smtp-out.amazonses.com',
      };
      break;
    case 'Complaint':
      notification.complaint = {
        complainedRecipients: options.recipients.map((emailAddress) => ({ emailAddress })),
        timestamp,
        feedbackId: '0100018d0a1b2c3d-complaint-000000',
        ...(options.complaintFeedbackType === undefined
          ? {}
          : { complaintFeedbackType: options.complaintFeedbackType }),
      };
      break;
    case 'Delivery':
      notification.delivery = {
        timestamp,
        processingTimeMillis: 546,
        recipients: options.recipients,
        smtpResponse: '250 ok: Message 64111812 accepted',
        reportingMTA: 'a8-70.smtp-out.amazonses.com',
      };
      break;
    case 'DeliveryDelay':
      notification.deliveryDelay = {
        timestamp,
        delayType: 'MailboxFull',
        expirationTime: '2026-01-16T09:59:50.000Z',
        delayedRecipients: options.recipients.map((emailAddress) => ({
          emailAddress,
          status: options.status ?? '4.2.2',
          diagnosticCode: 'smtp; 452 4.2.2 Mailbox full',
        })),
      };
      break;
    case 'Open':
      notification.open = { timestamp, userAgent: 'Mozilla/5.0', ipAddress: '192.0.2.1' };
      break;
  }
  return JSON.stringify(notification);
}

/** The `X-Twilio-Email-Event-Webhook-Signature` SendGrid would send: base64 DER ECDSA(SHA-256, timestamp + body). */
export function signSendGridWebhook(body: string | Uint8Array, timestamp: string, privateKey: KeyObject): string {
  const bytes = typeof body === 'string' ? Buffer.from(body, 'utf8') : Buffer.from(body);
  return sign('sha256', Buffer.concat([Buffer.from(timestamp, 'utf8'), bytes]), {
    key: privateKey,
    dsaEncoding: 'der',
  }).toString('base64');
}

export interface DsnRecipient {
  readonly address: string;
  readonly action: string;
  readonly status?: string;
  readonly diagnosticCode?: string;
  /** Final-Recipient's address type (default rfc822). */
  readonly addressType?: string;
  readonly originalRecipient?: string;
  readonly lastAttemptDate?: string;
}

export interface DsnOptions {
  readonly recipients: readonly DsnRecipient[];
  /** The returned message's Message-ID (with brackets). */
  readonly originalMessageId?: string;
  /** How the original comes back: its headers (default), the whole message, or not at all. */
  readonly returned?: 'headers' | 'message' | 'none';
  readonly reportMessageId?: string;
  readonly date?: string;
  readonly eol?: '\r\n' | '\n';
  readonly boundary?: string;
  /** Content-Transfer-Encoding of the delivery-status part. */
  readonly statusEncoding?: '7bit' | 'base64' | 'quoted-printable';
}

/** A multipart/report delivery status notification as Postfix writes one (RFC 3464). */
export function deliveryStatusNotification(options: DsnOptions): string {
  const eol = options.eol ?? '\r\n';
  const boundary = options.boundary ?? 'B6E1B1A0.1736935200/mx.receiver.test';
  const groups = [['Reporting-MTA: dns; mx.receiver.test', 'Arrival-Date: Wed, 15 Jan 2026 10:00:00 +0000'].join(eol)];
  for (const r of options.recipients) {
    const fields: string[] = [];
    if (r.originalRecipient !== undefined) fields.push(`Original-Recipient: rfc822;${r.originalRecipient}`);
    fields.push(`Final-Recipient: ${r.addressType ?? 'rfc822'}; ${r.address}`, `Action: ${r.action}`);
    if (r.status !== undefined) fields.push(`Status: ${r.status}`);
    if (r.diagnosticCode !== undefined) fields.push(`Diagnostic-Code: ${r.diagnosticCode}`);
    if (r.lastAttemptDate !== undefined) fields.push(`Last-Attempt-Date: ${r.lastAttemptDate}`);
    groups.push(fields.join(eol));
  }
  let status = groups.join(eol + eol) + eol;
  const encoding = options.statusEncoding ?? '7bit';
  if (encoding === 'base64')
    status = Buffer.from(status, 'latin1')
      .toString('base64')
      .replace(/.{1,76}/g, `$&${eol}`);
  if (encoding === 'quoted-printable') status = status.replace(/=/g, '=3D').replace(/: /g, ':=20');
  const originalHeaders = [
    'From: outreach@sender.test',
    `To: ${options.recipients[0]?.address ?? 'nobody@receiver.test'}`,
    'Subject: Hello',
    ...(options.originalMessageId === undefined ? [] : [`Message-ID: ${options.originalMessageId}`]),
    'Date: Wed, 15 Jan 2026 09:59:59 +0000',
  ].join(eol);
  const parts = [
    [
      'Content-Description: Notification',
      'Content-Type: text/plain; charset=us-ascii',
      '',
      'This is the mail system at host mx.receiver.test.',
      '',
      "I'm sorry to have to inform you that your message could not",
      'be delivered to one or more recipients.',
    ].join(eol),
    [
      'Content-Description: Delivery report',
      'Content-Type: message/delivery-status',
      `Content-Transfer-Encoding: ${encoding}`,
      '',
      status,
    ].join(eol),
  ];
  if (options.returned !== 'none') {
    parts.push(
      options.returned === 'message'
        ? [
            'Content-Description: Undelivered Message',
            'Content-Type: message/rfc822',
            '',
            originalHeaders,
            '',
            'Body text.',
          ].join(eol)
        : [
            'Content-Description: Undelivered Message Headers',
            'Content-Type: text/rfc822-headers',
            '',
            originalHeaders,
          ].join(eol),
    );
  }
  return [
    'Return-Path: <>',
    'From: MAILER-DAEMON@mx.receiver.test (Mail Delivery System)',
    'To: bounces@sender.test',
    'Subject: Undelivered Mail Returned to Sender',
    `Date: ${options.date ?? 'Wed, 15 Jan 2026 10:00:01 +0000'}`,
    `Message-ID: ${options.reportMessageId ?? '<20260115100001.B6E1B1A0@mx.receiver.test>'}`,
    'MIME-Version: 1.0',
    'Content-Type: multipart/report; report-type=delivery-status;',
    `\tboundary="${boundary}"`,
    '',
    'This is a MIME-encapsulated message.',
    '',
    ...parts.map((part) => `--${boundary}${eol}${part}${eol}`),
    `--${boundary}--`,
    '',
  ].join(eol);
}
