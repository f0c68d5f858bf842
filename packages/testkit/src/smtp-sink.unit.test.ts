import nodemailer from 'nodemailer';
import { afterEach, describe, expect, it } from 'vitest';
import { SmtpSink } from './smtp-sink.js';

let sink: SmtpSink | undefined;
afterEach(() => sink?.stop());

describe('SmtpSink', () => {
  it('records each message delivered over real SMTP: recipients, Message-ID, headers, subject', async () => {
    sink = await new SmtpSink().start();
    const transport = nodemailer.createTransport({
      host: '127.0.0.1',
      port: sink.port,
      secure: false,
      ignoreTLS: true,
    });
    await transport.sendMail({
      from: 'outreach@example.com',
      to: 'Candidate@Example.com',
      subject: 'Hello',
      text: 'Body',
      messageId: '<send-1@outreach.test>',
      headers: { 'List-Unsubscribe': '<mailto:unsubscribe@example.com>' },
    });
    expect(sink.messages).toHaveLength(1);
    const [message] = sink.deliveredTo('candidate@example.com');
    // nodemailer lower-cases the domain; the local part arrives as written.
    expect(message).toMatchObject({
      to: ['Candidate@example.com'],
      messageId: '<send-1@outreach.test>',
      subject: 'Hello',
    });
    expect(message?.headers.get('list-unsubscribe')).toBe('<mailto:unsubscribe@example.com>');
    transport.close();
  });

  it('rejects recipients its behaviour says to reject, with a permanent SMTP error', async () => {
    sink = await new SmtpSink({
      behaviour: (to) => (to.startsWith('bounce') ? { reject: 'mailbox unavailable' } : undefined),
    }).start();
    const transport = nodemailer.createTransport({
      host: '127.0.0.1',
      port: sink.port,
      secure: false,
      ignoreTLS: true,
    });
    await expect(
      transport.sendMail({ from: 'a@example.com', to: 'bounce@example.com', text: 'x' }),
    ).rejects.toMatchObject({
      responseCode: 550,
    });
    expect(sink.messages).toHaveLength(0);
    transport.close();
  });

  it('with DSN offered, records the ENVID and each recipient’s NOTIFY, and tells onMessage of each message', async () => {
    const told: string[] = [];
    sink = await new SmtpSink({ dsn: true, onMessage: (m) => told.push(m.messageId ?? '') }).start();
    const transport = nodemailer.createTransport({
      host: '127.0.0.1',
      port: sink.port,
      secure: false,
      ignoreTLS: true,
    });
    await transport.sendMail({
      from: 'a@example.com',
      to: ['one@example.com', 'two@example.com'],
      text: 'x',
      messageId: '<dsn-1@outreach.test>',
      dsn: { id: 'env-1.k.0f', return: 'headers', notify: ['success', 'failure'], recipient: 'a@example.com' },
    });
    await transport.sendMail({
      from: 'a@example.com',
      to: 'three@example.com',
      text: 'y',
      messageId: '<plain@x.test>',
    });
    expect(told).toEqual(['<dsn-1@outreach.test>', '<plain@x.test>']);
    const [withDsn, plain] = sink.messages;
    expect(withDsn?.envelopeId).toBe('env-1.k.0f');
    expect([...(withDsn?.notify ?? [])]).toEqual([
      ['one@example.com', ['SUCCESS', 'FAILURE']],
      ['two@example.com', ['SUCCESS', 'FAILURE']],
    ]);
    // No NOTIFY given: none recorded, so a stand-in relay sends no success DSN for it.
    expect(plain?.envelopeId).toBeUndefined();
    expect(plain?.notify.size).toBe(0);
    transport.close();
  });

  it('without DSN offered, a client gives no NOTIFY and none is recorded', async () => {
    sink = await new SmtpSink().start();
    const transport = nodemailer.createTransport({
      host: '127.0.0.1',
      port: sink.port,
      secure: false,
      ignoreTLS: true,
    });
    await transport.sendMail({
      from: 'a@example.com',
      to: 'one@example.com',
      text: 'x',
      dsn: { id: 'env-2', return: 'headers', notify: 'success', recipient: 'a@example.com' },
    });
    expect(sink.messages[0]?.notify.size).toBe(0);
    expect(sink.messages[0]?.envelopeId).toBeUndefined();
    transport.close();
  });
});
