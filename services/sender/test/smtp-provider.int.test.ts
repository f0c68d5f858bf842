/**
 * Attacks on promise 1 at the adapter: the real SmtpProvider (nodemailer's SMTPConnection, our
 * pool) against a raw TCP SMTP peer that writes whatever the attack needs. Each test counts what
 * the peer received and requires: never a second copy; `not_sent` only when the peer has no copy;
 * `sent` only when it has one; anything unknowable `unknown`.
 */
import { randomUUID } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { SmtpProvider } from '../src/adapters/providers/smtp.js';
import type { SendResult } from '../src/adapters/providers/port.js';
import { RawSmtp, type Script } from './raw-smtp.js';
import { stoppedAfterEach } from './stopped-after-each.js';

const TIMEOUT = 800;
const keep = stoppedAfterEach();

async function setup(script: Script, options: { maxConnections?: number } = {}) {
  const peer = keep(await new RawSmtp(script).start(), (p) => p.stop());
  const provider = new SmtpProvider({
    host: '127.0.0.1',
    port: peer.port,
    secure: false,
    requireTLS: false,
    timeoutMs: TIMEOUT,
    finalReplyTimeoutMs: 10_000,
    maxConnections: options.maxConnections ?? 4,
  });
  keep(provider, (p) => p.close());
  return { peer, provider };
}

/** Message `i`, with the Message-ID the sender gives the send with idempotency key `key`. */
const message = (i = 0, key: string = randomUUID()) => ({
  from: 'sender@attack.test',
  to: `cand-${i}@example.com`,
  subject: 'hello',
  text: 'We would like to talk.\n'.repeat(50),
  headers: {},
  messageId: `<${key}@attack.test>`,
});

/** The promise, checked per send against what the peer holds. */
function expectHonest(server: RawSmtp, key: string, result: SendResult): void {
  const copies = server.received.filter((m) => m.messageId === `<${key}@attack.test>`).length;
  expect(copies, `copies of ${key}`).toBeLessThanOrEqual(1);
  if (result.kind === 'not_sent' || result.kind === 'rejected') expect(copies, `${result.kind} but delivered`).toBe(0);
  if (result.kind === 'sent') expect(copies, 'sent but not delivered').toBe(1);
}

async function sendOne(p: SmtpProvider, server: RawSmtp, i = 0): Promise<SendResult> {
  const key = randomUUID();
  const result = await p.send(message(i, key), key);
  expectHonest(server, key, result);
  return result;
}

describe('SmtpProvider against a raw hostile SMTP peer', { timeout: 30_000 }, () => {
  it('multi-line 250 to the final dot: sent', async () => {
    const { peer, provider } = await setup({ dot: (c) => c.write('250-2.0.0 ok\r\n250-queued as X\r\n250 bye\r\n') });
    expect((await sendOne(provider, peer)).kind).toBe('sent');
  });

  it('a 2xx that is not 250 (251) to the final dot: sent', async () => {
    const { peer, provider } = await setup({ dot: (c) => c.write('251 2.1.5 will forward\r\n') });
    expect((await sendOne(provider, peer)).kind).toBe('sent');
  });

  it('the reply to the final dot split across TCP packets: sent', async () => {
    const { peer, provider } = await setup({
      dot: (c) => {
        c.write('2');
        setTimeout(() => c.write('5'), 60);
        setTimeout(() => c.write('0 ok'), 120);
        setTimeout(() => c.write('\r\n'), 180);
      },
    });
    expect((await sendOne(provider, peer)).kind).toBe('sent');
  });

  it('garbage instead of a reply to the final dot: unknown, never not_sent', async () => {
    const { peer, provider } = await setup({ dot: (c) => c.write('HELLO I AM NOT SMTP\r\n') });
    expect((await sendOne(provider, peer)).kind).toBe('unknown');
  });

  it('binary garbage without a line end, then close: unknown', async () => {
    const { peer, provider } = await setup({
      dot: (c) => {
        c.socket.write(Buffer.from([0x00, 0xff, 0x34, 0x35, 0x31]));
        c.socket.end();
      },
    });
    expect((await sendOne(provider, peer)).kind).toBe('unknown');
  });

  it('an unterminated "451 ..." then close after the dot: the refusal counts (not_sent) or unknown', async () => {
    // nodemailer turns an unterminated 4xx remainder into a reply; a server that refused is taken at its word.
    const { provider } = await setup({
      dot: (c) => {
        c.socket.write('451 4.3.0 maybe');
        c.socket.end();
      },
    });
    const result = await provider.send(message(), randomUUID());
    expect(['not_sent', 'unknown']).toContain(result.kind);
  });

  it('a 250 then an immediate close, then a second send: both sent, one copy each', async () => {
    const { peer, provider } = await setup({
      dot: (c) => {
        c.write('250 ok\r\n');
        c.socket.end();
      },
    });
    expect((await sendOne(provider, peer, 1)).kind).toBe('sent');
    expect((await sendOne(provider, peer, 2)).kind).toBe('sent');
    expect(peer.received).toHaveLength(2);
  });

  it('a 250 then a stray 250 line, then a second send on the pool: no desynchronised verdict', async () => {
    const { peer, provider } = await setup({
      dot: (c, n) => {
        c.write('250 ok\r\n');
        if (n === 1) setTimeout(() => c.write('250 stray\r\n'), 30);
      },
    });
    expect((await sendOne(provider, peer, 1)).kind).toBe('sent');
    await new Promise((r) => setTimeout(r, 100)); // let the stray line land on the idle connection
    expect((await sendOne(provider, peer, 2)).kind).toBe('sent');
  });

  it('a stray 250 arriving just as the pooled connection is reused: the verdict stays honest', async () => {
    let release: (() => void) | undefined;
    const { peer, provider } = await setup({
      dot: (c, n) => {
        c.write('250 ok\r\n');
        if (n === 1) release = () => c.write('250 stray\r\n');
      },
      mail: (c) => {
        release?.();
        release = undefined;
        c.write('250 ok\r\n');
      },
      pipelining: false,
    });
    await sendOne(provider, peer, 1);
    const second = await sendOne(provider, peer, 2);
    expect(['sent', 'unknown', 'not_sent']).toContain(second.kind);
  });

  it('421 greeting: not_sent, nothing received', async () => {
    const { peer, provider } = await setup({ greeting: (c) => c.write('421 4.3.2 busy\r\n') });
    const result = await sendOne(provider, peer);
    expect(result.kind).toBe('not_sent');
    expect(peer.received).toHaveLength(0);
  });

  it('a server that stalls in the middle of a multi-line EHLO reply: not_sent within the timeout', async () => {
    const { peer, provider } = await setup({ ehlo: (c) => c.write('250-raw\r\n250-SIZE 100\r\n') });
    const started = Date.now();
    const result = await sendOne(provider, peer);
    expect(result.kind).toBe('not_sent');
    expect(Date.now() - started).toBeLessThan(TIMEOUT * 2 + 500);
  });

  it('STARTTLS advertised and required (530 at MAIL): nothing delivered, not sent', async () => {
    const { peer, provider } = await setup({
      ehlo: (c) => c.write('250-raw\r\n250-STARTTLS\r\n250 PIPELINING\r\n'),
      mail: (c) => c.write('530 5.7.0 Must issue a STARTTLS command first\r\n'),
    });
    const result = await sendOne(provider, peer);
    expect(result.kind).not.toBe('sent');
    expect(peer.received).toHaveLength(0);
  });

  for (const pipelining of [true, false]) {
    it(`RCPT 450 for the only recipient (pipelining ${pipelining}): not_sent, nothing received`, async () => {
      const { peer, provider } = await setup({ pipelining, rcpt: (c) => c.write('450 4.2.1 try later\r\n') });
      const result = await sendOne(provider, peer);
      expect(result.kind).toBe('not_sent');
      expect(peer.received).toHaveLength(0);
    });

    it(`garbage reply to RCPT (pipelining ${pipelining}): not a permanent rejection (nothing was refused)`, async () => {
      const { peer, provider } = await setup({ pipelining, rcpt: (c) => c.write('what?\r\n') });
      const result = await sendOne(provider, peer);
      expect(peer.received).toHaveLength(0);
      expect(result.kind).toBe('not_sent');
    });
  }

  it('DATA answered 250 instead of 354 (allowed by nodemailer), then a 250 for the dot: sent once', async () => {
    const { peer, provider } = await setup({ data: (c) => c.write('250 go ahead\r\n') });
    expect((await sendOne(provider, peer)).kind).toBe('sent');
  });

  it('250 to the final dot after our timeout: unknown at once, then a late sent; one copy', async () => {
    const { peer, provider } = await setup({ dot: (c) => setTimeout(() => c.write('250 ok\r\n'), TIMEOUT + 700) });
    const key = randomUUID();
    const result = await provider.send(message(0, key), key);
    expect(result.kind).toBe('unknown');
    const late = result.kind === 'unknown' ? await result.late : undefined;
    expect(late?.kind).toBe('sent');
    expectHonest(peer, key, late as SendResult);
  });

  it('six concurrent sends, every odd transaction dropped after the dot: honest verdicts, no second copy', async () => {
    const { peer, provider } = await setup(
      {
        dot: (c, n) => {
          if (n % 2 === 1) c.socket.destroy();
          else c.write('250 ok\r\n');
        },
      },
      { maxConnections: 3 },
    );
    for (let wave = 0; wave < 3; wave++) {
      const keys = Array.from({ length: 6 }, () => randomUUID());
      const results = await Promise.all(keys.map((k, i) => provider.send(message(i, k), k)));
      keys.forEach((k, i) => expectHonest(peer, k, results[i] as SendResult));
    }
    for (const [, n] of peer.copies()) expect(n).toBe(1);
  });

  it('a pooled connection the server closes when MAIL arrives: retried once on a fresh one, one copy', async () => {
    const { peer, provider } = await setup({
      mail: (c, n) => {
        if (n === 2) c.socket.destroy();
        else c.write('250 ok\r\n');
      },
      pipelining: false,
    });
    expect((await sendOne(provider, peer, 1)).kind).toBe('sent');
    expect((await sendOne(provider, peer, 2)).kind).toBe('sent');
    expect(peer.received).toHaveLength(2);
  });
});
