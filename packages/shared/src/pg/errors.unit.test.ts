import { describe, expect, it } from 'vitest';
import { isTransientError, TransientError } from '../kafka/consumer.js';
import { classifyPgError, sqlState } from './errors.js';

const pgError = (code: string, message = 'pg failure') =>
  Object.assign(new Error(message), { code, severity: 'ERROR' });

describe('classifyPgError', () => {
  it.each([
    ['25006', 'read-only transaction (a failover left us on a standby)'],
    ['57014', 'statement timeout'],
    ['53100', 'disk full'],
    ['53200', 'out of memory'],
    ['53300', 'too many connections'],
    ['53400', 'configuration limit exceeded'],
    ['57P01', 'admin shutdown'],
    ['57P02', 'crash shutdown'],
    ['57P03', 'cannot connect now'],
    ['57P05', 'idle session timeout'],
    ['40001', 'serialization failure'],
    ['40P01', 'deadlock'],
    ['40003', 'statement completion unknown'],
    ['08006', 'connection failure'],
    ['08P01', 'protocol violation'],
    ['28P01', 'invalid password (rotation)'],
    ['3D000', 'database does not exist (yet)'],
    ['58030', 'I/O error'],
    ['55P03', 'lock not available'],
    ['25P03', 'idle in transaction timeout'],
    ['42501', 'insufficient privilege (a grant being rotated)'],
    ['72000', 'snapshot too old'],
  ])('%s (%s) is transient', (code) => {
    expect(classifyPgError(pgError(code))).toBe('transient');
    expect(isTransientError(pgError(code))).toBe(true);
  });

  it.each([
    ['23505', 'unique violation'],
    ['23503', 'foreign key violation'],
    ['23514', 'check violation'],
    ['22P02', 'invalid text representation'],
    ['22001', 'string too long'],
    ['42P01', 'undefined table'],
    ['42601', 'syntax error'],
    ['54000', 'program limit exceeded'],
    ['40002', 'integrity constraint violation at commit'],
    ['25P02', 'in failed transaction (a bug in the caller)'],
    ['P0001', 'raised by a trigger'],
    ['XX000', 'internal error'],
    ['0A000', 'feature not supported'],
  ])('%s (%s) is permanent', (code) => {
    expect(classifyPgError(pgError(code))).toBe('permanent');
    expect(isTransientError(pgError(code))).toBe(false);
  });

  it('ignores codes that are not SQLSTATEs, and finds one in a cause', () => {
    expect(sqlState(pgError('EPIPE'))).toBeUndefined();
    expect(sqlState(pgError('ZZ001'))).toBeUndefined();
    expect(classifyPgError(new Error('no code'))).toBeUndefined();
    expect(classifyPgError('57014')).toBeUndefined();
    expect(classifyPgError(new Error('wrapped', { cause: pgError('57P01') }))).toBe('transient');
  });
});

describe('isTransientError', () => {
  it('retries connection loss, client timeouts and marked failures; not bugs', () => {
    expect(isTransientError(new TransientError('experiment service answered 503'))).toBe(true);
    expect(isTransientError(Object.assign(new Error('connect'), { code: 'ECONNREFUSED' }))).toBe(true);
    expect(isTransientError(new Error('Connection terminated unexpectedly'))).toBe(true);
    expect(isTransientError(new Error('Query read timeout'))).toBe(true);
    expect(isTransientError(Object.assign(new Error('broker'), { retriable: true }))).toBe(true);
    expect(isTransientError(new TypeError("Cannot read properties of undefined (reading 'x')"))).toBe(false);
    expect(isTransientError(null)).toBe(false);
  });
});
