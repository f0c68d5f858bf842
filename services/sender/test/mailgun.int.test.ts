/**
 * The Mailgun adapter (send and lookup) against FakeMailgun, a server that speaks Mailgun's
 * documented API subset. Each send is checked where the user would see it: the copies the server
 * stored. The promise, per send: `sent` only with exactly one copy stored, `not_sent`/`rejected`
 * only with none, never two; anything unknowable `unknown`, which the lookup then settles.
 */
import { randomUUID } from 'node:crypto';
import { waitFor, type HttpHostility } from '@outreach/testkit';
import { FakeMailgun, type MailgunEndpoint } from './fixtures/fake-mailgun.js';
import { afterEach, describe, expect, it } from 'vitest';
import { decideAfterLookup } from '../src/adapters/providers/lookup.js';
import { MailgunLookup, MailgunProvider } from '../src/adapters/providers/mailgun.js';
import type { SendResult } from '../src/adapters/providers/port.js';

const DOMAIN = 'mg.outreach.test';
const KEY = 'key-test-0123456789';
const TIMEOUT = 600;
let server: FakeMailgun | undefined;
const closers: Array<() => Promise<void>> = [];
afterEach(async () => {
  for (const close of closers.splice(0)) await close();
  await server?.stop();
  server = undefined;
});

interface Setup {
  hostile?: (n: number, endpoint: MailgunEndpoint) => HttpHostility | undefined;
  eventsVisibleAfterMs?: number;
  apiKey?: string;
  domain?: string;
  lateWithinMs?: number;
}

async function setup(options: Setup = {}) {
  server = await new FakeMailgun({
    apiKey: KEY,
    domain: DOMAIN,
    ...(options.hostile ? { hostile: options.hostile } : {}),
    ...(options.eventsVisibleAfterMs ? { eventsVisibleAfterMs: options.eventsVisibleAfterMs } : {}),
  }).start();
  const common = {
    baseUrl: server.url,
    domain: options.domain ?? DOMAIN,
    apiKey: options.apiKey ?? KEY,
    timeoutMs: TIMEOUT,
  };
  const provider = new MailgunProvider({
    ...common,
    lateWithinMs: options.lateWithinMs ?? 0,
  });
  const lookup = new MailgunLookup({ ...common, settleMs: 2_000 });
  closers.push(
    () => provider.close(),
    () => lookup.close(),
  );
  return { server, provider, lookup };
}

const idOf = (key: string) => `${key}@outreach.local`;
/** The message of send `key` (a fresh one by default), with the Message-ID the sender gives it. */
const message = (to = 'ada@example.com', key: string = randomUUID()) => ({
  from: 'Outreach <outreach@example.com>',
  to,
  subject: 'Hello',
  text: 'We would like to talk.\n'.repeat(20),
  headers: { 'List-Unsubscribe': '<mailto:unsubscribe@example.com>' },
  messageId: `<${idOf(key)}>`,
});

function expectHonest(fake: FakeMailgun, key: string, result: SendResult): void {
  const copies = fake.messages.filter((m) => m.id === idOf(key)).length;
  expect(copies, `copies of ${key}`).toBeLessThanOrEqual(1);
  if (result.kind === 'not_sent' || result.kind === 'rejected') expect(copies, `${result.kind} but stored`).toBe(0);
  if (result.kind === 'sent') expect(copies, 'sent but not stored').toBe(1);
}

async function sendOne(provider: MailgunProvider, fake: FakeMailgun, to?: string) {
  const key = randomUUID();
  const result = await provider.send(message(to, key), key);
  expectHonest(fake, key, result);
  return { key, result };
}

describe('MailgunProvider against the Mailgun API', { timeout: 30_000 }, () => {
  it('sends one message with our Message-ID, headers and send id, as Mailgun stores it', async () => {
    const { server, provider } = await setup();
    const { key, result } = await sendOne(provider, server);
    expect(result).toEqual({ kind: 'sent', providerMessageId: `<${idOf(key)}>` });
    const [stored] = server.deliveredTo('ada@example.com');
    expect(stored).toMatchObject({
      id: idOf(key),
      from: 'Outreach <outreach@example.com>',
      to: ['ada@example.com'],
      subject: 'Hello',
      text: message().text,
    });
    expect(stored?.headers.get('list-unsubscribe')).toBe('<mailto:unsubscribe@example.com>');
    expect(stored?.variables.get('send-id')).toBe(key);
  });

  it('sends concurrently, one copy each', async () => {
    const { server, provider } = await setup();
    const results = await Promise.all(
      Array.from({ length: 20 }, (_, i) => sendOne(provider, server, `c${i}@example.com`)),
    );
    expect(results.every((r) => r.result.kind === 'sent')).toBe(true);
    expect(server.messages).toHaveLength(20);
  });

  it('a wrong API key (401) or domain (404): not_sent, nothing stored', async () => {
    for (const wrong of [{ apiKey: 'key-wrong' }, { domain: 'other.test' }]) {
      const { server, provider } = await setup(wrong);
      const { result } = await sendOne(provider, server);
      expect(result).toEqual({ kind: 'not_sent', reason: `mailgun http ${'apiKey' in wrong ? 401 : 404}` });
      expect(server.messages).toHaveLength(0);
      await server.stop();
    }
  });

  it("a message Mailgun's validation refuses (400: no sender): rejected, nothing stored", async () => {
    const { server, provider } = await setup();
    const result = await provider.send({ ...message(), from: '' }, randomUUID());
    expect(result).toEqual({ kind: 'rejected', reason: 'mailgun http 400' });
    expect(server.messages).toHaveLength(0);
  });

  const refusals: Array<[number, SendResult['kind']]> = [
    [429, 'not_sent'],
    [500, 'not_sent'],
    [503, 'not_sent'],
    [413, 'rejected'],
    [502, 'unknown'],
    [504, 'unknown'],
  ];
  for (const [status, kind] of refusals) {
    it(`a ${status}: ${kind}`, async () => {
      const { server, provider } = await setup({ hostile: () => ({ act: 'status', status }) });
      const { result } = await sendOne(provider, server);
      expect(result.kind).toBe(kind);
      expect(server.messages).toHaveLength(0);
    });
  }

  it('the connection dropped after the body was read (Mailgun kept it): unknown, never not_sent', async () => {
    const { server, provider } = await setup({ hostile: (n) => (n === 1 ? { act: 'drop' } : undefined) });
    const { result } = await sendOne(provider, server);
    expect(result.kind).toBe('unknown');
    expect(server.messages).toHaveLength(1);
  });

  it('a connection reset before the body was read (nothing kept): not sent, or at worst unknown', async () => {
    const { server, provider } = await setup({ hostile: (n) => (n === 1 ? { act: 'reset' } : undefined) });
    const { result } = await sendOne(provider, server);
    expect(['not_sent', 'unknown']).toContain(result.kind);
    expect(server.messages).toHaveLength(0);
  });

  it('an answer after our timeout: unknown now, sent when the late 200 arrives', async () => {
    const { server, provider } = await setup({
      hostile: (n) => (n === 1 ? { act: 'stall', ms: TIMEOUT * 2 } : undefined),
      lateWithinMs: TIMEOUT * 5,
    });
    const begun = Date.now();
    const { key, result } = await sendOne(provider, server);
    expect(Date.now() - begun).toBeLessThan(TIMEOUT + 500);
    expect(result.kind).toBe('unknown');
    if (result.kind !== 'unknown' || !result.late) throw new Error('expected a late verdict');
    expect(result.lateWithinMs).toBe(TIMEOUT * 5);
    expect(await result.late).toEqual({ kind: 'sent', providerMessageId: `<${idOf(key)}>` });
    expect(server.messages).toHaveLength(1);
  });

  it('no answer within the late window either: the late verdict is unknown', async () => {
    const { server, provider } = await setup({
      hostile: () => ({ act: 'stall', ms: 10_000 }),
      lateWithinMs: TIMEOUT,
    });
    const { result } = await sendOne(provider, server);
    if (result.kind !== 'unknown' || !result.late) throw new Error('expected a late verdict');
    expect((await result.late).kind).toBe('unknown');
    expect(server.messages).toHaveLength(1);
  });

  it('200 with garbage, a half body or a 50 MB body: sent (the status is the verdict), read within bounds', async () => {
    const hostilities: HttpHostility[] = [
      { act: 'garbage' },
      { act: 'partial' },
      { act: 'huge', bytes: 50 * 1024 * 1024 },
    ];
    for (const hostility of hostilities) {
      const { server, provider } = await setup({ hostile: () => hostility });
      const begun = Date.now();
      const { key, result } = await sendOne(provider, server);
      expect(result, hostility.act).toEqual({ kind: 'sent', providerMessageId: `<${idOf(key)}>` });
      expect(Date.now() - begun).toBeLessThan(TIMEOUT);
      await server.stop();
    }
  });

  it('nobody listening: not_sent', async () => {
    const { server, provider } = await setup();
    await server.stop();
    expect((await provider.send(message(), randomUUID())).kind).toBe('not_sent');
  });

  it('after close: not_sent without a request', async () => {
    const { server, provider } = await setup();
    await provider.close();
    expect((await provider.send(message(), randomUUID())).kind).toBe('not_sent');
    expect(server.requests.messages).toBe(0);
  });
});

describe('MailgunLookup against the Events API', { timeout: 30_000 }, () => {
  it('settles an unknown send that Mailgun kept: not found while events lag, then found → sent', async () => {
    const { server, provider, lookup } = await setup({
      hostile: (n, endpoint) => (n === 1 && endpoint === 'messages' ? { act: 'drop' } : undefined),
      eventsVisibleAfterMs: 400,
    });
    const sentAfter = new Date();
    const { key, result } = await sendOne(provider, server);
    expect(result.kind).toBe('unknown');

    const query = { messageId: `<${idOf(key)}>`, recipient: 'ada@example.com', sentAfter };
    // The event is not indexed yet: not found, which before the settle time means wait.
    const early = await lookup.find(query);
    expect(early).toEqual({ kind: 'not_found' });
    const timing = {
      attemptStartedAt: sentAfter,
      handoverWithinMs: TIMEOUT,
      settleMs: lookup.settleMs,
      now: new Date(),
      recheckMs: 1_000,
    };
    expect(decideAfterLookup(early, timing).verdict).toBe('wait');

    const found = await waitFor(
      async () => {
        const r = await lookup.find(query);
        return r.kind === 'found' ? r : undefined;
      },
      { timeoutMs: 5_000, intervalMs: 100, description: 'the accepted event' },
    );
    expect(found).toMatchObject({ kind: 'found', providerId: idOf(key) });
    expect(decideAfterLookup(found, { ...timing, now: new Date() }).verdict).toBe('sent');
    expect(server.messages).toHaveLength(1);
  });

  it('not found for a send Mailgun never got, and for another send id', async () => {
    const { server, provider, lookup } = await setup();
    const sentAfter = new Date();
    const { key } = await sendOne(provider, server);
    expect(await lookup.find({ messageId: `<${idOf(key)}>`, sentAfter })).toMatchObject({ kind: 'found' });
    expect(await lookup.find({ messageId: `<${idOf(randomUUID())}>`, sentAfter })).toEqual({ kind: 'not_found' });
  });

  it('our id for another recipient, a send outside the retention window, or no start: unavailable', async () => {
    const { server, provider, lookup } = await setup();
    const sentAfter = new Date();
    const { key } = await sendOne(provider, server, 'bob@example.com');
    const messageId = `<${idOf(key)}>`;
    expect((await lookup.find({ messageId, sentAfter, recipient: 'ada@example.com' })).kind).toBe('unavailable');
    expect((await lookup.find({ messageId: `<${idOf(randomUUID())}>`, sentAfter: new Date(0) })).kind).toBe(
      'unavailable',
    );
    expect((await lookup.find({ messageId })).kind).toBe('unavailable');
  });

  const cases: Array<[string, HttpHostility | 'wrong key', string]> = [
    ['401 (wrong key)', 'wrong key', 'mailgun http 401'],
    ['500', { act: 'status', status: 500 }, 'mailgun http 500'],
    ['a connection dropped without an answer', { act: 'drop' }, 'mailgun ECONNRESET'],
    ['an answer after our timeout', { act: 'stall', ms: TIMEOUT * 3 }, 'mailgun timeout'],
    ['200 with a body that is not JSON', { act: 'garbage' }, 'mailgun response not an event list'],
    ['200 with a 20 MB body', { act: 'huge', bytes: 20 * 1024 * 1024 }, 'mailgun response too large'],
  ];
  for (const [name, hostility, reason] of cases) {
    it(`${name}: unavailable within the timeout, never not_found`, async () => {
      const { server, provider } = await setup(
        hostility === 'wrong key' ? {} : { hostile: (_n, endpoint) => (endpoint === 'events' ? hostility : undefined) },
      );
      const lookup = new MailgunLookup({
        baseUrl: server.url,
        domain: DOMAIN,
        apiKey: hostility === 'wrong key' ? 'key-wrong' : KEY,
        timeoutMs: TIMEOUT,
      });
      closers.push(() => lookup.close());
      const sentAfter = new Date();
      const { key } = await sendOne(provider, server);
      for (const messageId of [`<${idOf(key)}>`, `<${idOf(randomUUID())}>`]) {
        const begun = Date.now();
        expect(await lookup.find({ messageId, sentAfter })).toEqual({ kind: 'unavailable', reason });
        expect(Date.now() - begun).toBeLessThan(TIMEOUT + 1_000);
      }
    });
  }
});
