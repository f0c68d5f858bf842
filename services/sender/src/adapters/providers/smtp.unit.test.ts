import { describe, expect, it } from 'vitest';
import { classify } from './smtp.js';

describe('classify (SMTP failures)', () => {
  it('takes a server verdict as definitive: 5xx rejected, 4xx not sent', () => {
    expect(classify({ responseCode: 550, command: 'RCPT TO', message: 'no such user' }).kind).toBe('rejected');
    expect(classify({ responseCode: 451, command: 'DATA', message: 'try later' }).kind).toBe('not_sent');
  });
  it('knows nothing was accepted when the connection failed before DATA', () => {
    expect(classify({ code: 'ECONNECTION', command: 'CONN', message: 'refused' }).kind).toBe('not_sent');
    expect(classify({ code: 'ETIMEDOUT', command: 'MAIL FROM', message: 'timeout' }).kind).toBe('not_sent');
  });
  it('calls a timeout or a dropped connection after the message was handed over unknown', () => {
    expect(classify({ code: 'ETIMEDOUT', command: 'DATA', message: 'timeout' }).kind).toBe('unknown');
    expect(classify({ code: 'ESOCKET', message: 'socket closed' }).kind).toBe('unknown');
  });
});
