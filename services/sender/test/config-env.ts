/**
 * The sender's configuration as the start reads it, for tests of what it refuses: the least
 * environment a development start takes, and a production identity that passes the placeholder checks.
 */
import { loadConfig } from '@outreach/shared';
import { checkConfig, ConfigSchema, type Config } from '../src/config.js';

/** What every start needs, in development. */
export const CONFIG_BASE = {
  KAFKA_BROKERS: '127.0.0.1:9092',
  DATABASE_URL: 'postgres://u@h/db',
  EMAIL_HASH_KEY: 'k'.repeat(40),
  EMAIL_HASH_KEY_ID: 't',
  IDENTIFIER_KEY: 'i'.repeat(40),
  IDENTIFIER_KEY_ID: 'i1',
  NODE_ENV: 'development',
};

/** A sending identity that is no placeholder (production accepts it). */
export const PRODUCTION_IDENTITY = {
  MAIL_FROM: 'Recruiting <recruiting@mail.acme-corp.com>',
  MESSAGE_ID_DOMAIN: 'mail.acme-corp.com',
  UNSUBSCRIBE_MAILTO: 'unsubscribe@mail.acme-corp.com',
  UNSUBSCRIBE_URL: 'https://outreach.acme-corp.com/v1/unsubscribe',
};

/** The configuration loaded from CONFIG_BASE with `env` over it. */
export const configOf = (env: Record<string, string>): Config =>
  loadConfig(ConfigSchema, { ...CONFIG_BASE, ...env }) as Config;

/** The start's checks over that configuration, for `expect(...).toThrow()`. */
export const checkOf = (env: Record<string, string>) => (): void => checkConfig(configOf(env));
