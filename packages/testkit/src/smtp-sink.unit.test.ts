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
});
