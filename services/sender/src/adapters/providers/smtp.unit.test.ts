import { describe, expect, it } from 'vitest';
import { classify } from './smtp.js';

const reply = (code: number, text: string) => ({ responseCode: code, response: `${code} ${text}` });

describe('classify (SMTP failures, by protocol phase)', () => {
  it('takes a server reply after the body as definitive: 5xx rejected, 4xx not sent', () => {
    expect(classify({ ...reply(554, '5.7.1 spam'), command: 'DATA' }, 'body').kind).toBe('rejected');
    expect(classify({ ...reply(451, '4.3.0 try later'), command: 'DATA' }, 'body').kind).toBe('not_sent');
    expect(classify({ ...reply(421, '4.4.2 closing'), code: 'ECONNECTION', command: 'CONN' }, 'body').kind).toBe(
      'not_sent',
    );
  });

  it('calls any failure without a reply once the body may have left us unknown, whatever its label', () => {
    // nodemailer labels socket errors CONN in every phase: the label must not decide.
    for (const code of ['ECONNECTION', 'ESOCKET', 'ETIMEDOUT', 'ETLS', 'EPROTOCOL']) {
      expect(classify({ code, command: 'CONN', message: 'Connection closed unexpectedly' }, 'body').kind).toBe(
        'unknown',
      );
    }
  });

  it('knows nothing was handed over when the envelope failed without a reply', () => {
    expect(classify({ code: 'ECONNECTION', command: 'CONN' }, 'envelope').kind).toBe('not_sent');
    expect(classify({ code: 'ETIMEDOUT', command: 'MAIL FROM' }, 'envelope').kind).toBe('not_sent');
    expect(classify({ code: 'ECONNECTION', command: 'CONN' }, 'connect').kind).toBe('not_sent');
  });

  it('takes an envelope refusal by its class: 5xx rejected, 4xx not sent', () => {
    expect(
      classify(
        { ...reply(550, '5.1.1 <ada@example.com> no such user'), code: 'EENVELOPE', command: 'RCPT TO' },
        'envelope',
      ).kind,
    ).toBe('rejected');
    expect(
      classify({ ...reply(452, '4.2.2 mailbox full'), code: 'EENVELOPE', command: 'RCPT TO' }, 'envelope').kind,
    ).toBe('not_sent');
  });

  it('says when the server refused the recipient itself (RCPT TO), with its enhanced code if any', () => {
    const rcpt = (code: number, text: string) =>
      classify({ ...reply(code, text), code: 'EENVELOPE', command: 'RCPT TO' }, 'envelope');
    expect(rcpt(550, '5.1.1 no such user')).toMatchObject({ recipient: { status: '5.1.1' } });
    expect(rcpt(550, 'mailbox unavailable')).toMatchObject({ recipient: { status: null } });
    expect(rcpt(450, '4.2.1 try later')).not.toHaveProperty('recipient');
    // A refusal of the sender or of the message is not the recipient's.
    expect(classify({ ...reply(550, '5.1.8 bad sender'), command: 'MAIL FROM' }, 'envelope')).not.toHaveProperty(
      'recipient',
    );
    expect(classify({ ...reply(554, '5.1.1 no such user'), command: 'DATA' }, 'body')).not.toHaveProperty('recipient');
  });

  it('never takes a refusal while connecting (greeting, EHLO, AUTH) as a verdict on the message', () => {
    expect(
      classify({ ...reply(535, '5.7.8 bad credentials'), code: 'EAUTH', command: 'AUTH PLAIN' }, 'connect').kind,
    ).toBe('not_sent');
    expect(classify({ ...reply(554, 'no service'), code: 'EPROTOCOL', command: 'CONN' }, 'connect').kind).toBe(
      'not_sent',
    );
  });

  it('records codes, never the reply text (which quotes the address)', () => {
    const result = classify(
      {
        ...reply(550, '5.1.1 <ada@example.com>: Recipient address rejected'),
        code: 'EENVELOPE',
        command: 'RCPT TO',
        message: "Can't send mail - all recipients were rejected: 550 5.1.1 <ada@example.com>",
      },
      'envelope',
    );
    expect(result).toEqual({
      kind: 'rejected',
      reason: 'smtp 550 5.1.1 permanent at RCPT TO',
      recipient: { status: '5.1.1' },
    });
    const unknown = classify({ code: 'ECONNECTION', message: 'closed for ada@example.com' }, 'body');
    expect(JSON.stringify(unknown)).not.toContain('ada@');
  });

  it('does not trust a code that is not one of the library codes', () => {
    const result = classify({ code: 'ada@example.com', command: 'ada@example.com' }, 'envelope');
    expect(JSON.stringify(result)).not.toContain('ada@');
  });
});
