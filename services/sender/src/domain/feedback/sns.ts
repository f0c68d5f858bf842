/**
 * Amazon SNS HTTP(S) deliveries: the JSON envelope, where its signing certificate may come from,
 * and its signature. Pure: the certificate comes in as PEM (an adapter fetches it) and `now` as a
 * value.
 *
 * Three checks make a message ours, in this order, and each refuses without the next running:
 * 1. The topic: `TopicArn` is on our allow-list. SNS signs every message of every topic, an
 *    attacker's own included, so a valid signature alone proves nothing about whose topic it is;
 *    and a message from a topic we do not know never makes us fetch anything.
 * 2. The certificate URL (`snsCertificateUrl`): exactly `https://sns.<region>.amazonaws.com[.cn]/<name>.pem`
 *    with region `[a-z]{2}(-[a-z]+)+-\d{1,2}` (us-east-1, us-gov-west-1, cn-north-1) and name
 *    `[A-Za-z0-9_.-]{1,128}`: lower case, no user info, port, query, fragment, further path or
 *    percent-encoding, and the string must be what the URL parser gives back, so `https://sns.us-east-1.amazonaws.com.evil.com/x.pem`,
 *    `https://amazonaws.com@evil.com/x.pem`, `http://...`, `https://sns.us-east-1.amazonaws.com%2eevil.com/`
 *    and friends are refused before any request. The host is then authenticated by TLS when the
 *    adapter fetches it.
 * 3. The signature: SignatureVersion 1 (SHA1withRSA) or 2 (SHA256withRSA) over the documented
 *    string to sign, by the certificate's RSA key, while the certificate is valid.
 *
 * And the time (`checkSnsTimestamp`, before the certificate is fetched: it needs nothing fetched,
 * and the signature then covers it): a message whose signed Timestamp is older than the window
 * (SNS retries an HTTPS delivery for an hour at most) or ahead of our clock by more than a skew is
 * a replay, refused. Without it a message captured once is good for as long as the rows that
 * dedupe it are kept, and the runbook purges those after 90 days.
 *
 * The string to sign is `Name\nvalue\n` for each field in this order, a field that is absent left
 * out (SNS developer guide, "Verifying the signatures of Amazon SNS messages"):
 *   Notification                                        Message, MessageId, Subject, Timestamp, TopicArn, Type
 *   SubscriptionConfirmation, UnsubscribeConfirmation   Message, MessageId, SubscribeURL, Timestamp, Token, TopicArn, Type
 */
import { X509Certificate, verify } from 'node:crypto';
import { invalid, parseJsonBody, refused, type SignatureCheck } from './feedback.js';

export const SNS_MESSAGE_TYPES = ['Notification', 'SubscriptionConfirmation', 'UnsubscribeConfirmation'] as const;
export type SnsMessageType = (typeof SNS_MESSAGE_TYPES)[number];

export interface SnsEnvelope {
  readonly type: SnsMessageType;
  readonly messageId: string;
  readonly topicArn: string;
  /** For a Notification, the publisher's message: SES's notification JSON. */
  readonly message: string;
  readonly timestamp: string;
  readonly subject?: string;
  /** Subscription and unsubscribe confirmations only. */
  readonly token?: string;
  readonly subscribeUrl?: string;
  readonly signatureVersion: '1' | '2';
  readonly signature: string;
  readonly signingCertUrl: string;
}

/** SNS publishes messages of at most 256 KiB (the Message, in UTF-8 bytes). */
export const SNS_MAX_MESSAGE_BYTES = 256 * 1024;
/**
 * The largest HTTP body an SNS delivery of such a message can be: the Message is a JSON string in
 * the envelope, and escaping at most doubles an SES notification (JSON text, whose only characters
 * that escape are `"` and `\`), plus the envelope's other fields (the signature, URLs, ids: under 4 KiB).
 */
export const SNS_MAX_BODY_BYTES = 2 * SNS_MAX_MESSAGE_BYTES + 16 * 1024;

export interface SnsLimits {
  /** The largest envelope read (SNS_MAX_BODY_BYTES). */
  readonly maxBytes: number;
  /** The largest Message (SNS_MAX_MESSAGE_BYTES): anything larger is not SNS's. */
  readonly maxMessageBytes: number;
}

export const DEFAULT_SNS_LIMITS: SnsLimits = { maxBytes: SNS_MAX_BODY_BYTES, maxMessageBytes: SNS_MAX_MESSAGE_BYTES };

export type SnsEnvelopeParse =
  { readonly kind: 'ok'; readonly envelope: SnsEnvelope } | { readonly kind: 'invalid'; readonly reason: string };

// arn:<partition>:sns:<region>:<account>:<topic>; topic names are 1-256 of [A-Za-z0-9_-], `.fifo` allowed.
const TOPIC_ARN =
  /^arn:(aws|aws-cn|aws-us-gov):sns:([a-z]{2}(?:-[a-z]+)+-\d{1,2}):(\d{12}):([A-Za-z0-9_-]{1,256}(?:\.fifo)?)$/;

/** An SNS topic ARN (for SES_SNS_TOPIC_ARNS at start). */
export function isSnsTopicArn(value: string): boolean {
  return TOPIC_ARN.test(value);
}

const SNS_HOST = /^sns\.[a-z]{2}(?:-[a-z]+)+-\d{1,2}\.amazonaws\.com(?:\.cn)?$/;
const CERT_URL = /^https:\/\/(sns\.[a-z]{2}(?:-[a-z]+)+-\d{1,2}\.amazonaws\.com(?:\.cn)?)\/[A-Za-z0-9_.-]{1,128}\.pem$/;
const BASE64 = /^[A-Za-z0-9+/]+={0,2}$/;

/**
 * The envelope of an SNS HTTP(S) delivery, or why it is not one. Checks shapes and types only;
 * nothing here is trusted until `checkSnsOrigin` and `verifySnsSignature` say so.
 */
export function parseSnsEnvelope(body: string | Uint8Array, limits: SnsLimits = DEFAULT_SNS_LIMITS): SnsEnvelopeParse {
  const parsed = parseJsonBody(body, limits.maxBytes, 'SNS message');
  if (parsed.kind === 'invalid') return parsed;
  const value = parsed.value;
  if (typeof value !== 'object' || value === null || Array.isArray(value))
    return invalid('SNS message is not a JSON object');
  const fields = value as Record<string, unknown>;
  const text = (name: string, max: number): string | undefined => {
    const v = fields[name];
    return typeof v === 'string' && v.length <= max ? v : undefined;
  };
  const type = text('Type', 64);
  if (type === undefined || !(SNS_MESSAGE_TYPES as readonly string[]).includes(type))
    return invalid('SNS Type is not Notification, SubscriptionConfirmation or UnsubscribeConfirmation');
  const messageId = text('MessageId', 128);
  const topicArn = text('TopicArn', 512);
  if (typeof fields.Message === 'string' && Buffer.byteLength(fields.Message, 'utf8') > limits.maxMessageBytes)
    return invalid(`SNS Message larger than ${limits.maxMessageBytes} bytes`);
  const message = text('Message', limits.maxBytes);
  const timestamp = text('Timestamp', 64);
  const signature = text('Signature', 2048);
  const signingCertUrl = text('SigningCertURL', 1024);
  const signatureVersion = fields.SignatureVersion;
  const missing = [
    ['MessageId', messageId],
    ['TopicArn', topicArn],
    ['Message', message],
    ['Timestamp', timestamp],
    ['Signature', signature],
    ['SigningCertURL', signingCertUrl],
  ]
    .filter(([, v]) => v === undefined)
    .map(([name]) => name);
  if (missing.length > 0) return invalid(`SNS message lacks string fields: ${missing.join(', ')}`);
  if (signatureVersion !== '1' && signatureVersion !== '2') return invalid('SNS SignatureVersion is not "1" or "2"');
  if (!BASE64.test(signature as string)) return invalid('SNS Signature is not base64');
  if (!TOPIC_ARN.test(topicArn as string)) return invalid('SNS TopicArn is not an SNS topic ARN');
  const subject = fields.Subject;
  if (subject !== undefined && subject !== null && (typeof subject !== 'string' || subject.length > 1024))
    return invalid('SNS Subject is not a string');
  const envelope: { -readonly [K in keyof SnsEnvelope]: SnsEnvelope[K] } = {
    type: type as SnsMessageType,
    messageId: messageId as string,
    topicArn: topicArn as string,
    message: message as string,
    timestamp: timestamp as string,
    signatureVersion,
    signature: signature as string,
    signingCertUrl: signingCertUrl as string,
  };
  if (typeof subject === 'string') envelope.subject = subject;
  if (type !== 'Notification') {
    const token = text('Token', 2048);
    const subscribeUrl = text('SubscribeURL', 4096);
    if (token === undefined || subscribeUrl === undefined)
      return invalid(`SNS ${type} lacks string fields Token and SubscribeURL`);
    envelope.token = token;
    envelope.subscribeUrl = subscribeUrl;
  }
  return { kind: 'ok', envelope };
}

/**
 * The signing certificate URL if it is one SNS would use (module header, check 2), else undefined.
 * The returned string is the one to fetch: identical to the input and to the parser's reading.
 */
export function snsCertificateUrl(value: string): string | undefined {
  if (value.length > 512) return undefined;
  const literal = CERT_URL.exec(value);
  if (!literal) return undefined;
  let url: URL;
  try {
    url = new URL(value);
  } catch {
    return undefined;
  }
  const clean =
    url.protocol === 'https:' &&
    url.username === '' &&
    url.password === '' &&
    url.port === '' &&
    url.search === '' &&
    url.hash === '' &&
    url.hostname === literal[1] &&
    SNS_HOST.test(url.hostname) &&
    url.href === value;
  return clean ? url.href : undefined;
}

export interface SnsTimeWindow {
  /** How old the signed Timestamp may be (SNS_MAX_MESSAGE_AGE_MS). */
  readonly maxAgeMs: number;
  /** How far ahead of our clock it may be (clocks differ). */
  readonly maxFutureMs: number;
}

export const DEFAULT_SNS_TIME_WINDOW: SnsTimeWindow = { maxAgeMs: 2 * 3_600_000, maxFutureMs: 5 * 60_000 };

// What SNS writes: 2012-04-25T21:49:25.719Z.
const SNS_TIMESTAMP = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(?:\.\d{1,6})?Z$/;

/**
 * The message's signed Timestamp against `now`: `invalid` when it is no timestamp SNS writes, `refused`
 * when it is outside the window (a replay, or a clock far off), else `within`.
 */
export function checkSnsTimestamp(
  envelope: Pick<SnsEnvelope, 'timestamp'>,
  now: Date,
  window: SnsTimeWindow = DEFAULT_SNS_TIME_WINDOW,
): { readonly kind: 'within' } | { readonly kind: 'invalid' | 'refused'; readonly reason: string } {
  const at = SNS_TIMESTAMP.test(envelope.timestamp) ? Date.parse(envelope.timestamp) : Number.NaN;
  if (!Number.isFinite(at)) return invalid('SNS Timestamp is not an ISO 8601 UTC time');
  const age = now.getTime() - at;
  if (age > window.maxAgeMs)
    return refused(`SNS message older than ${Math.round(window.maxAgeMs / 1000)} s: a replay, refused`);
  if (-age > window.maxFutureMs)
    return refused(`SNS message from more than ${Math.round(window.maxFutureMs / 1000)} s in the future`);
  return { kind: 'within' };
}

export type SnsOriginCheck =
  { readonly kind: 'allowed'; readonly certificateUrl: string } | { readonly kind: 'refused'; readonly reason: string };

/** Checks 1 and 2 of the module header: an allowed topic and a certificate URL on SNS's own host. */
export function checkSnsOrigin(envelope: SnsEnvelope, allowedTopicArns: ReadonlySet<string>): SnsOriginCheck {
  if (!allowedTopicArns.has(envelope.topicArn)) return refused('SNS topic is not on the allow-list');
  const certificateUrl = snsCertificateUrl(envelope.signingCertUrl);
  if (certificateUrl === undefined)
    return refused('SNS SigningCertURL is not an https URL on sns.<region>.amazonaws.com');
  // SNS signs with its own region's certificate: a URL in any other region-shaped host is not one
  // SNS gave, and fetching it would let a caller who knows our topic ARN make us call anywhere there.
  const [, partition, , region] = envelope.topicArn.split(':');
  const expectedHost = `sns.${region ?? ''}.amazonaws.com${partition === 'aws-cn' ? '.cn' : ''}`;
  if (new URL(certificateUrl).hostname !== expectedHost)
    return refused("SNS SigningCertURL is not in the topic's own region");
  return { kind: 'allowed', certificateUrl };
}

/** The string SNS signs for this envelope (module header). */
export function snsStringToSign(envelope: SnsEnvelope): string {
  const fields: Array<[string, string | undefined]> =
    envelope.type === 'Notification'
      ? [
          ['Message', envelope.message],
          ['MessageId', envelope.messageId],
          ['Subject', envelope.subject],
          ['Timestamp', envelope.timestamp],
          ['TopicArn', envelope.topicArn],
          ['Type', envelope.type],
        ]
      : [
          ['Message', envelope.message],
          ['MessageId', envelope.messageId],
          ['SubscribeURL', envelope.subscribeUrl],
          ['Timestamp', envelope.timestamp],
          ['Token', envelope.token],
          ['TopicArn', envelope.topicArn],
          ['Type', envelope.type],
        ];
  return fields
    .filter((field): field is [string, string] => field[1] !== undefined)
    .map(([name, value]) => `${name}\n${value}\n`)
    .join('');
}

/** Check 3 of the module header, given the certificate fetched from the checked URL. */
export function verifySnsSignature(envelope: SnsEnvelope, certificatePem: string, now: Date): SignatureCheck {
  let certificate: X509Certificate;
  try {
    certificate = new X509Certificate(certificatePem);
  } catch {
    return refused('SNS signing certificate is not a readable X.509 certificate');
  }
  if (!(certificate.validFromDate.getTime() <= now.getTime() && now.getTime() <= certificate.validToDate.getTime()))
    return refused('SNS signing certificate is not valid now');
  const key = certificate.publicKey;
  if (key.asymmetricKeyType !== 'rsa') return refused('SNS signing certificate does not hold an RSA key');
  const signature = Buffer.from(envelope.signature, 'base64');
  let ok = false;
  try {
    ok = verify(
      envelope.signatureVersion === '1' ? 'sha1' : 'sha256',
      Buffer.from(snsStringToSign(envelope), 'utf8'),
      key,
      signature,
    );
  } catch {
    ok = false;
  }
  return ok ? { kind: 'verified' } : refused('SNS signature does not verify');
}

/**
 * The URL that confirms a subscription, built from the (allowed, signed) TopicArn and Token rather
 * than taken from SubscribeURL, so confirming can only ever call SNS in the topic's own region.
 */
export function snsConfirmationUrl(envelope: SnsEnvelope): string | undefined {
  const arn = TOPIC_ARN.exec(envelope.topicArn);
  if (!arn || envelope.token === undefined || envelope.type !== 'SubscriptionConfirmation') return undefined;
  const host = `sns.${arn[2]}.amazonaws.com${arn[1] === 'aws-cn' ? '.cn' : ''}`;
  const query = new URLSearchParams({
    Action: 'ConfirmSubscription',
    TopicArn: envelope.topicArn,
    Token: envelope.token,
  });
  return `https://${host}/?${query.toString()}`;
}
