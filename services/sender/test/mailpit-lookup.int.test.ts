/**
 * The Mailpit delivery lookup against the test SMTP server's Mailpit-compatible search API
 * (SmtpSink.startMailpitApi), with messages put there by the real SmtpProvider: what the lookup
 * says is checked against what the server holds. Then the sink's API turns hostile, and every
 * failure must read `unavailable`, never `not_found`, within the lookup's timeout.
 */
import { randomUUID } from 'node:crypto';
import { SmtpSink, type HttpHostility, type SmtpHostility } from '@outreach/testkit';
import { afterEach, describe, expect, it } from 'vitest';
import { decideAfterLookup } from '../src/adapters/providers/lookup.js';
import { MailpitLookup } from '../src/adapters/providers/mailpit-lookup.js';
import { SmtpProvider } from '../src/adapters/providers/smtp.js';

const DOMAIN = 'lookup.test';
const TIMEOUT = 600;
let sink: SmtpSink | undefined;
let provider: SmtpProvider | undefined;
let lookup: MailpitLookup | undefined;
afterEach(async () => {
  await provider?.close();
  await lookup?.close();
  await sink?.stop();
  sink = provider = lookup = undefined;
});

async function setup(
  options: { smtp?: (n: number) => SmtpHostility | undefined; api?: (n: number) => HttpHostility | undefined } = {},
) {
  sink = await new SmtpSink(options.smtp ? { hostile: options.smtp } : {}).start();
  const baseUrl = await sink.startMailpitApi(options.api ? { hostile: options.api } : {});
  provider = new SmtpProvider({
    host: '127.0.0.1',
    port: sink.port,
    secure: false,
    requireTLS: false,
    timeoutMs: TIMEOUT,
    finalReplyTimeoutMs: 1_000,
    maxConnections: 2,
  });
  lookup = new MailpitLookup({ baseUrl, timeoutMs: TIMEOUT, settleMs: 1_000 });
  return { sink, provider, lookup, baseUrl };
}

const idOf = (key: string) => `<${key}@${DOMAIN}>`;
/** The message of send `key`, to `to`, with the Message-ID the sender gives it. */
const message = (key: string, to = 'ada@example.com') => ({
  from: 'outreach@example.com',
  to,
  subject: 'hello',
  text: 'We would like to talk.',
  headers: {},
  messageId: idOf(key),
});

describe('MailpitLookup against the SMTP test server', { timeout: 30_000 }, () => {
  it('finds a message the server holds, by its deterministic Message-ID, and not one it never got', async () => {
    const { sink, provider, lookup } = await setup();
    const key = randomUUID();
    expect((await provider.send(message(key), key)).kind).toBe('sent');
    expect(sink.messages.map((m) => m.messageId)).toEqual([idOf(key)]);

    const found = await lookup.find({ messageId: idOf(key), recipient: 'Ada@Example.com' });
    expect(found).toMatchObject({ kind: 'found', providerId: 'sink-1' });
    expect(found.kind === 'found' && found.at ? Math.abs(found.at.getTime() - Date.now()) : -1).toBeLessThan(5_000);

    expect(await lookup.find({ messageId: idOf(randomUUID()) })).toEqual({ kind: 'not_found' });
  });

  it("does not take a message whose id merely contains ours (Mailpit's search is a substring match) as ours", async () => {
    const { sink, provider, lookup } = await setup();
    const key = randomUUID();
    // `x<key>` contains `<key>`: the search returns it, the lookup must not count it.
    expect((await provider.send(message(`x${key}`), `x${key}`)).kind).toBe('sent');
    expect(sink.messages).toHaveLength(1);
    expect(await lookup.find({ messageId: idOf(key) })).toEqual({ kind: 'not_found' });
  });

  it('an answer cut short by the page size, with none of the returned messages ours, is not a not-found', async () => {
    const { sink, provider, baseUrl } = await setup();
    const key = randomUUID();
    for (const prefix of ['a', 'b'])
      expect((await provider.send(message(`${prefix}${key}`), `${prefix}${key}`)).kind).toBe('sent');
    expect(sink.messages).toHaveLength(2);
    const narrow = new MailpitLookup({ baseUrl, timeoutMs: TIMEOUT, limit: 1 });
    try {
      expect(await narrow.find({ messageId: idOf(key) })).toEqual({
        kind: 'unavailable',
        reason: 'mailpit search result incomplete',
      });
    } finally {
      await narrow.close();
    }
  });

  it('our id on a message to another recipient is unavailable, not found nor not found', async () => {
    const { provider, lookup } = await setup();
    const key = randomUUID();
    expect((await provider.send(message(key, 'bob@example.com'), key)).kind).toBe('sent');
    expect((await lookup.find({ messageId: idOf(key), recipient: 'ada@example.com' })).kind).toBe('unavailable');
  });

  it('settles an SMTP send that ended unknown: the server kept it (dot dropped) → sent', async () => {
    const { sink, provider, lookup } = await setup({ smtp: (n) => (n === 1 ? { at: 'dot', act: 'drop' } : undefined) });
    const key = randomUUID();
    const started = new Date();
    expect((await provider.send(message(key), key)).kind).toBe('unknown');
    expect(sink.messages.map((m) => m.messageId)).toEqual([idOf(key)]);

    const result = await lookup.find({ messageId: idOf(key), recipient: 'ada@example.com' });
    const decision = decideAfterLookup(result, {
      attemptStartedAt: started,
      handoverWithinMs: TIMEOUT,
      settleMs: lookup.settleMs,
      now: new Date(),
      recheckMs: 1_000,
    });
    expect(decision).toEqual({ verdict: 'sent', providerId: 'sink-1' });
  });

  it('settles an SMTP send that ended unknown: the server lost it (reset mid-body) → wait, then retry', async () => {
    const { sink, provider, lookup } = await setup({
      smtp: (n) => (n === 1 ? { at: 'body', act: 'reset' } : undefined),
    });
    const key = randomUUID();
    const started = new Date();
    expect((await provider.send(message(key), key)).kind).toBe('unknown');
    expect(sink.messages).toHaveLength(0);

    const result = await lookup.find({ messageId: idOf(key) });
    expect(result).toEqual({ kind: 'not_found' });
    const at = (ms: number) => ({
      attemptStartedAt: started,
      handoverWithinMs: TIMEOUT,
      settleMs: lookup.settleMs,
      now: new Date(started.getTime() + ms),
      recheckMs: 1_000,
    });
    expect(decideAfterLookup(result, at(TIMEOUT + lookup.settleMs - 1)).verdict).toBe('wait');
    expect(decideAfterLookup(result, at(TIMEOUT + lookup.settleMs)).verdict).toBe('retry');
    // The retry delivers exactly one copy, which the lookup then finds.
    expect((await provider.send(message(key), key)).kind).toBe('sent');
    expect(sink.messages.map((m) => m.messageId)).toEqual([idOf(key)]);
    expect((await lookup.find({ messageId: idOf(key) })).kind).toBe('found');
  });
});

describe('MailpitLookup against a hostile Mailpit API', { timeout: 30_000 }, () => {
  const cases: Array<[string, HttpHostility, string]> = [
    ['500', { act: 'status', status: 500, body: 'internal error' }, 'mailpit http 500'],
    ['401 (basic auth on)', { act: 'status', status: 401, body: 'Unauthorised' }, 'mailpit http 401'],
    ['400 (a query it does not take)', { act: 'status', status: 400, body: 'Error: bad' }, 'mailpit http 400'],
    ['a connection reset on arrival', { act: 'reset' }, 'mailpit ECONNRESET'],
    ['a connection dropped without an answer', { act: 'drop' }, 'mailpit ECONNRESET'],
    ['an answer after our timeout', { act: 'stall', ms: TIMEOUT * 3 }, 'mailpit timeout'],
    ['200 with a body that is not JSON', { act: 'garbage' }, 'mailpit response not a search result'],
    ['200 with a 20 MB body', { act: 'huge', bytes: 20 * 1024 * 1024 }, 'mailpit response too large'],
    ['200 and half a body, then a close', { act: 'partial' }, 'mailpit ECONNRESET'],
  ];
  for (const [name, hostility, reason] of cases) {
    it(`${name}: unavailable within the timeout, never not_found`, async () => {
      const { provider, lookup } = await setup({ api: () => hostility });
      const key = randomUUID();
      expect((await provider.send(message(key), key)).kind).toBe('sent');
      // Whether the server holds the message (first) or not (second), a failed lookup says neither.
      for (const messageId of [idOf(key), idOf(randomUUID())]) {
        const begun = Date.now();
        expect(await lookup.find({ messageId })).toEqual({ kind: 'unavailable', reason });
        expect(Date.now() - begun).toBeLessThan(TIMEOUT + 1_000);
      }
    });
  }

  it('an aborted lookup is unavailable at once', async () => {
    const { lookup } = await setup({ api: () => ({ act: 'stall', ms: 5_000 }) });
    const controller = new AbortController();
    const pending = lookup.find({ messageId: idOf(randomUUID()) }, controller.signal);
    controller.abort();
    expect(await pending).toEqual({ kind: 'unavailable', reason: 'mailpit ABORTED' });
  });

  it('an API nobody listens on is unavailable', async () => {
    const closed = new MailpitLookup({ baseUrl: 'http://127.0.0.1:1', timeoutMs: TIMEOUT });
    try {
      expect(await closed.find({ messageId: idOf(randomUUID()) })).toEqual({
        kind: 'unavailable',
        reason: 'mailpit ECONNREFUSED',
      });
    } finally {
      await closed.close();
    }
  });
});
