/**
 * The provider API stand-ins answer as the real APIs document: the sink's Mailpit search (matching
 * as Mailpit's SQL does, paging, refusing syntax it does not implement) and the fake Mailgun
 * (auth, validation, form encodings, event filters). Adapters are tested against these, so these
 * pin what "as documented" means.
 */
import nodemailer from 'nodemailer';
import { afterEach, describe, expect, it } from 'vitest';
import { FakeMailgun } from './fake-mailgun.js';
import { SmtpSink } from './smtp-sink.js';

let sink: SmtpSink | undefined;
let mailgun: FakeMailgun | undefined;
afterEach(async () => {
  await sink?.stop();
  await mailgun?.stop();
  sink = mailgun = undefined;
});

async function search(base: string, query: string, extra = ''): Promise<{ status: number; body: unknown }> {
  const response = await fetch(`${base}/api/v1/search?query=${encodeURIComponent(query)}${extra}`);
  const text = await response.text();
  return { status: response.status, body: response.status === 200 ? JSON.parse(text) : text };
}

describe("SmtpSink's Mailpit search API", () => {
  it('matches message-id: as Mailpit does (no brackets, case-insensitive substring, _ any character), newest first', async () => {
    sink = await new SmtpSink().start();
    const base = await sink.startMailpitApi();
    const transport = nodemailer.createTransport({
      host: '127.0.0.1',
      port: sink.port,
      secure: false,
      ignoreTLS: true,
    });
    for (const [id, to] of [
      ['<Send-1@outreach.test>', 'ada@example.com'],
      ['<xsend-1@outreach.test>', 'bob@example.com'],
      ['<send_2@outreach.test>', 'ada@example.com'],
    ] as const) {
      await transport.sendMail({ from: 'o@example.com', to, subject: 'Hi', text: 'Body', messageId: id });
    }
    transport.close();

    const one = await search(base, 'message-id:<send-1@outreach.test>');
    expect(one.status).toBe(200);
    expect(one.body).toMatchObject({
      total: 3,
      messages_count: 2,
      start: 0,
      messages: [
        { ID: 'sink-2', MessageID: 'xsend-1@outreach.test', To: [{ Address: 'bob@example.com' }] },
        { ID: 'sink-1', MessageID: 'Send-1@outreach.test', To: [{ Address: 'ada@example.com' }] },
      ],
    });
    const created = (one.body as { messages: Array<{ Created: string }> }).messages[0]?.Created ?? '';
    expect(Number.isFinite(Date.parse(created))).toBe(true);

    // `_` in the query is SQL's any-character wildcard: `send_1` matches both `send-1` ids.
    expect((await search(base, 'message-id:send_1@outreach.test')).body).toMatchObject({ messages_count: 2 });
    expect((await search(base, 'message-id:send-1 to:ada@')).body).toMatchObject({
      messages_count: 1,
      messages: [{ ID: 'sink-1' }],
    });
    expect((await search(base, 'message-id:outreach.test', '&limit=1&start=1')).body).toMatchObject({
      messages_count: 3,
      start: 1,
      messages: [{ ID: 'sink-2' }],
    });
  });

  it('refuses a missing query and search terms it does not implement (400), unknown paths (404)', async () => {
    sink = await new SmtpSink().start();
    const base = await sink.startMailpitApi();
    expect((await search(base, '')).status).toBe(400);
    expect((await search(base, 'subject:hello')).status).toBe(400);
    expect((await fetch(`${base}/api/v1/messages`)).status).toBe(404);
  });
});

describe('FakeMailgun', () => {
  const auth = (key: string) => ({ authorization: `Basic ${Buffer.from(`api:${key}`).toString('base64')}` });

  it('accepts a urlencoded send, validates required fields, and lists accepted events by filter', async () => {
    mailgun = await new FakeMailgun({ apiKey: 'k', domain: 'mg.test' }).start();
    const post = (fields: Record<string, string>, key = 'k') =>
      fetch(`${mailgun?.url}/v3/mg.test/messages`, {
        method: 'POST',
        headers: auth(key),
        body: new URLSearchParams(fields),
      });
    const fields = { from: 'o@x.test', to: 'Ada <ada@x.test>, bob@x.test', subject: 'S', text: 'T' };
    expect((await post(fields, 'wrong')).status).toBe(401);
    expect((await post({ ...fields, to: '' })).status).toBe(400);
    const { text: _text, ...withoutBody } = fields;
    expect((await post(withoutBody)).status).toBe(400);
    const ok = await post({ ...fields, 'h:Message-Id': '<m-1@outreach.test>', 'v:send-id': 'm-1' });
    expect(ok.status).toBe(200);
    expect(await ok.json()).toEqual({ id: '<m-1@outreach.test>', message: 'Queued. Thank you.' });
    expect(mailgun.messages).toHaveLength(1);

    const events = async (query: string) => {
      const response = await fetch(`${mailgun?.url}/v3/mg.test/events?${query}`, { headers: auth('k') });
      return { status: response.status, body: (await response.json()) as { items: Array<Record<string, unknown>> } };
    };
    const all = await events('message-id=m-1@outreach.test');
    expect(all.body.items.map((e) => e.recipient)).toEqual(['ada@x.test', 'bob@x.test']);
    expect(all.body.items[0]).toMatchObject({
      event: 'accepted',
      message: { headers: { 'message-id': 'm-1@outreach.test' } },
      'user-variables': { 'send-id': 'm-1' },
    });
    expect(all.body).toHaveProperty('paging.next');
    expect((await events('message-id=m-1@outreach.test&recipient=BOB@x.test')).body.items).toHaveLength(1);
    expect((await events('message-id=<m-1@outreach.test>')).body.items).toHaveLength(0);
    expect((await events(`begin=${Date.now() / 1000 + 60}&ascending=yes`)).body.items).toHaveLength(0);
    expect((await events('limit=301')).status).toBe(400);
  });
});
