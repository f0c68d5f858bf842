import { Type } from '@sinclair/typebox';
import { describe, expect, it } from 'vitest';
import { brokerList, ConfigError, loadConfig } from './config.js';

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

  it('names a malformed variable', () => {
    expect(() => loadConfig(Extra, { ...valid, DATABASE_URL: 'mysql://x' })).toThrowError(
      expect.objectContaining({ name: 'ConfigError', message: expect.stringMatching(/DATABASE_URL/) }),
    );
    expect(() => loadConfig(Extra, { ...valid, KAFKA_BROKERS: 'no-port' })).toThrowError(/KAFKA_BROKERS/);
    expect(() => loadConfig(Extra, { ...valid, BATCH_SIZE: '0' })).toThrowError(ConfigError);
  });

  it('splits a broker list', () => {
    expect(brokerList('a:1, b:2,')).toEqual(['a:1', 'b:2']);
  });
});
