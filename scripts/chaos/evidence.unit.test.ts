import { createPublicKey, verify } from 'node:crypto';
import { createServer, type IncomingMessage, type Server } from 'node:http';
import { freePort, SmtpSink, waitFor, type DeliveredMessage } from '@outreach/testkit';
import nodemailer from 'nodemailer';
import { afterEach, describe, expect, it } from 'vitest';
import { EvidenceProvider, type EvidenceSource } from './evidence.js';
import { Forger } from './forged-evidence.js';

interface Received {
  readonly path: string;
  readonly headers: IncomingMessage['headers'];
  readonly body: string;
}

/** The sender's intake as a plain HTTP server: records each POST and answers what `answer` says. */
async function intake(port: number, answer: (n: number) => number): Promise<{ server: Server; got: Received[] }> {
  const got: Received[] = [];
  const server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      got.push({ path: req.url ?? '', headers: req.headers, body: Buffer.concat(chunks).toString('utf8') });
      const status = answer(got.length);
      res.writeHead(status, { 'content-type': 'application/json' });
      res.end(status < 300 ? '{"received":1}' : '{"message":"scripted"}');
    });
  });
  await new Promise<void>((resolve) => server.listen(port, '127.0.0.1', resolve));
  return { server, got };
}

let cleanup: Array<() => Promise<void> | void> = [];
afterEach(async () => {
  for (const step of cleanup.reverse()) await step();
  cleanup = [];
});

/** A sink (offering DSN for the dsn provider) that hands each message it stores to a provider aimed at `port`. */
async function providerAndSink(source: EvidenceSource, port: number, retryMs = 50) {
  const provider = new EvidenceProvider({
    source,
    url: (path) => `http://127.0.0.1:${port}${path}`,
    dsnToken: 'dsn-token',
    retryMs,
  });
  const sink = await new SmtpSink({ dsn: source === 'dsn', onMessage: (m) => provider.delivered(m) }).start();
  const transport = nodemailer.createTransport({ host: '127.0.0.1', port: sink.port, secure: false, ignoreTLS: true });
  cleanup.push(
    () => provider.stop(),
    () => sink.stop(),
    () => transport.close(),
  );
  return { provider, sink, transport };
}

const mail = (n: number, dsn?: { id: string; notify: 'success' | 'failure' }) => ({
  from: 'outreach@sender.test',
  to: `cand-${n}@example.com`,
  subject: `Hello ${n}`,
  text: 'Body',
  messageId: `<00000000-0000-4000-8000-00000000000${n}.k1.ab${n}@outreach.test>`,
  ...(dsn && {
    dsn: { id: dsn.id, return: 'headers' as const, notify: dsn.notify, recipient: 'outreach@sender.test' },
  }),
});

describe('EvidenceProvider (SendGrid-shaped)', () => {
  it('posts each stored message as signed processed (and, every other one, delivered) events, retrying while the intake is down', async () => {
    const port = await freePort();
    const { provider, transport } = await providerAndSink('sendgrid', port);
    // The intake is down: nothing listens on the port yet.
    await transport.sendMail(mail(1));
    await transport.sendMail(mail(2));
    await waitFor(() => provider.summary().retried >= 2, { timeoutMs: 5_000, description: 'attempts while down' });
    expect(provider.summary().accepted).toBe(0);
    const { server, got } = await intake(port, () => 200);
    cleanup.push(() => new Promise<void>((resolve) => server.close(() => resolve())));
    expect(await provider.drained(5_000)).toBe(true);

    const key = createPublicKey({
      key: Buffer.from(provider.sendGridPublicKey, 'base64'),
      format: 'der',
      type: 'spki',
    });
    const events = got.flatMap((post) => {
      expect(post.path).toBe('/v1/feedback/sendgrid');
      const timestamp = post.headers['x-twilio-email-event-webhook-timestamp'] as string;
      const signature = post.headers['x-twilio-email-event-webhook-signature'] as string;
      expect(Math.abs(Number(timestamp) - Date.now() / 1000)).toBeLessThan(60);
      // Signed over the timestamp and the body exactly as sent; any other body does not verify.
      const signed = (body: string) =>
        verify('sha256', Buffer.from(timestamp + body), { key, dsaEncoding: 'der' }, Buffer.from(signature, 'base64'));
      expect(signed(post.body)).toBe(true);
      expect(signed(post.body.replace('cand-', 'cand-x'))).toBe(false);
      return JSON.parse(post.body) as Array<Record<string, unknown>>;
    });
    // Batches retried while the intake was down arrive in any order.
    const seen = events.map((e) => [e.event, e.email, e['smtp-id']]).sort((a, b) => String(a).localeCompare(String(b)));
    expect(seen).toEqual([
      ['delivered', 'cand-2@example.com', mail(2).messageId],
      ['processed', 'cand-1@example.com', mail(1).messageId],
      ['processed', 'cand-2@example.com', mail(2).messageId],
    ]);
    expect(new Set(events.map((e) => e.sg_event_id)).size).toBe(3);
    expect(provider.summary()).toMatchObject({ reported: 2, refused: [], pending: 0 });
  });

  it('keeps a refusal (4xx) without retrying it, and retries 429 and 5xx until taken', async () => {
    const port = await freePort();
    const answers = [503, 429, 200, 403];
    const { server, got } = await intake(port, (n) => answers[n - 1] ?? 200);
    cleanup.push(() => new Promise<void>((resolve) => server.close(() => resolve())));
    const { provider, transport } = await providerAndSink('sendgrid', port);
    await transport.sendMail(mail(1));
    expect(await provider.drained(5_000)).toBe(true);
    expect(got).toHaveLength(3);
    await transport.sendMail(mail(2));
    expect(await provider.drained(5_000)).toBe(true);
    expect(got).toHaveLength(4);
    expect(provider.summary()).toMatchObject({ posts: 4, accepted: 1, retried: 2 });
    expect(provider.summary().refused).toEqual([expect.stringMatching(/^403 /)]);
  });
});

describe('EvidenceProvider (success DSNs)', () => {
  it('posts an RFC 3464 success DSN with the ENVID and the original headers for each message that asked NOTIFY=SUCCESS', async () => {
    const port = await freePort();
    const { server, got } = await intake(port, () => 200);
    cleanup.push(() => new Promise<void>((resolve) => server.close(() => resolve())));
    const { provider, transport } = await providerAndSink('dsn', port);
    await transport.sendMail(mail(1, { id: '00000000-0000-4000-8000-000000000001.k1.ab1', notify: 'success' }));
    // Failures only: a relay sends no success DSN for it.
    await transport.sendMail(mail(2, { id: '00000000-0000-4000-8000-000000000002.k1.ab2', notify: 'failure' }));
    await transport.sendMail(mail(3));
    expect(await provider.drained(5_000)).toBe(true);
    expect(provider.summary()).toMatchObject({ reported: 1, unreported: 2, accepted: 1 });
    expect(got).toHaveLength(1);
    const [post] = got as [Received];
    expect(post.path).toBe('/v1/feedback/dsn');
    expect(post.headers.authorization).toBe('Bearer dsn-token');
    expect(post.headers['content-type']).toBe('message/rfc822');
    const body = post.body;
    const boundary = /boundary="([^"]+)"/.exec(body)?.[1] as string;
    expect(body).toMatch(/^Content-Type: multipart\/report; report-type=delivery-status; boundary="/m);
    const parts = body.split(`--${boundary}`).slice(1, -1);
    expect(parts.map((p) => /Content-Type: ([^\r\n;]+)/.exec(p)?.[1])).toEqual([
      'text/plain',
      'message/delivery-status',
      'text/rfc822-headers',
    ]);
    const [, status, returned] = parts as [string, string, string];
    expect(status).toContain('\r\nOriginal-Envelope-Id: 00000000-0000-4000-8000-000000000001.k1.ab1\r\n');
    expect(status).toMatch(
      /\r\nFinal-Recipient: rfc822; cand-1@example\.com\r\nAction: delivered\r\nStatus: 2\.0\.0\r\n/,
    );
    // The message's own headers, as the sink received them.
    expect(returned).toMatch(/\r\nmessage-id: <00000000-0000-4000-8000-000000000001\.k1\.ab1@outreach\.test>\r\n/i);
    expect(returned).toMatch(/\r\nsubject: Hello 1\r\n/i);
    expect(body).toMatch(/^Message-ID: <[^>]+\.dsn@mx\.sink\.test>\r\n/m);
  });
});

describe('Forger', () => {
  const seen = {
    messageId: '<00000000-0000-4000-8000-000000000009.run-ab12.0123456789abcdef0123456789abcdef@outreach.test>',
  } as DeliveredMessage;
  const victim = { sendId: '00000000-0000-4000-8000-000000000001', email: 'cand-1@example.com' };

  it('signs SendGrid events with its own key, and counts a 403 as refused and anything else as trusted', async () => {
    const port = await freePort();
    const { server, got } = await intake(port, (n) => (n === 1 ? 403 : 200));
    cleanup.push(() => new Promise<void>((resolve) => server.close(() => resolve())));
    const provider = new EvidenceProvider({ source: 'sendgrid', url: () => '', dsnToken: '' });
    const forger = new Forger({ source: 'sendgrid', url: (path) => `http://127.0.0.1:${port}${path}`, dsnToken: '' });
    await forger.forge([victim], seen, 0);
    await forger.forge([victim], seen, 0);
    const [first] = got as [Received];
    const [event] = JSON.parse(first.body) as Array<Record<string, string>>;
    expect(event).toMatchObject({ email: victim.email });
    // Our key id and domain, a MAC it made up.
    expect(event?.['smtp-id']).toMatch(
      /^<00000000-0000-4000-8000-000000000001\.run-ab12\.[0-9a-f]{32}@outreach\.test>$/,
    );
    const key = createPublicKey({
      key: Buffer.from(provider.sendGridPublicKey, 'base64'),
      format: 'der',
      type: 'spki',
    });
    const timestamp = first.headers['x-twilio-email-event-webhook-timestamp'] as string;
    const signature = Buffer.from(first.headers['x-twilio-email-event-webhook-signature'] as string, 'base64');
    expect(verify('sha256', Buffer.from(timestamp + first.body), { key, dsaEncoding: 'der' }, signature)).toBe(false);
    expect(forger.summary()).toMatchObject({ answered: 2, refused: 1, trusted: [expect.stringMatching(/: 200 /)] });
  });

  it('posts DSNs through the hook naming the send by made-up identifiers; only an `unverified` answer is refusal', async () => {
    const port = await freePort();
    const { server, got } = await intake(port, () => 200);
    cleanup.push(() => new Promise<void>((resolve) => server.close(() => resolve())));
    const forger = new Forger({ source: 'dsn', url: (path) => `http://127.0.0.1:${port}${path}`, dsnToken: 'hook' });
    // The stub answers {"received":1}: no `unverified` count, so the forgery counts as trusted.
    await forger.forge([victim], seen, 0);
    await forger.forge([victim], seen, 0);
    await forger.forge([victim], seen, 0);
    expect(got.map((g) => [g.path, g.headers.authorization])).toEqual(
      Array(3).fill(['/v1/feedback/dsn', 'Bearer hook']),
    );
    expect(got[0]?.body).toMatch(
      /Original-Envelope-Id: 00000000-0000-4000-8000-000000000001\.run-ab12\.[0-9a-f]{32}\r\n/,
    );
    // The third names it by the bare sendId, its Message-ID at another domain.
    expect(got[2]?.body).toMatch(/Original-Envelope-Id: 00000000-0000-4000-8000-000000000001\r\n/);
    expect(got[2]?.body).toMatch(/message-id: <00000000-0000-4000-8000-000000000001@elsewhere\.test>/);
    expect(forger.summary()).toMatchObject({ answered: 3, refused: 0 });
    expect(forger.summary().trusted).toHaveLength(3);
  });

  it('forges nothing before it has seen one of our Message-IDs, and each send at most once per interval', async () => {
    const port = await freePort();
    const { server, got } = await intake(port, () => 403);
    cleanup.push(() => new Promise<void>((resolve) => server.close(() => resolve())));
    const forger = new Forger({ source: 'sendgrid', url: (path) => `http://127.0.0.1:${port}${path}`, dsnToken: '' });
    await forger.forge([victim], undefined);
    await forger.forge([victim], seen, 60_000);
    await forger.forge([victim], seen, 60_000);
    expect(got).toHaveLength(1);
  });
});
