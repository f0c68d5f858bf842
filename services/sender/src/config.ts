import { ConfigError, EmailHashKeyConfigSchema, type BaseConfig } from '@outreach/shared';
import { Type, type Static } from '@sinclair/typebox';

/** The sender's settings, on top of BaseConfigSchema (KAFKA_BROKERS, DATABASE_URL, HTTP_PORT, ...). */
export const ConfigSchema = Type.Object({
  /** The emailHash HMAC key (EMAIL_HASH_KEY_FILE, or EMAIL_HASH_KEY in development) and its EMAIL_HASH_KEY_ID. */
  ...EmailHashKeyConfigSchema.properties,
  DATABASE_SCHEMA: Type.String({ default: 'sender', pattern: '^[a-z_][a-z0-9_]*$' }),
  CONSUMER_GROUP: Type.String({ default: 'sender' }),
  MAIL_PROVIDER: Type.Union([Type.Literal('smtp'), Type.Literal('null')], { default: 'smtp' }),
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
  UNSUBSCRIBE_MAILTO: Type.String({ default: 'unsubscribe@example.com' }),
  UNSUBSCRIBE_URL: Type.String({ default: '' }),
  /** Events handed to the pipeline at once (one claim statement). */
  SEND_BATCH_SIZE: Type.Integer({ minimum: 1, maximum: 2000, default: 100 }),
  SEND_CONCURRENCY: Type.Integer({ minimum: 1, maximum: 256, default: 8 }),
  SEND_RATE_PER_SECOND: Type.Number({ exclusiveMinimum: 0, default: 50 }),
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

/** Names that are placeholders, never a production sender's identity (RFC 2606/6761 and ours). */
const PLACEHOLDER_DOMAIN = /(^|\.)(example\.(com|org|net)|localhost|local|invalid|test|example|internal)$/i;

function domainOf(value: string): string {
  const address = /<([^>]*)>\s*$/.exec(value)?.[1] ?? value;
  return address.slice(address.lastIndexOf('@') + 1).trim();
}

/**
 * In production the sender's identity must be set: a From, Message-ID domain and unsubscribe
 * address at example.com would send real mail that no one can answer or unsubscribe from.
 */
function checkProductionIdentity(config: Config): void {
  const urlHost = (() => {
    try {
      return new URL(config.UNSUBSCRIBE_URL).hostname;
    } catch {
      return '';
    }
  })();
  const checks: Array<[string, string]> = [
    ['MAIL_FROM', domainOf(config.MAIL_FROM)],
    ['MESSAGE_ID_DOMAIN', config.MESSAGE_ID_DOMAIN],
    ['UNSUBSCRIBE_MAILTO', domainOf(config.UNSUBSCRIBE_MAILTO)],
    ['UNSUBSCRIBE_URL', urlHost],
  ];
  for (const [name, domain] of checks) {
    if (domain === '' || PLACEHOLDER_DOMAIN.test(domain))
      throw new ConfigError(
        `invalid configuration: ${name} must be set to your own domain when NODE_ENV=production (it is ${domain === '' ? 'empty' : `at ${domain}`})`,
      );
  }
  if (!config.UNSUBSCRIBE_URL.startsWith('https://'))
    throw new ConfigError('invalid configuration: UNSUBSCRIBE_URL must be an https URL when NODE_ENV=production');
}

/** Rules between settings that a schema cannot express. */
export function checkConfig(config: Config): void {
  if (config.MAIL_PROVIDER === 'smtp' && config.SMTP_USER !== '' && !config.SMTP_SECURE && !config.SMTP_REQUIRE_TLS)
    throw new ConfigError(
      'invalid configuration: SMTP_USER is set but neither SMTP_REQUIRE_TLS nor SMTP_SECURE is: credentials are never sent in clear text',
    );
  if (config.SMTP_PASSWORD !== '' && config.SMTP_PASSWORD_FILE !== '')
    throw new ConfigError('invalid configuration: set SMTP_PASSWORD_FILE or SMTP_PASSWORD, not both');
  if (config.NODE_ENV === 'production' && config.MAIL_PROVIDER !== 'null') checkProductionIdentity(config);
  if (config.PROVIDER_TIMEOUT_MS * 2 > config.LEASE_MS) {
    throw new ConfigError(
      `PROVIDER_TIMEOUT_MS (${config.PROVIDER_TIMEOUT_MS}) must be at most half of LEASE_MS (${config.LEASE_MS}), so a lease never expires while its provider call can still succeed`,
    );
  }
}
