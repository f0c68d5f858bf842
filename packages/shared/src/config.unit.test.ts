import { Type } from '@sinclair/typebox';
import { describe, expect, it } from 'vitest';
import { brokerList, ConfigError, CONSUMER_RETRY_DEFAULTS, loadConfig } from './config.js';

const valid = { KAFKA_BROKERS: '127.0.0.1:9092', DATABASE_URL: 'postgres://u@h:5432/db' };
const Extra = Type.Object({ BATCH_SIZE: Type.Integer({ minimum: 1, default: 100 }) });

describe('loadConfig', () => {
  it('applies defaults and coerces numbers from strings', () => {
    const config = loadConfig(Extra, { ...valid, HTTP_PORT: '9000' });
    expect(config.HTTP_PORT).toBe(9000);
    expect(config.BATCH_SIZE).toBe(100);
    expect(config.LOG_LEVEL).toBe('info');
  });

  it('names a missing variable', () => {
    expect(() => loadConfig(Extra, { DATABASE_URL: valid.DATABASE_URL })).toThrowError(/KAFKA_BROKERS/);
  });

  it('refuses credentials in SCHEMA_REGISTRY_URL without printing them (they belong in SCHEMA_REGISTRY_AUTH)', () => {
    const load = () =>
      loadConfig(Extra, { ...valid, SCHEMA_REGISTRY_URL: 'https://svc:S3CRET-PW@registry.example.com/apis' });
    expect(load).toThrowError(/SCHEMA_REGISTRY_URL/);
    expect(load).not.toThrowError(/S3CRET-PW/);
    expect(
      loadConfig(Extra, { ...valid, SCHEMA_REGISTRY_URL: 'https://registry.example.com/a@b' }).SCHEMA_REGISTRY_URL,
    ).toBe('https://registry.example.com/a@b');
  });

  it('names a malformed variable', () => {
    expect(() => loadConfig(Extra, { ...valid, DATABASE_URL: 'mysql://x' })).toThrowError(
      expect.objectContaining({ name: 'ConfigError', message: expect.stringMatching(/DATABASE_URL/) }),
    );
    expect(() => loadConfig(Extra, { ...valid, KAFKA_BROKERS: 'no-port' })).toThrowError(/KAFKA_BROKERS/);
    expect(() => loadConfig(Extra, { ...valid, BATCH_SIZE: '0' })).toThrowError(ConfigError);
  });

  it('caps consumer retries by default, and refuses a cap that would never retry in time', () => {
    const config = loadConfig(Extra, valid);
    expect(config.CONSUMER_RETRY_MAX_ATTEMPTS).toBe(CONSUMER_RETRY_DEFAULTS.maxAttempts);
    expect(config.CONSUMER_RETRY_MAX_MS).toBe(CONSUMER_RETRY_DEFAULTS.maxElapsedMs);
    expect(loadConfig(Extra, { ...valid, CONSUMER_RETRY_MAX_ATTEMPTS: '5' }).CONSUMER_RETRY_MAX_ATTEMPTS).toBe(5);
    expect(() => loadConfig(Extra, { ...valid, CONSUMER_RETRY_MAX_ATTEMPTS: '0' })).toThrowError(
      /CONSUMER_RETRY_MAX_ATTEMPTS/,
    );
    expect(() => loadConfig(Extra, { ...valid, CONSUMER_RETRY_MAX_MS: '10' })).toThrowError(/CONSUMER_RETRY_MAX_MS/);
  });

  it('splits a broker list', () => {
    expect(brokerList('a:1, b:2,')).toEqual(['a:1', 'b:2']);
  });
});
