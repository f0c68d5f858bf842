/**
 * Unsubscribes, bounces and complaints taken in (#18), through the sender's own routes, against the
 * real broker, database and SMTP sink: the one-click link in a delivered email, SES notifications
 * signed as SNS signs them, the SendGrid Signed Event Webhook, and DSNs from the bounce mailbox.
 * The identifiers our mail carries (Message-ID, ENVID, unsubscribe token) are signed (ADR 012): a
 * report or a link naming someone else's send by its computable sendId, without our MAC, changes
 * nothing and is counted; the DSN hook has a scope of its own, apart from `operate`.
 *
 * SNS's signing certificate is served by a local HTTP server standing in for
 * sns.us-east-1.amazonaws.com: the app is built while `fetch` sends that origin to the local server
 * and refuses every other (as in feedback-sns.int.test.ts), so the intake's real certificate fetch
 * and cache run; `fetch` is restored as soon as the app holds its own reference.
 */
import { createSecretKey, generateKeyPairSync, randomUUID } from 'node:crypto';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { topicName } from '@outreach/shared';
import { emailHash, eventCodec, type AddressSuppressed } from '@outreach/contracts';
import {
  rawRequest,
  readTopic,
  selfSignedCertificate,
  slowClients,
  testEmailHashKey,
  waitFor,
} from '@outreach/testkit';
import {
  deliveryStatusNotification,
  sesNotification,
  signedSnsMessage,
  sendGridSignatureSpellings,
  signSendGridWebhook,
  TEST_SNS_TOPIC_ARN,
} from './fixtures/feedback-fixtures.js';
import type { FastifyInstance, InjectOptions } from 'fastify';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { SNS_MAX_BODY_BYTES, SNS_MAX_MESSAGE_BYTES } from '../src/domain/feedback/index.js';
import { SendIdentifiers } from '../src/domain/identifiers.js';
import { unsubscribeKey, unsubscribeToken } from '../src/domain/unsubscribe-token.js';
import {
  API_TOKEN,
  deliveriesByRecipient,
  messageIdOf,
  senderTestEnv,
  sendRequested,
  testIdentifiers,
  type SenderTestEnv,
} from './harness.js';

const infra = { kafkaBrokers: inject('kafkaBrokers'), databaseUrl: inject('databaseUrl') };
const operate = { authorization: `Bearer ${API_TOKEN}` };
/** Tokens holding one scope each: an operator's, and the bounce-mailbox hook's. */
const operatorOnly = { authorization: 'Bearer operator-only-token' };
const hookOnly = { authorization: 'Bearer dsn-hook-token' };
const SNS_ORIGIN = 'https://sns.us-east-1.amazonaws.com/';
const sns = selfSignedCertificate({ commonName: 'sns.amazonaws.com' });
const sendGrid = generateKeyPairSync('ec', { namedCurve: 'prime256v1' });
const hashKey = testEmailHashKey();

let t: SenderTestEnv;
let app: FastifyInstance;
let snsServer: Server;
let snsPort: number;
const certificateFetches: string[] = [];
/** Addresses and the sendId of the one email each got before the tests start. */
const sent = new Map<string, string>();

/** An app of the env (with `overrides`) built while `fetch` sends SNS's origin to the local certificate server. */
async function startWithSns(overrides: Record<string, string> = {}): Promise<FastifyInstance> {
  const realFetch = globalThis.fetch;
  globalThis.fetch = (input, init) => {
    const url = input instanceof Request ? input.url : String(input);
    if (!url.startsWith(SNS_ORIGIN)) return Promise.reject(new Error(`test refused a request to ${url}`));
    return realFetch(`http://127.0.0.1:${snsPort}/${url.slice(SNS_ORIGIN.length)}`, init);
  };
  try {
    return await t.startApp(overrides);
  } finally {
    globalThis.fetch = realFetch;
  }
}

/** A POST to `target`'s SES route as SNS sends it; an object is sent as its JSON. */
const postToSes = (target: FastifyInstance, body: unknown) =>
  target.inject({
    method: 'POST',
    url: '/v1/feedback/ses',
    headers: { 'content-type': 'text/plain; charset=UTF-8' },
    payload: typeof body === 'string' ? body : JSON.stringify(body),
  });

/** A POST to `target`'s SendGrid route, signed with the test key unless `signature` is given. */
const postToSendGrid = (
  target: FastifyInstance,
  body: string,
  timestamp = String(Math.floor(Date.now() / 1000)),
  signature?: string,
) =>
  target.inject({
    method: 'POST',
    url: '/v1/feedback/sendgrid',
    headers: {
      'content-type': 'application/json',
      'x-twilio-email-event-webhook-timestamp': timestamp,
      'x-twilio-email-event-webhook-signature': signature ?? signSendGridWebhook(body, timestamp, sendGrid.privateKey),
    },
    payload: body,
  });

/** An SES complaint for `recipient` as SNS delivers it, signed, stamped now. */
const complaint = (recipient: string, messageId: string = randomUUID()) =>
  signedSnsMessage(
    {
      MessageId: messageId,
      Timestamp: new Date().toISOString(),
      Message: sesNotification({ type: 'Complaint', recipients: [recipient] }),
    },
    sns.privateKey,
  );

async function suppression(address: string) {
  const [row] = await t.query<{ reason: string; source: string; send_id: string | null; campaign_id: string | null }>(
    'SELECT reason, source, send_id, campaign_id FROM suppressions WHERE email_norm = $1',
    [address],
  );
  return row;
}

async function suppressedEvents(count: number): Promise<AddressSuppressed[]> {
  const messages = await readTopic(t.kafka, topicName('suppressions', t.prefix), (m) => m.length >= count);
  for (const message of messages) {
    // No address anywhere in the record: ids on this topic cannot hold an at-sign, and hashes are hex.
    expect((message.value as Buffer).toString('latin1')).not.toContain('@');
    expect(message.key).not.toContain('@');
  }
  return messages.map((m) => {
    const event = eventCodec.decode(m.value as Buffer) as AddressSuppressed;
    expect(m.key).toBe(event.emailHash);
    return event;
  });
}

beforeAll(async () => {
  snsServer = createServer((request, response) => {
    certificateFetches.push(request.url ?? '');
    // A made-up certificate name: SNS answers 404, after a round trip across the internet.
    if (request.url?.includes('-made-up-')) setTimeout(() => response.writeHead(404).end(), 200);
    else if (request.url?.endsWith('.pem')) response.writeHead(200).end(sns.certificatePem);
    else response.writeHead(404).end();
  });
  await new Promise<void>((resolve) => snsServer.listen(0, '127.0.0.1', resolve));
  const { port } = snsServer.address() as AddressInfo;

  t = await senderTestEnv(infra, {
    // The sink offers DSN, so every message's envelope carries its ENVID.
    sink: { dsn: true },
    env: {
      API_TOKENS_OPERATE: `${API_TOKEN},operator-only-token`,
      API_TOKENS_DSN: `${API_TOKEN},dsn-hook-token`,
      UNSUBSCRIBE_URL: 'https://mail.sender.test/v1/unsubscribe/',
      SES_SNS_TOPIC_ARNS: TEST_SNS_TOPIC_ARN,
      SENDGRID_WEBHOOK_PUBLIC_KEY: sendGrid.publicKey.export({ type: 'spki', format: 'der' }).toString('base64'),
    },
  });
  snsPort = port;
  app = await startWithSns();

  const addresses = [
    'ada@example.com',
    'bob@example.com',
    'carol@example.com',
    'dave@example.com',
    'fay@example.com',
    'eve@example.com',
    'gil@example.com',
    'lee@example.com',
    'mia@example.com',
    'ned@example.com',
  ];
  const requests = addresses.map((email) =>
    sendRequested({ campaignId: 'camp-a', candidateId: email.split('@')[0] as string, email }),
  );
  for (const request of requests) sent.set(request.email, request.sendId);
  await t.publishRequests(requests);
  await waitFor(() => t.sink.messages.length === addresses.length, {
    timeoutMs: 30_000,
    description: 'one email to each address',
  });
});

afterAll(async () => {
  await t?.cleanup();
  snsServer?.closeAllConnections();
  await new Promise((resolve) => snsServer?.close(resolve));
});

describe('one-click unsubscribe (RFC 8058)', () => {
  // The raw header line, unfolded (RFC 5322 2.2.3): a long one arrives on several lines.
  const listUnsubscribe = (address: string) =>
    (t.sink.messages.find((m) => m.to.includes(address))?.headers.get('list-unsubscribe') ?? '').replace(
      /\r?\n(?=[ \t])/g,
      '',
    );
  const pathOf = (address: string) => {
    const header = listUnsubscribe(address);
    const url = /<(https:[^>]+)>/.exec(header)?.[1] ?? '';
    return new URL(url).pathname;
  };

  it('every email carries a signed one-click URL, the POST header and the mailto', () => {
    const message = t.sink.messages.find((m) => m.to.includes('ada@example.com'));
    const header = listUnsubscribe('ada@example.com');
    expect(header).toMatch(
      /^<https:\/\/mail\.sender\.test\/v1\/unsubscribe\/v2\.[0-9a-f-]{36}\.test-1\.[0-9a-f]{32}>, <mailto:/,
    );
    // The token, not the guessable sendId alone.
    expect(pathOf('ada@example.com')).toBe(
      `/v1/unsubscribe/${testIdentifiers.unsubscribeToken(sent.get('ada@example.com') as string)}`,
    );
    expect(message?.headers.get('list-unsubscribe-post')).toBe('List-Unsubscribe=One-Click');
  });

  it('GET shows a confirmation form and suppresses nothing (link scanners fetch every URL)', async () => {
    const page = await app.inject({ url: pathOf('ada@example.com'), headers: { accept: 'text/html' } });
    expect(page.statusCode).toBe(200);
    expect(page.headers['content-type']).toMatch(/^text\/html/);
    expect(page.headers['content-security-policy']).toMatch(/frame-ancestors 'none'/);
    expect(page.headers['referrer-policy']).toBe('no-referrer');
    expect(page.body).toMatch(/<form method="post">/);
    expect(page.body).not.toMatch(/ada|example\.com|camp-a/i);
    const json = await app.inject({ url: pathOf('ada@example.com') });
    expect(json.statusCode).toBe(200);
    expect(await suppression('ada@example.com')).toBeUndefined();
  });

  it('POST List-Unsubscribe=One-Click suppresses the address, publishes one event, and a second POST is 200 too', async () => {
    const { port } = await listening();
    const url = `http://127.0.0.1:${port}${pathOf('ada@example.com')}`;
    const oneClick = () =>
      fetch(url, {
        method: 'POST',
        headers: { 'content-type': 'application/x-www-form-urlencoded' },
        body: 'List-Unsubscribe=One-Click',
      });
    const first = await oneClick();
    expect(first.status).toBe(200);
    expect(await first.json()).toEqual({ unsubscribed: true });
    expect(await suppression('ada@example.com')).toEqual({
      reason: 'unsubscribe',
      source: 'unsubscribe',
      send_id: sent.get('ada@example.com'),
      campaign_id: 'camp-a',
    });
    const again = await oneClick();
    expect(again.status).toBe(200);
    // The page's own form posts the same way and gets a page, with nothing personal on it.
    const form = await app.inject({
      method: 'POST',
      url: pathOf('ada@example.com'),
      headers: { accept: 'text/html', 'content-type': 'application/x-www-form-urlencoded' },
      payload: 'List-Unsubscribe=One-Click',
    });
    expect(form.statusCode).toBe(200);
    expect(form.body).toMatch(/You are unsubscribed/);
    expect(form.body).not.toMatch(/ada|example\.com/i);

    const events = await suppressedEvents(1);
    const ada = events.filter((e) => e.emailHash === emailHash('ada@example.com', hashKey));
    expect(ada).toHaveLength(1);
    expect(ada[0]).toMatchObject({
      reason: 'unsubscribed',
      source: 'unsubscribe',
      emailHashKeyId: hashKey.id,
      campaignId: 'camp-a',
      sendId: sent.get('ada@example.com'),
    });
  });

  it('the next send to that address, in another campaign, is suppressed; another address still gets its email', async () => {
    const before = deliveriesByRecipient(t.sink);
    const next = sendRequested({ campaignId: 'camp-b', candidateId: 'ada', email: 'ADA@Example.com' });
    const control = sendRequested({ campaignId: 'camp-b', candidateId: 'gus', email: 'gus@example.com' });
    await t.publishRequests([next, control]);
    await waitFor(
      async () =>
        (
          await t.query<{ status: string }>('SELECT status FROM sends WHERE send_id = ANY($1::uuid[])', [
            [next.sendId, control.sendId],
          ])
        ).filter((r) => r.status === 'suppressed' || r.status === 'sent').length === 2,
      { timeoutMs: 30_000, description: 'both camp-b sends settled' },
    );
    const [row] = await t.query<{ status: string }>('SELECT status FROM sends WHERE send_id = $1', [next.sendId]);
    expect(row?.status).toBe('suppressed');
    const after = deliveriesByRecipient(t.sink);
    expect(after.get('ada@example.com')).toBe(before.get('ada@example.com'));
    expect(after.get('ada@example.com')).toBe(1);
    expect(after.get('gus@example.com')).toBe(1);
  });

  it('refuses forged, bare, swapped, re-encoded, dotted, retired-key and huge tokens with a 4xx that says nothing of the send', async () => {
    const token = testIdentifiers.unsubscribeToken(sent.get('bob@example.com') as string);
    const [version, sendId, keyId, mac] = [
      token.slice(0, 2),
      sent.get('bob@example.com') as string,
      testIdentifiers.currentKeyId,
      token.split('.').at(-1) as string,
    ];
    const otherSend = sent.get('carol@example.com') as string;
    const flipped = `${mac.slice(0, 10)}${mac[10] === 'a' ? 'b' : 'a'}${mac.slice(11)}`;
    const retired = new SendIdentifiers({ current: { id: 'test-0', material: Buffer.alloc(32, 1) } });
    const otherSecret = new SendIdentifiers({ current: { id: keyId, material: Buffer.alloc(32, 2) } });
    const cases: Array<[string, string, number]> = [
      ['forged MAC', `${version}.${sendId}.${keyId}.${flipped}`, 404],
      ['bare sendId', sendId, 400],
      ['token of one send, sendId of another', `${version}.${otherSend}.${keyId}.${mac}`, 404],
      ['a valid MAC for no send', testIdentifiers.unsubscribeToken(randomUUID()), 404],
      ['a retired key', retired.unsubscribeToken(sendId), 404],
      ['another secret under the same key id', otherSecret.unsubscribeToken(sendId), 404],
      [
        'a v1 token under a retired emailHash key',
        unsubscribeToken(unsubscribeKey({ ...hashKey, id: 'test-0' }), sendId),
        404,
      ],
      ['upper case', token.toUpperCase(), 400],
      ['double percent-encoded', token.replaceAll('.', '%252E'), 400],
      ['an encoded NUL', `${encodeURIComponent(token)}%00`, 400],
      ['an encoded slash', `${version}%2F${sendId}.${keyId}.${mac}`, 400],
      ['dot segments inside', `${version}.${sendId}..${mac}`, 400],
      ['huge', 'v2.'.padEnd(3_000, 'a'), 400],
      ['longer than any path parameter', 'A'.repeat(5_000), 414],
    ];
    const notFoundBodies = new Set<string>();
    for (const [label, path, status] of cases) {
      for (const method of ['GET', 'POST'] as const) {
        const answer = await app.inject({ method, url: `/v1/unsubscribe/${path}` });
        expect(answer.statusCode, `${label} (${method})`).toBe(status);
        expect(answer.json(), label).toMatchObject({ error: expect.any(String), message: expect.any(String) });
        if (status === 404) notFoundBodies.add(answer.body);
      }
    }
    // Forged, swapped, retired and valid-but-sendless are one answer: it reveals no send.
    expect(notFoundBodies.size).toBe(1);
    // Dot segments in the path (sent byte for byte: inject would resolve them) do not reach the route.
    const { port } = await listening();
    for (const target of [`/v1/unsubscribe/../unsubscribe/${token}`, `/v1/unsubscribe/./${token}`]) {
      expect((await rawRequest(port, 'POST', target)).status, target).toBe(404);
    }
    // A person's browser gets a page for a bad link, naming only the unsubscribe address.
    const html = await app.inject({
      url: `/v1/unsubscribe/${version}.${sendId}.${keyId}.${flipped}`,
      headers: { accept: 'text/html' },
    });
    expect(html.statusCode).toBe(404);
    expect(html.body).toMatch(/mailto:unsubscribe@example\.com/);
    expect(html.body).not.toMatch(/bob/);
    expect(await suppression('bob@example.com')).toBeUndefined();
    expect(await suppression('carol@example.com')).toBeUndefined();
  });

  it('a v1 link in mail sent before signed identifiers (ADR 012) still unsubscribes, while its emailHash key is current', async () => {
    const legacy = unsubscribeToken(unsubscribeKey(hashKey), sent.get('lee@example.com') as string);
    const answer = await app.inject({
      method: 'POST',
      url: `/v1/unsubscribe/${legacy}`,
      headers: { 'content-type': 'application/x-www-form-urlencoded' },
      payload: 'List-Unsubscribe=One-Click',
    });
    expect(answer.statusCode, answer.body).toBe(200);
    expect(await suppression('lee@example.com')).toMatchObject({ reason: 'unsubscribe', source: 'unsubscribe' });
  });

  it("a percent-encoding of the token's own characters is the same URL (RFC 3986), and GET still changes nothing", async () => {
    const path = pathOf('bob@example.com').replaceAll('.', '%2E');
    const page = await app.inject({ url: path });
    expect(page.statusCode).toBe(200);
    expect(await suppression('bob@example.com')).toBeUndefined();
  });
});

describe('SES through SNS', () => {
  const post = (body: unknown) =>
    app.inject({
      method: 'POST',
      url: '/v1/feedback/ses',
      headers: { 'content-type': 'text/plain; charset=UTF-8', 'x-amz-sns-message-type': 'Notification' },
      payload: typeof body === 'string' ? body : JSON.stringify(body),
    });
  const bounce = (recipient: string, messageId: string | undefined, snsMessageId = randomUUID()) =>
    signedSnsMessage(
      {
        MessageId: snsMessageId,
        Timestamp: new Date().toISOString(),
        Message: sesNotification({
          type: 'Bounce',
          recipients: [recipient],
          ...(messageId === undefined ? {} : { messageId }),
        }),
      },
      sns.privateKey,
    );

  it('a signed hard bounce of our send suppresses the address and publishes AddressSuppressed; its retry does nothing again', async () => {
    const sendId = sent.get('bob@example.com') as string;
    const notification = bounce('Bob@Example.com', messageIdOf(sendId));
    const answer = await post(notification);
    expect(answer.statusCode, answer.body).toBe(200);
    expect(answer.json()).toMatchObject({ received: 1, new: 1, suppressed: 1 });
    expect(answer.body).not.toMatch(/bob/i);
    expect(await suppression('bob@example.com')).toEqual({
      reason: 'bounce',
      source: 'ses',
      send_id: sendId,
      campaign_id: 'camp-a',
    });
    const retry = await post(notification);
    expect(retry.json()).toMatchObject({ received: 1, new: 0, suppressed: 0 });
    expect(certificateFetches.filter((p) => p.endsWith('.pem'))).toHaveLength(1);

    const bob = emailHash('bob@example.com', hashKey);
    const events = await suppressedEvents(2);
    expect(events.filter((e) => e.emailHash === bob)).toEqual([
      expect.objectContaining({ reason: 'hard_bounce', source: 'ses', campaignId: 'camp-a', sendId }),
    ]);
  });

  it('a signed bounce whose Message-ID is ours but unsigned (mail from before ADR 012, or made up) suppresses its recipient, tied to no send, and is counted', async () => {
    const answer = await post(bounce('jan@example.com', `<${sent.get('eve@example.com') as string}@outreach.local>`));
    expect(answer.statusCode, answer.body).toBe(200);
    expect(answer.json()).toMatchObject({ new: 1, suppressed: 1, unverified: 1 });
    // The signature vouches for the recipient; the Message-ID, unverified, names nothing.
    expect(await suppression('jan@example.com')).toEqual({
      reason: 'bounce',
      source: 'ses',
      send_id: null,
      campaign_id: null,
    });
    expect(await suppression('eve@example.com')).toBeUndefined();
  });

  it('a complaint without our Message-ID suppresses its recipient, tied to no send', async () => {
    expect((await post(complaint('hal@example.com'))).statusCode).toBe(200);
    expect(await suppression('hal@example.com')).toEqual({
      reason: 'complaint',
      source: 'ses',
      send_id: null,
      campaign_id: null,
    });
  });

  it('a tampered notification, or one from a topic not on the allow-list, is refused (403) and changes nothing', async () => {
    const signed = bounce('ivy@example.com', undefined);
    const tampered = { ...signed, Message: signed.Message?.replace('ivy@example.com', 'joe@example.com') };
    const refused = await post(tampered);
    expect(refused.statusCode).toBe(403);
    expect(refused.json()).toMatchObject({ error: 'FORBIDDEN', message: 'SNS signature does not verify' });
    const foreign = signedSnsMessage(
      {
        TopicArn: 'arn:aws:sns:us-east-1:999999999999:someone-elses-topic',
        Timestamp: new Date().toISOString(),
        Message: sesNotification({ type: 'Bounce', recipients: ['ivy@example.com'] }),
      },
      sns.privateKey,
    );
    const offList = await post(foreign);
    expect(offList.statusCode).toBe(403);
    expect(offList.json().message).toMatch(/allow-list/);
    expect((await post('{"Type":')).statusCode).toBe(400);
    // A genuine notification signed in 2019, replayed: refused (SNS drops a 4xx), nothing fetched for it.
    const fetchesBefore = certificateFetches.length;
    const replay = await post(
      signedSnsMessage(
        {
          Timestamp: '2019-03-01T10:00:00.000Z',
          Message: sesNotification({ type: 'Bounce', recipients: ['ivy@example.com'] }),
        },
        sns.privateKey,
      ),
    );
    expect(replay.statusCode).toBe(403);
    expect(replay.json().message).toMatch(/older than 7200 s: a replay/);
    expect(certificateFetches.length).toBe(fetchesBefore);
    expect(await suppression('ivy@example.com')).toBeUndefined();
    expect(await suppression('joe@example.com')).toBeUndefined();
  });
});

describe('SendGrid Signed Event Webhook', () => {
  const post = (body: string, timestamp?: string, signature?: string) =>
    postToSendGrid(app, body, timestamp, signature);
  const events = (...entries: Array<Record<string, unknown>>) =>
    JSON.stringify(entries.map((e) => ({ timestamp: Math.floor(Date.now() / 1000) - 5, ...e })));

  it('a signed bounce suppresses; one byte changed or a stale timestamp is refused (403)', async () => {
    const sendId = sent.get('carol@example.com') as string;
    const body = events({
      email: 'carol@example.com',
      event: 'bounce',
      type: 'bounce',
      status: '5.1.1',
      'smtp-id': messageIdOf(sendId),
      sg_event_id: 'sg-carol-1',
    });
    const timestamp = String(Math.floor(Date.now() / 1000));
    const signature = signSendGridWebhook(body, timestamp, sendGrid.privateKey);
    const changed = body.replace('5.1.1', '5.1.2');
    expect(changed).toHaveLength(body.length);
    const tampered = await post(changed, timestamp, signature);
    expect(tampered.statusCode).toBe(403);
    const stale = String(Math.floor(Date.now() / 1000) - 3600);
    expect((await post(body, stale)).statusCode).toBe(403);
    expect(await suppression('carol@example.com')).toBeUndefined();

    const accepted = await post(body, timestamp, signature);
    expect(accepted.statusCode, accepted.body).toBe(200);
    expect(await suppression('carol@example.com')).toEqual({
      reason: 'bounce',
      source: 'sendgrid',
      send_id: sendId,
      campaign_id: 'camp-a',
    });
  });

  it('soft bounces count once per message toward the campaign auto-pause window, however often reported', async () => {
    const sendId = sent.get('fay@example.com') as string;
    const failures = async () =>
      Number(
        (
          await t.query<{ failures: string | null }>(
            "SELECT sum(failures) AS failures FROM provider_outcomes WHERE campaign_id = 'camp-a'",
          )
        )[0]?.failures ?? 0,
      );
    const before = await failures();
    const soft = (id: string) => ({
      email: 'fay@example.com',
      event: 'bounce',
      type: 'blocked',
      status: '4.2.2',
      'smtp-id': messageIdOf(sendId),
      sg_event_id: id,
    });
    expect((await post(events(soft('sg-fay-1'), soft('sg-fay-2')))).json()).toMatchObject({ softBounced: 1 });
    expect((await post(events(soft('sg-fay-3')))).json()).toMatchObject({ new: 1, softBounced: 0 });
    expect(await failures()).toBe(before + 1);
    expect(await suppression('fay@example.com')).toBeUndefined();
    const audit = await t.query<{ n: number }>(
      "SELECT count(*)::int AS n FROM feedback_events WHERE send_id = $1 AND kind = 'soft_bounce'",
      [sendId],
    );
    expect(audit[0]?.n).toBe(3);
  });
});

describe('DSNs from the bounce mailbox', () => {
  const post = (raw: string, headers: Record<string, string> = hookOnly) =>
    app.inject({
      method: 'POST',
      url: '/v1/feedback/dsn',
      headers: { 'content-type': 'message/rfc822', ...headers },
      payload: raw,
    });
  const bounceOf = (address: string, ids: { messageId?: string; envelopeId?: string }) =>
    deliveryStatusNotification({
      recipients: [{ address, action: 'failed', status: '5.1.1' }],
      ...(ids.messageId === undefined ? { returned: 'none' as const } : { originalMessageId: ids.messageId }),
      ...(ids.envelopeId === undefined ? {} : { originalEnvelopeId: ids.envelopeId }),
      reportMessageId: `<dsn-${randomUUID()}@mx.receiver.test>`,
    });
  /** The counter of unverified identifiers, as /metrics shows it. */
  const unverifiedCount = async (reason: string) => {
    const text = (await app.inject({ url: '/metrics' })).body;
    const line = text
      .split('\n')
      .find(
        (l) =>
          l.startsWith('outreach_sender_feedback_unverified_ids_total{') &&
          l.includes(`reason="${reason}"`) &&
          l.includes('source="dsn"'),
      );
    return Number(line?.split(' ').at(-1) ?? 0);
  };

  it('needs the dsn scope: the operate token alone is refused, and the hook token can do nothing an operator does', async () => {
    const dsn = bounceOf('nobody@example.com', {});
    expect((await post(dsn, {})).statusCode).toBe(401);
    const asOperator = await post(dsn, operatorOnly);
    expect(asOperator.statusCode).toBe(403);
    expect(asOperator.json().message).toMatch(/scope dsn/);
    expect((await post(dsn, hookOnly)).statusCode).toBe(200);
    const operatorThings = [
      { method: 'PUT', url: '/v1/sending', payload: { paused: true, reason: 'hook token' } },
      { method: 'POST', url: '/v1/campaigns/camp-a/pause', payload: {} },
      { method: 'DELETE', url: '/v1/suppressions/dave%40example.com' },
      { method: 'PUT', url: '/v1/suppressions/zed%40example.com', payload: { reason: 'manual' } },
      {
        method: 'POST',
        url: `/v1/sends/${sent.get('ada@example.com') as string}/resolve`,
        payload: { resolution: 'retry' },
      },
      { method: 'GET', url: '/v1/sending' },
    ] as const;
    for (const request of operatorThings) {
      const answer = await app.inject({ ...request, headers: hookOnly });
      expect(answer.statusCode, `${request.method} ${request.url}`).toBe(403);
    }
    expect((await app.inject({ url: '/v1/sending', headers: operate })).json()).toMatchObject({ paused: false });
    expect(await suppression('zed@example.com')).toBeUndefined();
  });

  it('a DSN naming our send to that recipient by its signed Message-ID suppresses it', async () => {
    const sendId = sent.get('dave@example.com') as string;
    const delivered = t.sink.messages.find((m) => m.to.includes('dave@example.com'));
    // What went out: the signed Message-ID, and the same identifier as the envelope's ENVID.
    expect(delivered?.messageId).toBe(messageIdOf(sendId));
    expect(delivered?.envelopeId).toBe(testIdentifiers.sendIdentifier(sendId));
    const answer = await post(bounceOf('dave@example.com', { messageId: delivered?.messageId as string }));
    expect(answer.statusCode, answer.body).toBe(200);
    expect(answer.json()).toMatchObject({ suppressed: 1, unverified: 0 });
    expect(await suppression('dave@example.com')).toEqual({
      reason: 'bounce',
      source: 'dsn',
      send_id: sendId,
      campaign_id: 'camp-a',
    });
  });

  it('a DSN that returns nothing of the message names our send by the ENVID the envelope carried', async () => {
    const sendId = sent.get('gil@example.com') as string;
    const envelopeId = t.sink.messages.find((m) => m.to.includes('gil@example.com'))?.envelopeId as string;
    expect(envelopeId).toMatch(new RegExp(`^${sendId}\\.test-1\\.[0-9a-f]{32}$`));
    // Some MTAs write it back in upper case.
    const answer = await post(bounceOf('gil@example.com', { envelopeId: envelopeId.toUpperCase() }));
    expect(answer.json()).toMatchObject({ suppressed: 1, unverified: 0 });
    expect(await suppression('gil@example.com')).toMatchObject({ source: 'dsn', send_id: sendId });
  });

  it("a forged DSN for someone else's send (its sendId computed, no or a wrong MAC) changes nothing and is counted", async () => {
    const victim = sent.get('eve@example.com') as string;
    const daveIdentifier = testIdentifiers.sendIdentifier(sent.get('dave@example.com') as string) as string;
    const [, , daveMac] = daveIdentifier.split('.');
    const stranger = new SendIdentifiers({ current: { id: 'test-1', material: Buffer.alloc(32, 7) } });
    const forgeries: Array<[string, { messageId?: string; envelopeId?: string }, string]> = [
      ['the bare sendId (how every Message-ID looked before)', { messageId: `<${victim}@outreach.local>` }, 'legacy'],
      ['a MAC of zeros', { messageId: `<${victim}.test-1.${'0'.repeat(32)}@outreach.local>` }, 'bad_mac'],
      ["another send's MAC", { messageId: `<${victim}.test-1.${daveMac as string}@outreach.local>` }, 'bad_mac'],
      [
        'a MAC under another secret',
        { messageId: stranger.messageId(victim, 'outreach.local', 'test-1') as string },
        'bad_mac',
      ],
      ['a key id never held', { messageId: `<${victim}.test-9.${daveMac as string}@OUTREACH.local>` }, 'unknown_key'],
      ['a forged ENVID alone', { envelopeId: `${victim}.test-1.${daveMac as string}` }, 'bad_mac'],
      ['a bare-sendId ENVID alone', { envelopeId: victim }, 'legacy'],
    ];
    const before = new Map<string, number>();
    for (const reason of ['legacy', 'bad_mac', 'unknown_key']) before.set(reason, await unverifiedCount(reason));
    for (const [label, ids] of forgeries) {
      const answer = await post(bounceOf('eve@example.com', ids));
      expect(answer.statusCode, label).toBe(200);
      expect(answer.json(), label).toMatchObject({ received: 1, new: 1, suppressed: 0, unverified: 1, ignored: 1 });
    }
    expect(await suppression('eve@example.com')).toBeUndefined();
    const counted = (reason: string) => forgeries.filter(([, , r]) => r === reason).length;
    for (const reason of ['legacy', 'bad_mac', 'unknown_key'])
      expect(await unverifiedCount(reason), reason).toBe((before.get(reason) ?? 0) + counted(reason));
    const audit = await t.query<{ decision: string; send_id: string | null }>(
      "SELECT decision, send_id::text FROM feedback_events WHERE source = 'dsn' AND email_hash = $1",
      [emailHash('eve@example.com', hashKey)],
    );
    expect(audit).toHaveLength(forgeries.length);
    expect(audit.every((row) => row.decision === 'ignore' && row.send_id === null)).toBe(true);
    // Eve is still mailed: her next step goes out.
    const next = sendRequested({
      campaignId: 'camp-a',
      candidateId: 'eve',
      email: 'eve@example.com',
      step: 'follow-up',
    });
    await t.publishRequests([next]);
    await waitFor(() => deliveriesByRecipient(t.sink).get('eve@example.com') === 2, {
      timeoutMs: 30_000,
      description: "eve's follow-up delivered",
    });
  });

  it('a DSN for an address we never sent to, even quoting our signed Message-ID, suppresses nothing', async () => {
    for (const messageId of [messageIdOf(sent.get('dave@example.com') as string), '<nope@elsewhere.test>']) {
      const answer = await post(bounceOf('kim@example.com', { messageId }));
      expect(answer.statusCode).toBe(200);
      expect(answer.json()).toMatchObject({ suppressed: 0, ignored: 1, unverified: 0 });
    }
    expect(await suppression('kim@example.com')).toBeUndefined();
    expect((await post('Subject: hello\r\n\r\nnot a report\r\n')).statusCode).toBe(422);
  });
});

describe('after an identifier key rotation (ADR 012)', () => {
  const rotated = (until: Date) => ({
    IDENTIFIER_KEY: 'test-only-rotated-identifier-key-not-a-secret-0123456789',
    IDENTIFIER_KEY_ID: 'test-2',
    IDENTIFIER_PREVIOUS_KEY: 'test-only-identifier-key-not-a-secret-0123456789abcdef',
    IDENTIFIER_PREVIOUS_KEY_ID: 'test-1',
    IDENTIFIER_PREVIOUS_KEY_UNTIL: until.toISOString(),
  });
  const dsnFor = (address: string) =>
    deliveryStatusNotification({
      recipients: [{ address, action: 'failed', status: '5.1.1' }],
      originalMessageId: messageIdOf(sent.get(address) as string),
      reportMessageId: `<dsn-${randomUUID()}@mx.receiver.test>`,
    });
  const postTo = (target: FastifyInstance, raw: string) =>
    target.inject({
      method: 'POST',
      url: '/v1/feedback/dsn',
      headers: { 'content-type': 'message/rfc822', ...hookOnly },
      payload: raw,
    });

  it('mail sent under the previous key is still honoured within its window: a DSN suppresses, an unsubscribe link works', async () => {
    const next = await t.startApp(rotated(new Date(Date.now() + 86_400_000)));
    const answer = await postTo(next, dsnFor('mia@example.com'));
    expect(answer.json()).toMatchObject({ suppressed: 1, unverified: 0 });
    expect(await suppression('mia@example.com')).toMatchObject({ source: 'dsn', send_id: sent.get('mia@example.com') });
    const link = `/v1/unsubscribe/${testIdentifiers.unsubscribeToken(sent.get('ned@example.com') as string)}`;
    expect((await next.inject({ url: link })).statusCode).toBe(200);
    // Out of the consumer group: mail the later tests send is signed under the harness's key.
    await next.close();
  });

  it('past the window the previous key verifies nothing: the DSN names no send and is counted, the link is refused', async () => {
    const next = await t.startApp(rotated(new Date(Date.now() - 1_000)));
    const answer = await postTo(next, dsnFor('ned@example.com'));
    expect(answer.json()).toMatchObject({ suppressed: 0, unverified: 1, ignored: 1 });
    expect(await suppression('ned@example.com')).toBeUndefined();
    const link = `/v1/unsubscribe/${testIdentifiers.unsubscribeToken(sent.get('ned@example.com') as string)}`;
    expect((await next.inject({ method: 'POST', url: link })).statusCode).toBe(404);
    expect(await suppression('ned@example.com')).toBeUndefined();
    await next.close();
  });
});

describe('configuration and limits', () => {
  it('with no topics and no key the provider intakes are off (404); each route purpose counts in buckets of its own', async () => {
    const limited = await t.startApp({ SES_SNS_TOPIC_ARNS: '', SENDGRID_WEBHOOK_PUBLIC_KEY: '', RATE_LIMIT_MAX: '3' });
    for (const url of ['/v1/feedback/ses', '/v1/feedback/sendgrid']) {
      const off = await limited.inject({
        method: 'POST',
        url,
        payload: '{}',
        headers: { 'content-type': 'text/plain' },
      });
      expect(off.statusCode, url).toBe(404);
      expect(off.json().message).toMatch(/not configured/);
    }
    const statuses = async (times: number, method: 'GET' | 'POST', url: string) => {
      const answers = [];
      for (let i = 0; i < times; i++) answers.push((await limited.inject({ method, url })).statusCode);
      return answers;
    };
    // A link with our MAC for a send that does not exist: a genuine link, limited on its own.
    const link = `/v1/unsubscribe/${unsubscribeToken(unsubscribeKey(hashKey), randomUUID())}`;
    expect(await statuses(4, 'GET', link)).toEqual([404, 404, 404, 429]);
    const limitedAnswer = await limited.inject({ url: link });
    expect(limitedAnswer.headers['retry-after']).toMatch(/^\d+$/);
    expect(limitedAnswer.json()).toMatchObject({ error: 'RATE_LIMITED', message: expect.stringMatching(/this link/) });
    // Its POST is another purpose; another genuine link is another bucket.
    expect(await statuses(1, 'POST', link)).toEqual([404]);
    expect(
      await statuses(1, 'GET', `/v1/unsubscribe/${unsubscribeToken(unsubscribeKey(hashKey), randomUUID())}`),
    ).toEqual([404]);
    // Made-up links count per client address, apart from the genuine ones.
    expect(await statuses(4, 'GET', '/v1/unsubscribe/v1.made-up')).toEqual([400, 400, 400, 429]);
    // The SES route's refused requests: one above, two more, then 429.
    expect(await statuses(3, 'POST', '/v1/feedback/ses')).toEqual([404, 404, 429]);
  });
});

/**
 * The attacks of issue 31 against the public routes, with a limit small enough that thousands of
 * requests are far past it: garbage at the webhooks, made-up and scanned unsubscribe links, replays,
 * bodies at and past their limits, nesting, and slow bodies (docs/attacks.md, "Rate limits",
 * "Request bodies per route", "Slow clients"). Every request comes from the one client address, as everything
 * does behind an ingress without TRUST_PROXY.
 */
describe('attacks on the public routes', () => {
  const LIMIT = 20;
  let attacked: FastifyInstance;
  const inbox = ['kim@example.com', 'lea@example.com', 'max@example.com', 'pat@example.com'];

  beforeAll(async () => {
    attacked = await startWithSns({ RATE_LIMIT_MAX: String(LIMIT) });
    const requests = inbox.map((email) =>
      sendRequested({ campaignId: 'camp-attack', candidateId: email.split('@')[0] as string, email }),
    );
    for (const request of requests) sent.set(request.email, request.sendId);
    await t.publishRequests(requests);
    await waitFor(() => inbox.every((address) => t.sink.messages.some((m) => m.to.includes(address))), {
      timeoutMs: 30_000,
      description: 'one email to each address under attack',
    });
  });

  /** `count` requests, 200 at a time, and how many got each status. */
  const flood = async (count: number, request: (i: number) => InjectOptions) => {
    const statuses: Record<number, number> = {};
    for (let i = 0; i < count; i += 200) {
      const answers = await Promise.all(
        Array.from({ length: Math.min(200, count - i) }, (_, k) => attacked.inject(request(i + k))),
      );
      for (const answer of answers) statuses[answer.statusCode] = (statuses[answer.statusCode] ?? 0) + 1;
    }
    return statuses;
  };
  const added = async (source: string) =>
    Number(
      new RegExp(`^outreach_sender_suppressions_added_total\\{[^}]*source="${source}"[^}]*\\} (\\d+)`, 'm').exec(
        (await attacked.inject({ url: '/metrics' })).body,
      )?.[1] ?? 0,
    );
  const sesPost = (body: unknown) => postToSes(attacked, body);

  it('6,000 garbage posts at the SES and SendGrid routes, then a signed SNS complaint and a SendGrid spam report are taken in', async () => {
    const forged = { ...complaint('kim@example.com'), Message: 'not what SNS signed' };
    const garbage = await flood(6_000, (i) =>
      i % 2 === 0
        ? {
            method: 'POST',
            url: '/v1/feedback/ses',
            headers: { 'content-type': 'text/plain' },
            payload: i % 4 === 0 ? '{"Type":' : JSON.stringify(forged),
          }
        : {
            method: 'POST',
            url: '/v1/feedback/sendgrid',
            headers: {
              'content-type': 'application/json',
              'x-twilio-email-event-webhook-timestamp': String(Math.floor(Date.now() / 1000)),
              'x-twilio-email-event-webhook-signature': 'MEUCIQDforgedforgedforged',
            },
            payload: '[{"email":"kim@example.com","event":"spamreport"}]',
          },
    );
    // Each route: its first LIMIT refused on their merits (400 unreadable, 403 a signature that does
    // not verify), the rest 429; never a 503, which would only make SNS retry garbage.
    const { 400: unreadable = 0, 403: unsigned = 0, 429: limited = 0, ...other } = garbage;
    expect(other).toEqual({});
    expect(unreadable + unsigned).toBe(2 * LIMIT);
    expect(limited).toBe(6_000 - 2 * LIMIT);
    const [sesBefore, sendGridBefore] = [await added('ses'), await added('sendgrid')];

    const taken = await sesPost(complaint('kim@example.com'));
    expect(taken.statusCode, taken.body).toBe(200);
    expect(taken.json()).toMatchObject({ received: 1, suppressed: 1 });
    expect(await suppression('kim@example.com')).toMatchObject({ reason: 'complaint', source: 'ses' });

    const body = JSON.stringify([
      {
        email: 'lea@example.com',
        event: 'spamreport',
        timestamp: Math.floor(Date.now() / 1000),
        sg_event_id: 'sg-lea',
      },
    ]);
    const report = await postToSendGrid(attacked, body);
    expect(report.statusCode, report.body).toBe(200);
    expect(report.json()).toMatchObject({ suppressed: 1 });
    expect(await suppression('lea@example.com')).toMatchObject({ reason: 'complaint', source: 'sendgrid' });
    // Where an operator sees it: the suppressions counter.
    expect(await added('ses')).toBe(sesBefore + 1);
    expect(await added('sendgrid')).toBe(sendGridBefore + 1);
  });

  it('6,000 made-up unsubscribe GETs and POSTs and a link scanner on the real link, then the real one-click POST unsubscribes', async () => {
    const real = `/v1/unsubscribe/${unsubscribeToken(unsubscribeKey(hashKey), sent.get('max@example.com') as string)}`;
    const madeUp = await flood(6_000, (i) => ({
      method: i % 3 === 0 ? 'POST' : 'GET',
      url: `/v1/unsubscribe/${unsubscribeToken(unsubscribeKey({ id: hashKey.id, secret: createSecretKey(Buffer.alloc(32, i % 7)) }), randomUUID())}`,
    }));
    expect(madeUp).toEqual({ 404: 2 * LIMIT, 429: 6_000 - 2 * LIMIT });
    // A scanner fetching the real link over and over uses up the page's bucket of that link only.
    const scanned = await flood(3 * LIMIT, () => ({ method: 'GET', url: real }));
    expect(scanned).toEqual({ 200: LIMIT, 429: 2 * LIMIT });
    const before = await added('unsubscribe');

    const oneClick = await attacked.inject({
      method: 'POST',
      url: real,
      headers: { 'content-type': 'application/x-www-form-urlencoded' },
      payload: 'List-Unsubscribe=One-Click',
    });
    expect(oneClick.statusCode, oneClick.body).toBe(200);
    expect(oneClick.json()).toEqual({ unsubscribed: true });
    expect(await suppression('max@example.com')).toMatchObject({ reason: 'unsubscribe', source: 'unsubscribe' });
    expect(await added('unsubscribe')).toBe(before + 1);
  });

  it('a replayed signed message uses up only its own bucket (503, which SNS retries); the next message goes through', async () => {
    const replayed = complaint('nobody-we-sent@example.com');
    const replays = await flood(LIMIT + 10, () => ({
      method: 'POST',
      url: '/v1/feedback/ses',
      headers: { 'content-type': 'text/plain' },
      payload: JSON.stringify(replayed),
    }));
    expect(replays).toEqual({ 200: LIMIT, 503: 10 });
    const next = await sesPost(complaint('nobody-else@example.com'));
    expect(next.statusCode, next.body).toBe(200);
  });

  it('made-up certificate URLs, each fetched once, cannot keep a signed message with a certificate not yet held from being taken in', async () => {
    // Anyone who knows an allowed topic can name any .pem on SNS's host: each new name costs a
    // fetch before any signature can be checked. A message signed with a certificate this replica
    // does not hold yet (after a start, or when SNS changes its certificate) needs a fetch too.
    let flooding = true;
    let made = 0;
    const attackerStatuses: Record<number, number> = {};
    const attacker = async () => {
      while (flooding) {
        const forged = signedSnsMessage(
          {
            MessageId: randomUUID(),
            Timestamp: new Date().toISOString(),
            Message: sesNotification({ type: 'Complaint', recipients: ['kim@example.com'] }),
            SigningCertURL: `${SNS_ORIGIN}SimpleNotificationService-made-up-${made++}.pem`,
          },
          sns.privateKey,
        );
        const answer = await sesPost(forged);
        attackerStatuses[answer.statusCode] = (attackerStatuses[answer.statusCode] ?? 0) + 1;
      }
    };
    const attackers = Array.from({ length: 16 }, attacker);
    try {
      await waitFor(() => made >= 32, { timeoutMs: 10_000, description: 'the flood under way' });
      const rotated = signedSnsMessage(
        {
          MessageId: randomUUID(),
          Timestamp: new Date().toISOString(),
          Message: sesNotification({ type: 'Complaint', recipients: ['rotated-cert@example.com'] }),
          SigningCertURL: `${SNS_ORIGIN}SimpleNotificationService-rotated.pem`,
        },
        sns.privateKey,
      );
      // SNS tries again a few times; give it three tries while the flood goes on.
      const tries: number[] = [];
      for (let i = 0; i < 3 && tries.at(-1) !== 200; i++) tries.push((await sesPost(rotated)).statusCode);
      expect(
        tries.at(-1),
        `the signed message's tries: ${tries.join(', ')}; the flood: ${JSON.stringify(attackerStatuses)}`,
      ).toBe(200);
      expect(await suppression('rotated-cert@example.com')).toMatchObject({ reason: 'complaint', source: 'ses' });
    } finally {
      flooding = false;
      await Promise.all(attackers);
    }
    // The flooder's own requests are refused, and limited once past its budget.
    expect(attackerStatuses[200] ?? 0).toBe(0);
  });

  it('a replayed SendGrid batch uses up one bucket however its signature is spelled (other s, padding, unused bits)', async () => {
    const timestamp = String(Math.floor(Date.now() / 1000));
    const body = JSON.stringify([
      {
        email: 'nobody-we-sent@example.com',
        event: 'spamreport',
        timestamp: Number(timestamp),
        sg_event_id: 'sg-replay',
      },
    ]);
    const spellings = sendGridSignatureSpellings(signSendGridWebhook(body, timestamp, sendGrid.privateKey));
    // 9 to 40 spellings, depending on the DER lengths of (r, s) and (r, n - s); each verifies.
    expect(spellings.length).toBeGreaterThanOrEqual(9);
    const replays = await flood(spellings.length * LIMIT, (i) => ({
      method: 'POST',
      url: '/v1/feedback/sendgrid',
      headers: {
        'content-type': 'application/json',
        'x-twilio-email-event-webhook-timestamp': timestamp,
        'x-twilio-email-event-webhook-signature': spellings[i % spellings.length] as string,
      },
      payload: body,
    }));
    expect(replays).toEqual({ 200: LIMIT, 503: (spellings.length - 1) * LIMIT });
  });

  it("the DSN hook's token is never refused because anyone posts garbage at its route", async () => {
    // The Message-ID of the email as delivered, whatever its format.
    const dsn = (address: string) =>
      deliveryStatusNotification({
        recipients: [{ address, action: 'failed', status: '5.1.1' }],
        originalMessageId: t.sink.messages.find((m) => m.to.includes(address))?.headers.get('message-id') as string,
        reportMessageId: `<dsn-${randomUUID()}@mx.receiver.test>`,
      });
    const garbage = await flood(3_000, (i) => ({
      method: 'POST',
      url: '/v1/feedback/dsn',
      headers: {
        'content-type': 'message/rfc822',
        ...(i % 2 === 0 ? {} : { authorization: `Bearer forged-${i}` }),
      },
      payload: dsn('kim@example.com'),
    }));
    expect(garbage).toEqual({ 401: LIMIT, 429: 3_000 - LIMIT });
    const hook = await attacked.inject({
      method: 'POST',
      url: '/v1/feedback/dsn',
      headers: { 'content-type': 'message/rfc822', ...hookOnly },
      payload: dsn('pat@example.com'),
    });
    expect(hook.statusCode, hook.body).toBe(200);
    expect(hook.json()).toMatchObject({ suppressed: 1 });
    expect(await suppression('pat@example.com')).toMatchObject({ reason: 'bounce', source: 'dsn' });
  });
});

/**
 * Bodies at and past their limits, nesting, and slow bodies at the SES route (docs/attacks.md,
 * "Request bodies per route", "Slow clients"), on an app of their own: the floods above used up the
 * refused-request bucket of this client address.
 */
describe('bodies and slow clients at the SES route', () => {
  let attacked: FastifyInstance;
  beforeAll(async () => {
    attacked = await startWithSns({ HTTP_REQUEST_TIMEOUT_MS: '2000' });
  });
  const sesPost = (body: unknown) => postToSes(attacked, body);

  describe('bodies', () => {
    /** A signed SES complaint whose envelope is padded with whitespace to exactly `bytes`. */
    const paddedTo = (bytes: number, recipient: string) => {
      const text = JSON.stringify(complaint(recipient));
      return `${text}${' '.repeat(bytes - Buffer.byteLength(text))}`;
    };

    it(`an SNS delivery of exactly SNS_MAX_BODY_BYTES (${SNS_MAX_BODY_BYTES}) is taken in; one byte more is 413`, async () => {
      const atLimit = await sesPost(paddedTo(SNS_MAX_BODY_BYTES, 'kim@example.com'));
      expect(atLimit.statusCode, atLimit.body).toBe(200);
      const over = await sesPost(paddedTo(SNS_MAX_BODY_BYTES + 1, 'kim@example.com'));
      expect(over.statusCode).toBe(413);
      expect(over.json()).toMatchObject({ message: expect.stringMatching(/too large/i) });
    });

    it(`a signed Message of exactly 256 KiB (${SNS_MAX_MESSAGE_BYTES} bytes) is taken in; one byte more is 400 with the reason`, async () => {
      const withMessageOf = (bytes: number, recipient: string) => {
        const notification = sesNotification({ type: 'Complaint', recipients: [recipient] });
        return signedSnsMessage(
          {
            MessageId: randomUUID(),
            Timestamp: new Date().toISOString(),
            Message: `${notification}${' '.repeat(bytes - Buffer.byteLength(notification))}`,
          },
          sns.privateKey,
        );
      };
      const atLimit = await sesPost(withMessageOf(SNS_MAX_MESSAGE_BYTES, 'ned@example.com'));
      expect(atLimit.statusCode, atLimit.body).toBe(200);
      expect(await suppression('ned@example.com')).toMatchObject({ reason: 'complaint' });
      const over = await sesPost(withMessageOf(SNS_MAX_MESSAGE_BYTES + 1, 'ola@example.com'));
      expect(over.statusCode).toBe(400);
      expect(over.json()).toMatchObject({ message: `SNS Message larger than ${SNS_MAX_MESSAGE_BYTES} bytes` });
      expect(await suppression('ola@example.com')).toBeUndefined();
    });

    it('deep nesting in the envelope, in a signed Message and in a SendGrid body is a 400 with the reason; 16 at once leave readiness answering', async () => {
      const { port } = await listeningOn(attacked);
      const levels = Math.floor((SNS_MAX_BODY_BYTES - 10) / 2);
      const deepEnvelope = `${'['.repeat(levels)}${']'.repeat(levels)}`;
      const deepMessage = signedSnsMessage(
        {
          MessageId: randomUUID(),
          Timestamp: new Date().toISOString(),
          Message: `${'['.repeat(100)}${']'.repeat(100)}`,
        },
        sns.privateKey,
      );
      const envelope = await sesPost(deepEnvelope);
      expect(envelope.statusCode).toBe(400);
      expect(envelope.json().message).toMatch(/^SNS message: JSON nested deeper than 64 levels/);
      const message = await sesPost(deepMessage);
      expect(message.statusCode).toBe(400);
      expect(message.json().message).toMatch(/^SES notification: JSON nested deeper than 64 levels/);
      const sendGridAnswer = await postToSendGrid(attacked, `[${'{"a":'.repeat(100)}1${'}'.repeat(100)}]`);
      expect(sendGridAnswer.statusCode).toBe(400);
      expect(sendGridAnswer.json().message).toMatch(/JSON nested deeper than 64 levels/);

      const started = performance.now();
      const bombs = Promise.all(
        Array.from({ length: 16 }, () =>
          fetch(`http://127.0.0.1:${port}/v1/feedback/ses`, { method: 'POST', body: deepEnvelope }),
        ),
      );
      const ready = await fetch(`http://127.0.0.1:${port}/health/ready`);
      const readyAfterMs = performance.now() - started;
      expect(ready.status).toBe(200);
      expect(readyAfterMs).toBeLessThan(1_000);
      expect(new Set((await bombs).map((b) => b.status))).toEqual(new Set([400]));
    });
  });

  it('300 slow-body connections to /v1/feedback/ses are all closed within the request timeout', async () => {
    const { port } = await listeningOn(attacked);
    const head =
      'POST /v1/feedback/ses HTTP/1.1\r\nHost: x\r\nContent-Type: text/plain\r\nContent-Length: 200000\r\n\r\n{';
    const attack = await slowClients(port, { count: 300, head, trickleMs: 500, giveUpMs: 15_000 });
    expect(attack.stillOpen).toBe(0);
    // HTTP_REQUEST_TIMEOUT_MS (2 s here) plus Node's one-second check, plus a second of slack.
    expect(Math.max(...attack.closedAfterMs)).toBeLessThan(4_000);
    expect(new Set(attack.statuses)).toEqual(new Set([408]));
    expect((await fetch(`http://127.0.0.1:${port}/health/ready`)).status).toBe(200);
  });
});

async function listeningOn(target: FastifyInstance): Promise<{ port: number }> {
  if (!target.server.listening) await target.listen({ host: '127.0.0.1', port: 0 });
  return { port: (target.server.address() as AddressInfo).port };
}

const listening = () => listeningOn(app);
