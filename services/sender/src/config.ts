import type { KeyObject } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { isIP } from 'node:net';
import {
  ConfigError,
  EmailHashKeyConfigSchema,
  MAX_BODY_BYTES,
  SuppressionKeyConfigSchema,
  readKeyMaterial,
  readSecretFile,
  type BaseConfig,
  type ReadFile,
} from '@outreach/shared';
import { Type, type Static } from '@sinclair/typebox';
import addressparser from 'nodemailer/lib/addressparser';
import { isSnsTopicArn, mailgunSigningKey, sendGridPublicKey } from './domain/feedback/index.js';
import { IDENTIFIER_KEY_ID, type IdentifierKeyring } from './domain/identifiers.js';

/** The sender's settings, on top of BaseConfigSchema (KAFKA_BROKERS, DATABASE_URL, HTTP_PORT, ...). */
export const ConfigSchema = Type.Object({
  /** The emailHash HMAC key (EMAIL_HASH_KEY_FILE, or EMAIL_HASH_KEY in development) and its EMAIL_HASH_KEY_ID. */
  ...EmailHashKeyConfigSchema.properties,
  /**
   * The suppression key (ADR 014): an erased person's suppression is kept as a hash under it, and
   * each claim carries its address's hash for the gate's lookup. Optional: without it, erasure answers
   * 503 naming it.
   */
  ...SuppressionKeyConfigSchema.properties,
  /**
   * The identifier key (ADR 012): the MAC in every Message-ID, ENVID and unsubscribe token, so a
   * bounce or an unsubscribe names a send only when we made its identifier. A file holding the key
   * as text (`openssl rand -hex 32`), or the key inline for development; exactly one. Required.
   */
  IDENTIFIER_KEY_FILE: Type.String({ default: '' }),
  IDENTIFIER_KEY: Type.String({ default: '' }),
  /** Names the key inside every identifier (lower-case letters, digits, dashes; at most 16); a new key gets a new id. */
  IDENTIFIER_KEY_ID: Type.String({ default: '', pattern: `^(${IDENTIFIER_KEY_ID.source.slice(1, -1)})?$` }),
  /**
   * During a rotation: the key before, still verified (never used to sign) until
   * IDENTIFIER_PREVIOUS_KEY_UNTIL (an ISO 8601 instant with its zone). All three or none.
   */
  IDENTIFIER_PREVIOUS_KEY_FILE: Type.String({ default: '' }),
  IDENTIFIER_PREVIOUS_KEY: Type.String({ default: '' }),
  IDENTIFIER_PREVIOUS_KEY_ID: Type.String({ default: '', pattern: `^(${IDENTIFIER_KEY_ID.source.slice(1, -1)})?$` }),
  IDENTIFIER_PREVIOUS_KEY_UNTIL: Type.String({ default: '' }),
  DATABASE_SCHEMA: Type.String({ default: 'sender', pattern: '^[a-z_][a-z0-9_]*$' }),
  CONSUMER_GROUP: Type.String({ default: 'sender' }),
  MAIL_PROVIDER: Type.Union([Type.Literal('smtp'), Type.Literal('null'), Type.Literal('mailgun')], { default: 'smtp' }),
  /** With MAIL_PROVIDER=null: a file each accepted message is appended to (benchmarks count deliveries there). */
  NULL_PROVIDER_LOG: Type.String({ default: '' }),
  /** With MAIL_PROVIDER=null: how long its answer takes after it accepted a message. */
  NULL_PROVIDER_DELAY_MS: Type.Integer({ minimum: 0, default: 0 }),
  SMTP_HOST: Type.String({ default: '127.0.0.1' }),
  SMTP_PORT: Type.Integer({ minimum: 1, maximum: 65535, default: 1025 }),
  /** Implicit TLS (port 465): the session is encrypted from the first byte. */
  SMTP_SECURE: Type.Boolean({ default: false }),
  /**
   * On a plain port, STARTTLS is required before anything is said (no message, no credentials in
   * clear text). Turn off only for a development server that offers no TLS (Mailpit, test sinks).
   */
  SMTP_REQUIRE_TLS: Type.Boolean({ default: true }),
  /** A PEM file of certificates to trust for the SMTP server (a private CA); else the public CAs. */
  SMTP_TLS_CA_FILE: Type.String({ default: '' }),
  /** The name the server's certificate must carry, when SMTP_HOST is an address or an alias. */
  SMTP_TLS_SERVERNAME: Type.String({ default: '' }),
  SMTP_USER: Type.String({ default: '' }),
  /** A file holding the SMTP password (a mounted secret). Preferred over SMTP_PASSWORD. */
  SMTP_PASSWORD_FILE: Type.String({ default: '' }),
  SMTP_PASSWORD: Type.String({ default: '' }),
  MAIL_FROM: Type.String({ default: 'Outreach <outreach@example.com>' }),
  MESSAGE_ID_DOMAIN: Type.String({ default: 'outreach.local', pattern: '^[A-Za-z0-9.-]+$' }),
  /** With MAIL_PROVIDER=mailgun: the API base (https://api.mailgun.net, or https://api.eu.mailgun.net). */
  MAILGUN_API_URL: Type.String({ default: 'https://api.mailgun.net' }),
  /** The Mailgun sending domain (`/v3/{domain}/…`). */
  MAILGUN_DOMAIN: Type.String({ default: '' }),
  /** A file holding the Mailgun API key (a mounted secret); or MAILGUN_API_KEY in development. */
  MAILGUN_API_KEY_FILE: Type.String({ default: '' }),
  MAILGUN_API_KEY: Type.String({ default: '' }),
  /** How long past PROVIDER_TIMEOUT_MS a request whose body left us keeps waiting for Mailgun's status. */
  MAILGUN_LATE_REPLY_MS: Type.Integer({ minimum: 0, default: 60_000 }),
  /** How long Mailgun keeps events on this plan (at least 3 days): older sends cannot be looked up. */
  MAILGUN_EVENT_RETENTION_MS: Type.Integer({ minimum: 3_600_000, default: 3 * 86_400_000 }),
  /**
   * The delivery lookup (ADR 009) that settles sends in doubt by their Message-ID: `mailpit` (its
   * search API; docker-compose and tests), `mailgun` (its Events API), `evidence` (the delivery
   * evidence the provider or relay pushes for every message it takes: no evidence within
   * DELIVERY_EVIDENCE_WINDOW_MS means it never took it), or `none` (they stay `ambiguous` for an
   * operator, unless evidence settles them).
   */
  PROVIDER_LOOKUP: Type.Union(
    [Type.Literal('none'), Type.Literal('mailpit'), Type.Literal('mailgun'), Type.Literal('evidence')],
    { default: 'none' },
  ),
  MAILPIT_API_URL: Type.String({ default: 'http://127.0.0.1:8025' }),
  /** Mailpit's optional basic auth for its UI and API. */
  MAILPIT_API_USER: Type.String({ default: '' }),
  MAILPIT_API_PASSWORD: Type.String({ default: '' }),
  /** One lookup request's bound. */
  LOOKUP_TIMEOUT_MS: Type.Integer({ minimum: 100, default: 5_000 }),
  /** How long after acceptance the provider's search may miss a message; empty: the lookup's own (Mailpit 5 s, Mailgun 30 min). */
  LOOKUP_SETTLE_MS: Type.Optional(Type.Integer({ minimum: 0 })),
  /** How soon a lookup that failed is asked again. */
  LOOKUP_RECHECK_MS: Type.Integer({ minimum: 100, default: 30_000 }),
  /** After this long since the attempt, a lookup that keeps failing gives up: the send stays `ambiguous`. */
  LOOKUP_GIVE_UP_MS: Type.Integer({ minimum: 1_000, default: 86_400_000 }),
  /**
   * How long after an attempt a provider's delivery evidence may still arrive (ADR 009, "Delivery
   * evidence": SES Delivery, SendGrid processed/delivered, Mailgun accepted/delivered, a success DSN).
   * A lookup's "not found" licenses a retry only after it, so evidence on its way is not overtaken by
   * a second email. 0: no evidence source is expected to report every send (the lookup's settle time
   * alone decides).
   */
  DELIVERY_EVIDENCE_WINDOW_MS: Type.Integer({ minimum: 0, maximum: 7 * 86_400_000, default: 0 }),
  /**
   * Ask an SMTP server that offers DSN (RFC 3461) for success notifications too (`NOTIFY=SUCCESS,FAILURE`,
   * `RET=HDRS`): the relay then mails a DSN when it delivers, which the DSN hook turns into delivery
   * evidence. Off: the server's default (failures only).
   */
  SMTP_DSN_SUCCESS: Type.Boolean({ default: false }),
  /** Lookups in flight at once, per instance. */
  LOOKUP_CONCURRENCY: Type.Integer({ minimum: 1, maximum: 64, default: 4 }),
  UNSUBSCRIBE_MAILTO: Type.String({ default: 'unsubscribe@example.com' }),
  /**
   * The public base of this service's `/v1/unsubscribe` route (e.g. https://mail.example.com/v1/unsubscribe):
   * each email's one-click URL is `${UNSUBSCRIBE_URL}/${token}`. Empty: the mailto only.
   */
  UNSUBSCRIBE_URL: Type.String({ default: '' }),
  /** SNS topic ARNs SES publishes bounces and complaints to (comma-separated); empty: SES intake off (404). */
  SES_SNS_TOPIC_ARNS: Type.String({ default: '' }),
  /** SendGrid's Event Webhook verification key (base64 DER as its settings show it, or PEM); empty: off (404). */
  SENDGRID_WEBHOOK_PUBLIC_KEY: Type.String({ default: '' }),
  /** A file holding that key (a mounted secret); instead of SENDGRID_WEBHOOK_PUBLIC_KEY. */
  SENDGRID_WEBHOOK_PUBLIC_KEY_FILE: Type.String({ default: '' }),
  /**
   * A file holding Mailgun's HTTP webhook signing key (a mounted secret), or the key inline for
   * development; at most one. Neither: Mailgun webhook intake off (404).
   */
  MAILGUN_WEBHOOK_SIGNING_KEY_FILE: Type.String({ default: '' }),
  MAILGUN_WEBHOOK_SIGNING_KEY: Type.String({ default: '' }),
  /**
   * How old an SNS message (its signed Timestamp) may be and still be taken: SNS retries an HTTPS
   * delivery for at most an hour, so anything older is a replay. At most 7 days, well inside the
   * FEEDBACK_RETENTION_DAYS (at least 8) that feedback_events rows, the replay protection past this
   * window, are kept.
   */
  SNS_MAX_MESSAGE_AGE_MS: Type.Integer({ minimum: 60_000, maximum: 7 * 86_400_000, default: 2 * 3_600_000 }),
  /**
   * How long feedback reports (`feedback_events`: the providers' reports, the delivery evidence, the
   * dedupe of their retries) and the soft bounces counted toward auto-pause are kept: rows received
   * longer ago are purged by a periodic task. At least 8 days, past every replay window (SNS's at
   * most 7 days, SendGrid's and Mailgun's 10 minutes), so a report delivered again is still known.
   */
  FEEDBACK_RETENTION_DAYS: Type.Integer({ minimum: 8, maximum: 3_650, default: 90 }),
  /** How often the sender purges feedback reports past their retention. */
  FEEDBACK_PURGE_INTERVAL_MS: Type.Integer({ minimum: 100, default: 3_600_000 }),
  /**
   * The sent log's retention (ADR 014): this many days after a send ended (sent, suppressed, failed)
   * and last changed, its row loses the address, the candidate id, the subject and the body, and keeps
   * the pseudonymous keys that refuse a repeat of the send. 0 (the default): kept whole.
   */
  SENT_LOG_RETENTION_DAYS: Type.Integer({ minimum: 0, maximum: 3_650, default: 0 }),
  /** How often the sender walks the sent log for rows past SENT_LOG_RETENTION_DAYS (when set). */
  SENT_LOG_PURGE_INTERVAL_MS: Type.Integer({ minimum: 100, default: 3_600_000 }),
  /** The largest feedback request body read (SNS, SendGrid batches, a DSN); at most the service body limit. */
  FEEDBACK_MAX_BODY_BYTES: Type.Integer({ minimum: 1024, maximum: MAX_BODY_BYTES, default: MAX_BODY_BYTES }),
  /** Events handed to the pipeline at once (one claim statement). */
  SEND_BATCH_SIZE: Type.Integer({ minimum: 1, maximum: 2000, default: 100 }),
  SEND_CONCURRENCY: Type.Integer({ minimum: 1, maximum: 256, default: 8 }),
  /** Provider calls per second across every replica (a token bucket in PostgreSQL, shared). */
  SEND_RATE_PER_SECOND: Type.Number({ exclusiveMinimum: 0, default: 50 }),
  /** Calls that may go at once after a quiet spell, across every replica; 0: SEND_CONCURRENCY. */
  SEND_RATE_BURST: Type.Integer({ minimum: 0, default: 0 }),
  /** Provider calls per second to one recipient domain, across every replica; 0: SEND_RATE_PER_SECOND. */
  SEND_RATE_PER_DOMAIN_PER_SECOND: Type.Number({ minimum: 0, default: 0 }),
  /** Calls to one recipient domain at once after a quiet spell; 0: SEND_RATE_BURST. */
  SEND_RATE_PER_DOMAIN_BURST: Type.Integer({ minimum: 0, default: 0 }),
  LEASE_MS: Type.Integer({ minimum: 1000, default: 60_000 }),
  PROVIDER_TIMEOUT_MS: Type.Integer({ minimum: 100, default: 20_000 }),
  /**
   * How long an SMTP connection keeps waiting for the reply to the final dot after the call timed
   * out (the send is `ambiguous` meanwhile; a late 250 makes it `sent`). RFC 5321 suggests 10 min.
   */
  SMTP_FINAL_REPLY_TIMEOUT_MS: Type.Integer({ minimum: 100, default: 600_000 }),
  MAX_ATTEMPTS: Type.Integer({ minimum: 1, default: 5 }),
  RETRY_BACKOFF_MS: Type.Integer({ minimum: 0, default: 5_000 }),
  RECONCILE_INTERVAL_MS: Type.Integer({ minimum: 100, default: 5_000 }),
  AUTO_PAUSE_THRESHOLD: Type.Number({ minimum: 0, maximum: 1, default: 0.5 }),
  AUTO_PAUSE_MIN_SENDS: Type.Integer({ minimum: 1, default: 20 }),
  AUTO_PAUSE_WINDOW_MS: Type.Integer({ minimum: 1000, default: 300_000 }),
});

export type Config = BaseConfig & Static<typeof ConfigSchema>;

/**
 * Names that are placeholders or private, never a production sender's identity: RFC 2606 (example,
 * example.com/.org/.net, test, invalid, localhost), RFC 6761/6762 (local), RFC 8375 (home.arpa),
 * `localdomain` and `internal` (private by convention). Checked on the normalised name.
 */
const PLACEHOLDER_DOMAIN =
  /(^|\.)(example(\.(com|org|net))?|localhost|localdomain|local|invalid|test|internal|home\.arpa)$/;

/**
 * A host as DNS sees it: lowercase, without the root's trailing dot (`Example.COM.` is example.com)
 * and without the brackets of an address literal (`[::1]`, `[127.0.0.1]`).
 */
function normalisedHost(host: string): string {
  const lower = host.trim().toLowerCase();
  const bare = /^\[(.*)\]$/.exec(lower)?.[1] ?? lower;
  return bare.endsWith('.') ? bare.slice(0, -1) : bare;
}

/** Why a host cannot be a production identity, or undefined when it can. */
function placeholderHost(host: string): string | undefined {
  const name = normalisedHost(host);
  if (name === '') return 'empty';
  if (isIP(name.replace(/^ipv6:/, '')) !== 0) return `the address literal ${host}`;
  if (PLACEHOLDER_DOMAIN.test(name)) return `at ${host}`;
  return undefined;
}

/** The domain of a setting that must hold exactly one address (`Name <a@b>` or `a@b`), else why not. */
function addressDomain(name: string, value: string): string {
  const addresses = addressparser(value, { flatten: true });
  if (addresses.length !== 1 || !addresses[0]?.address.includes('@'))
    throw new ConfigError(
      `invalid configuration: ${name} must be exactly one address (found ${addresses.length === 1 ? 'none with an @' : addresses.length})`,
    );
  const address = addresses[0].address;
  return address.slice(address.lastIndexOf('@') + 1);
}

/**
 * In production the sender's identity must be set: a From, Message-ID domain and unsubscribe
 * address at example.com (or localhost., an IP literal, ...) would send real mail that no one can
 * answer or unsubscribe from.
 */
function checkProductionIdentity(config: Config): void {
  const url = (() => {
    try {
      return new URL(config.UNSUBSCRIBE_URL);
    } catch {
      return undefined;
    }
  })();
  const checks: Array<[string, string]> = [
    ['MAIL_FROM', addressDomain('MAIL_FROM', config.MAIL_FROM)],
    ['MESSAGE_ID_DOMAIN', config.MESSAGE_ID_DOMAIN],
    ['UNSUBSCRIBE_MAILTO', addressDomain('UNSUBSCRIBE_MAILTO', config.UNSUBSCRIBE_MAILTO)],
    ['UNSUBSCRIBE_URL', url?.hostname ?? ''],
  ];
  for (const [name, domain] of checks) {
    const why = placeholderHost(domain);
    if (why !== undefined)
      throw new ConfigError(
        `invalid configuration: ${name} must be set to your own domain when NODE_ENV=production (it is ${why})`,
      );
  }
  // The WHATWG parser lowercases the scheme: HTTPS://… is https.
  if (url?.protocol !== 'https:')
    throw new ConfigError('invalid configuration: UNSUBSCRIBE_URL must be an https URL when NODE_ENV=production');
}

/**
 * The longest a provider call could still hand a message over after it started (ADR 009): its
 * timeout, and for SMTP the wait for the reply to the final dot, for Mailgun its late-reply wait.
 */
export function handoverWithinMs(config: Config): number {
  if (config.MAIL_PROVIDER === 'mailgun') return config.PROVIDER_TIMEOUT_MS + config.MAILGUN_LATE_REPLY_MS;
  if (config.MAIL_PROVIDER === 'smtp') return Math.max(config.PROVIDER_TIMEOUT_MS, config.SMTP_FINAL_REPLY_TIMEOUT_MS);
  return config.PROVIDER_TIMEOUT_MS + config.NULL_PROVIDER_DELAY_MS;
}

/** The settle time the configured lookup waits for (LOOKUP_SETTLE_MS, else the lookup's own default). */
/**
 * How long after acceptance a "not found" cannot be trusted: the lookup's settle time, and no sooner
 * than delivery evidence may still arrive (DELIVERY_EVIDENCE_WINDOW_MS).
 */
export function lookupSettleMs(config: Config): number {
  const search =
    config.LOOKUP_SETTLE_MS ??
    (config.PROVIDER_LOOKUP === 'mailgun' ? 30 * 60_000 : config.PROVIDER_LOOKUP === 'evidence' ? 0 : 5_000);
  return Math.max(search, config.DELIVERY_EVIDENCE_WINDOW_MS);
}

function checkProviderLookup(config: Config): void {
  const usesMailgun = config.MAIL_PROVIDER === 'mailgun' || config.PROVIDER_LOOKUP === 'mailgun';
  if (usesMailgun && config.MAILGUN_DOMAIN === '')
    throw new ConfigError(
      'invalid configuration: MAILGUN_DOMAIN is required with MAIL_PROVIDER or PROVIDER_LOOKUP mailgun',
    );
  if (usesMailgun && (config.MAILGUN_API_KEY_FILE === '') === (config.MAILGUN_API_KEY === ''))
    throw new ConfigError(
      'invalid configuration: set exactly one of MAILGUN_API_KEY_FILE and MAILGUN_API_KEY with MAIL_PROVIDER or PROVIDER_LOOKUP mailgun',
    );
  if (config.PROVIDER_LOOKUP === 'none') return;
  // Absence of evidence only means "never taken" once the evidence has had time to come.
  if (config.PROVIDER_LOOKUP === 'evidence' && config.DELIVERY_EVIDENCE_WINDOW_MS === 0)
    throw new ConfigError(
      'invalid configuration: PROVIDER_LOOKUP=evidence needs DELIVERY_EVIDENCE_WINDOW_MS: how long after a send the provider or relay reports it at the latest',
    );
  // Giving up before a not-found could even be trusted would leave every send in doubt to an operator.
  const decidableAfter = handoverWithinMs(config) + lookupSettleMs(config);
  if (config.LOOKUP_GIVE_UP_MS < decidableAfter)
    throw new ConfigError(
      `invalid configuration: LOOKUP_GIVE_UP_MS (${config.LOOKUP_GIVE_UP_MS}) must be at least the hand-over bound plus the lookup's settle time (${decidableAfter} ms)`,
    );
}

/** Rules between settings that a schema cannot express. */
export function checkConfig(config: Config): void {
  checkProviderLookup(config);
  if (config.MAIL_PROVIDER === 'smtp' && config.SMTP_USER !== '' && !config.SMTP_SECURE && !config.SMTP_REQUIRE_TLS)
    throw new ConfigError(
      'invalid configuration: SMTP_USER is set but neither SMTP_REQUIRE_TLS nor SMTP_SECURE is: credentials are never sent in clear text',
    );
  if (config.SMTP_PASSWORD !== '' && config.SMTP_PASSWORD_FILE !== '')
    throw new ConfigError('invalid configuration: set SMTP_PASSWORD_FILE or SMTP_PASSWORD, not both');
  sesTopicArns(config);
  if (config.NODE_ENV === 'production') {
    // Development stand-ins never run in production: the null provider reports every send `sent` and
    // delivers nothing, and Mailpit's search API is a development sink's, not a provider's.
    if (config.MAIL_PROVIDER === 'null')
      throw new ConfigError(
        'invalid configuration: MAIL_PROVIDER=null delivers nothing and reports every send sent; it is refused when NODE_ENV=production (use smtp or mailgun)',
      );
    if (config.PROVIDER_LOOKUP === 'mailpit')
      throw new ConfigError(
        "invalid configuration: PROVIDER_LOOKUP=mailpit reads a development sink's search API; it is refused when NODE_ENV=production (use mailgun or none)",
      );
    checkProductionIdentity(config);
  }
  if (config.MAIL_PROVIDER === 'smtp' && config.SMTP_FINAL_REPLY_TIMEOUT_MS <= config.PROVIDER_TIMEOUT_MS)
    // The final-reply wait runs past the call's timeout; one not longer than it would end calls that
    // are still in their budget, and report ambiguous what the call's own deadline decides.
    throw new ConfigError(
      `invalid configuration: SMTP_FINAL_REPLY_TIMEOUT_MS (${config.SMTP_FINAL_REPLY_TIMEOUT_MS}) must be greater than PROVIDER_TIMEOUT_MS (${config.PROVIDER_TIMEOUT_MS})`,
    );
  if (config.PROVIDER_TIMEOUT_MS * 2 > config.LEASE_MS) {
    throw new ConfigError(
      `PROVIDER_TIMEOUT_MS (${config.PROVIDER_TIMEOUT_MS}) must be at most half of LEASE_MS (${config.LEASE_MS}), so a lease never expires while its provider call can still succeed`,
    );
  }
}

const ISO_INSTANT = /^(\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2})(?::(\d{2})(?:\.\d{1,9})?)?(Z|([+-])(\d{2}):(\d{2}))$/;

/**
 * An ISO 8601 instant with its zone as epoch ms, or NaN. Each field is checked against its range:
 * `Date.parse` rolls 2026-02-30 over into March rather than refusing it.
 */
export function isoInstant(text: string): number {
  const m = ISO_INSTANT.exec(text);
  if (!m) return Number.NaN;
  const [year, month, day, hour, minute, second = 0] = m.slice(1, 7).map((v) => (v === undefined ? 0 : Number(v)));
  const offset = m[7] === 'Z' ? 0 : (m[8] === '-' ? -1 : 1) * (Number(m[9]) * 60 + Number(m[10]));
  const local = Date.UTC(year as number, (month as number) - 1, day, hour, minute, second);
  const back = new Date(local);
  const fits =
    back.getUTCFullYear() === year &&
    back.getUTCMonth() === (month as number) - 1 &&
    back.getUTCDate() === day &&
    back.getUTCHours() === hour &&
    back.getUTCMinutes() === minute &&
    back.getUTCSeconds() === second &&
    Math.abs(offset) <= 14 * 60;
  return fits ? local - offset * 60_000 : Number.NaN;
}
/** A rotation window longer than this is no window: the previous key would be kept for good. */
export const MAX_IDENTIFIER_WINDOW_MS = 400 * 86_400_000;

/**
 * The identifier keys (ADR 012), read once at start: the current key (required: exit 78 without
 * it, naming IDENTIFIER_KEY_FILE) and, during a rotation, the previous one with the end of its
 * window. Errors name the variable, never the key.
 */
export function identifierKeyring(config: Config, now: number, readFile?: ReadFile): IdentifierKeyring {
  const current = readKeyMaterial(
    { name: 'IDENTIFIER_KEY', file: config.IDENTIFIER_KEY_FILE, inline: config.IDENTIFIER_KEY },
    readFile,
  );
  if (current === undefined)
    throw new ConfigError(
      'invalid configuration: IDENTIFIER_KEY_FILE is required (a file holding the key that signs Message-IDs and unsubscribe links; IDENTIFIER_KEY for development)',
    );
  if (config.IDENTIFIER_KEY_ID === '')
    throw new ConfigError('invalid configuration: IDENTIFIER_KEY_ID is required with an identifier key (e.g. 2026-01)');
  const previous = readKeyMaterial(
    {
      name: 'IDENTIFIER_PREVIOUS_KEY',
      file: config.IDENTIFIER_PREVIOUS_KEY_FILE,
      inline: config.IDENTIFIER_PREVIOUS_KEY,
    },
    readFile,
  );
  const { IDENTIFIER_PREVIOUS_KEY_ID: previousId, IDENTIFIER_PREVIOUS_KEY_UNTIL: untilText } = config;
  if (previous === undefined) {
    if (previousId !== '' || untilText !== '')
      throw new ConfigError(
        'invalid configuration: IDENTIFIER_PREVIOUS_KEY_ID and IDENTIFIER_PREVIOUS_KEY_UNTIL need IDENTIFIER_PREVIOUS_KEY_FILE',
      );
    return { current: { id: config.IDENTIFIER_KEY_ID, material: current } };
  }
  if (previousId === '' || untilText === '')
    throw new ConfigError(
      'invalid configuration: IDENTIFIER_PREVIOUS_KEY_FILE needs IDENTIFIER_PREVIOUS_KEY_ID and IDENTIFIER_PREVIOUS_KEY_UNTIL (when its window ends, an ISO 8601 instant)',
    );
  if (previousId === config.IDENTIFIER_KEY_ID)
    throw new ConfigError('invalid configuration: IDENTIFIER_PREVIOUS_KEY_ID must differ from IDENTIFIER_KEY_ID');
  if (previous.equals(current))
    throw new ConfigError('invalid configuration: IDENTIFIER_PREVIOUS_KEY is the same key as IDENTIFIER_KEY');
  const until = isoInstant(untilText);
  if (!Number.isFinite(until))
    throw new ConfigError(
      'invalid configuration: IDENTIFIER_PREVIOUS_KEY_UNTIL must be an ISO 8601 instant with its zone (2026-03-01T00:00:00Z)',
    );
  if (until - now > MAX_IDENTIFIER_WINDOW_MS)
    throw new ConfigError(
      `invalid configuration: IDENTIFIER_PREVIOUS_KEY_UNTIL is more than ${MAX_IDENTIFIER_WINDOW_MS / 86_400_000} days away: a rotation window, not a second key`,
    );
  return {
    current: { id: config.IDENTIFIER_KEY_ID, material: current },
    previous: { id: previousId, material: previous, until },
  };
}

/** SES_SNS_TOPIC_ARNS as a list; empty when SES intake is off. A value that is no SNS topic ARN stops the start. */
export function sesTopicArns(config: Pick<Config, 'SES_SNS_TOPIC_ARNS'>): string[] {
  const arns = config.SES_SNS_TOPIC_ARNS.split(/[,\s]+/).filter((arn) => arn !== '');
  const bad = arns.findIndex((arn) => !isSnsTopicArn(arn));
  if (bad >= 0)
    throw new ConfigError(`invalid configuration: SES_SNS_TOPIC_ARNS entry ${bad + 1} is not an SNS topic ARN`);
  return arns;
}

/**
 * SendGrid's webhook verification key, from SENDGRID_WEBHOOK_PUBLIC_KEY or the file
 * SENDGRID_WEBHOOK_PUBLIC_KEY_FILE names; undefined when neither is set (the webhook route is off).
 */
export function sendGridWebhookKey(
  config: Pick<Config, 'SENDGRID_WEBHOOK_PUBLIC_KEY' | 'SENDGRID_WEBHOOK_PUBLIC_KEY_FILE'>,
  readFile: (path: string) => string = (path) => readFileSync(path, 'utf8'),
): KeyObject | undefined {
  const inline = config.SENDGRID_WEBHOOK_PUBLIC_KEY.trim();
  const file = config.SENDGRID_WEBHOOK_PUBLIC_KEY_FILE;
  if (inline !== '' && file !== '')
    throw new ConfigError(
      'invalid configuration: set SENDGRID_WEBHOOK_PUBLIC_KEY_FILE or SENDGRID_WEBHOOK_PUBLIC_KEY, not both',
    );
  let text = inline;
  if (file !== '') {
    try {
      text = readFile(file);
    } catch (error) {
      throw new ConfigError(
        `invalid configuration: SENDGRID_WEBHOOK_PUBLIC_KEY_FILE cannot be read (${(error as NodeJS.ErrnoException).code ?? 'error'})`,
      );
    }
  }
  if (text.trim() === '') return undefined;
  const key = sendGridPublicKey(text);
  if (key === undefined)
    throw new ConfigError(
      `invalid configuration: ${file !== '' ? 'SENDGRID_WEBHOOK_PUBLIC_KEY_FILE' : 'SENDGRID_WEBHOOK_PUBLIC_KEY'} is not an EC P-256 public key (base64 DER or PEM, as SendGrid shows it)`,
    );
  return key;
}

/** What a Mailgun webhook signing key looks like: printable ASCII without spaces (Mailgun shows hex or `key-…`). */
const MAILGUN_SIGNING_KEY = /^[\x21-\x7e]{16,256}$/;

/**
 * Mailgun's HTTP webhook signing key, from the file MAILGUN_WEBHOOK_SIGNING_KEY_FILE names (a mounted
 * Secret; its one trailing newline dropped) or MAILGUN_WEBHOOK_SIGNING_KEY inline; undefined when
 * neither is set (the webhook route is off). Both at once, an unreadable file, or a value that cannot
 * be such a key stop the start, naming the variable, never the value.
 */
export function mailgunWebhookSigningKey(
  config: Pick<Config, 'MAILGUN_WEBHOOK_SIGNING_KEY' | 'MAILGUN_WEBHOOK_SIGNING_KEY_FILE'>,
  readFile?: ReadFile,
): KeyObject | undefined {
  const { MAILGUN_WEBHOOK_SIGNING_KEY: inline, MAILGUN_WEBHOOK_SIGNING_KEY_FILE: file } = config;
  if (inline !== '' && file !== '')
    throw new ConfigError(
      'invalid configuration: set MAILGUN_WEBHOOK_SIGNING_KEY_FILE or MAILGUN_WEBHOOK_SIGNING_KEY, not both',
    );
  if (inline === '' && file === '') return undefined;
  const variable = file !== '' ? 'MAILGUN_WEBHOOK_SIGNING_KEY_FILE' : 'MAILGUN_WEBHOOK_SIGNING_KEY';
  const text = file !== '' ? readSecretFile(variable, file, readFile) : inline;
  if (!MAILGUN_SIGNING_KEY.test(text))
    throw new ConfigError(
      `invalid configuration: ${variable} is not a Mailgun webhook signing key (16 to 256 printable characters, no spaces: the HTTP webhook signing key Mailgun shows)`,
    );
  return mailgunSigningKey(text);
}
