/**
 * Attack (issue #16, SMTP): a server, or a man in the middle, that refuses or breaks STARTTLS. No
 * byte of the message and no credential may leave in clear text (that holds). But the refusal is
 * answered at once, so the attempt should end at once as `not_sent`, naming TLS. Today the connect
 * callback never hears nodemailer's error: the attempt waits out its whole budget and says
 * "timeout", and when SMTP_FINAL_REPLY_TIMEOUT_MS <= PROVIDER_TIMEOUT_MS (a configuration checkConfig
 * accepts) the final-reply timer fires first and a message that never left becomes `unknown`.
 */
import { createServer, type Server, type Socket } from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import type { SendResult } from '../src/adapters/providers/port.js';
import { SmtpProvider } from '../src/adapters/providers/smtp.js';
import { checkOf } from './config-env.js';

type Refusal = 'no-starttls' | 'starttls-454' | 'starttls-220-then-close' | 'ehlo-500';

/** A node:net SMTP peer that refuses TLS in one way and records every line it hears in clear text. */
async function hostileServer(refusal: Refusal): Promise<{ server: Server; port: number; heard: string[] }> {
  const heard: string[] = [];
  const server = createServer((socket: Socket) => {
    socket.on('error', () => undefined);
    socket.write('220 hostile ESMTP\r\n');
    let buffer = '';
    socket.on('data', (data) => {
      buffer += data.toString('latin1');
      for (let end = buffer.indexOf('\r\n'); end >= 0; end = buffer.indexOf('\r\n')) {
        const line = buffer.slice(0, end);
        buffer = buffer.slice(end + 2);
        heard.push(line);
        const verb = (line.split(' ')[0] ?? '').toUpperCase();
        if (verb === 'EHLO' && refusal === 'ehlo-500') socket.write('500 5.5.1 EHLO not understood\r\n');
        else if (verb === 'EHLO')
          socket.write(
            refusal === 'no-starttls'
              ? '250-hostile\r\n250 AUTH PLAIN\r\n'
              : '250-hostile\r\n250-STARTTLS\r\n250 AUTH PLAIN\r\n',
          );
        else if (verb === 'STARTTLS') {
          if (refusal === 'starttls-220-then-close') socket.end('220 go ahead\r\n');
          else socket.write('454 4.7.0 TLS not available\r\n');
        } else socket.write('250 ok\r\n');
      }
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', () => resolve()));
  return { server, port: (server.address() as { port: number }).port, heard };
}

const servers: Server[] = [];
afterEach(() => {
  for (const server of servers.splice(0)) server.close();
});

async function attempt(
  refusal: Refusal,
  timeouts: { timeoutMs: number; finalReplyTimeoutMs: number },
): Promise<{ result: SendResult; elapsedMs: number; heard: string[] }> {
  const { server, port, heard } = await hostileServer(refusal);
  servers.push(server);
  const provider = new SmtpProvider({
    host: '127.0.0.1',
    port,
    secure: false,
    requireTLS: true,
    user: 'outreach',
    password: 'smtp-password-never-in-clear',
    maxConnections: 1,
    ...timeouts,
  });
  const started = Date.now();
  const result = await provider.send(
    {
      from: 'a@mail.acme-corp.com',
      to: 'candidate@dest.io',
      subject: 's',
      text: 'body',
      headers: {},
      messageId: '<send-attack-1@mail.acme-corp.com>',
    },
    'send-attack-1',
  );
  const elapsedMs = Date.now() - started;
  await provider.close();
  return { result, elapsedMs, heard };
}

describe('SMTP: a refused or broken STARTTLS', () => {
  it.each<Refusal>(['no-starttls', 'starttls-454', 'starttls-220-then-close', 'ehlo-500'])(
    '%s: nothing in clear text, and the attempt ends at once as not_sent naming TLS',
    async (refusal) => {
      const { result, elapsedMs, heard } = await attempt(refusal, { timeoutMs: 5_000, finalReplyTimeoutMs: 30_000 });
      // Holds today: only EHLO and STARTTLS were said in clear text.
      expect(heard.filter((line) => !/^(EHLO|STARTTLS)\b/i.test(line))).toEqual([]);
      expect(result.kind).toBe('not_sent');
      // Fails today: "smtp timeout after 5000 ms in the connect phase", after the whole budget.
      expect(elapsedMs).toBeLessThan(2_000);
      expect(result.kind === 'not_sent' ? result.reason : '').toMatch(/STARTTLS|TLS/);
    },
  );

  it('with SMTP_FINAL_REPLY_TIMEOUT_MS <= PROVIDER_TIMEOUT_MS, a message that never left is not "unknown"', async () => {
    const { result, heard } = await attempt('starttls-454', { timeoutMs: 3_000, finalReplyTimeoutMs: 3_000 });
    expect(heard.some((line) => /^(MAIL|RCPT|DATA|AUTH)\b/i.test(line))).toBe(false);
    // Fails today: {"kind":"unknown","reason":"smtp no reply to the final dot within the final-reply timeout"}.
    expect(result.kind).toBe('not_sent');
  });

  it.each([
    ['20000', '20000'],
    ['20000', '5000'],
  ])(
    'PROVIDER_TIMEOUT_MS=%s with SMTP_FINAL_REPLY_TIMEOUT_MS=%s stops the start naming both',
    (timeout, finalReply) => {
      const check = (extra: Record<string, string>) => checkOf({ LEASE_MS: '60000', ...extra });
      expect(check({ PROVIDER_TIMEOUT_MS: timeout, SMTP_FINAL_REPLY_TIMEOUT_MS: finalReply })).toThrow(
        /SMTP_FINAL_REPLY_TIMEOUT_MS \(\d+\) must be greater than PROVIDER_TIMEOUT_MS \(\d+\)/,
      );
      expect(check({ PROVIDER_TIMEOUT_MS: timeout, SMTP_FINAL_REPLY_TIMEOUT_MS: '20001' })).not.toThrow();
    },
  );
});
