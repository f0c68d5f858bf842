/**
 * The SNS adapters against a real HTTP server on loopback standing in for sns.us-east-1.amazonaws.com:
 * the injected fetch sends requests for that origin to the local server and fails any other, so
 * every test also proves which hosts were (not) contacted. The certificate fetch's bounds (single
 * flight, cache, TTL, eviction, size, deadline, redirects) and the intake's order (allow-list and
 * URL checks before any request, signature before content) are checked by what the server saw.
 */
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { AppError } from '@outreach/shared';
import { selfSignedCertificate } from '@outreach/testkit';
import {
  sesNotification,
  signedSnsMessage,
  TEST_SNS_CERT_URL,
  TEST_SNS_TOPIC_ARN,
} from './fixtures/feedback-fixtures.js';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { SnsCertificateCache } from '../src/adapters/feedback/sns-certificates.js';
import { SnsFeedbackIntake } from '../src/adapters/feedback/sns-intake.js';

const SNS_ORIGIN = 'https://sns.us-east-1.amazonaws.com/';
const sns = selfSignedCertificate({ commonName: 'sns.amazonaws.com' });
const now = new Date('2026-01-15T10:00:05Z');

type Mode =
  'ok' | 'slow' | 'oversize' | 'declared-oversize' | 'stall' | 'redirect' | 'not-found' | 'garbage' | 'confirm-fails';
let mode: Mode = 'ok';
let server: Server;
let port: number;
const seen: string[] = [];
const contacted: string[] = [];
const stalled: ServerResponse[] = [];

function handle(request: IncomingMessage, response: ServerResponse): void {
  const path = request.url ?? '';
  seen.push(path);
  if (path.startsWith('/?Action=ConfirmSubscription')) {
    response.writeHead(mode === 'confirm-fails' ? 500 : 200, { 'content-type': 'text/xml' });
    response.end('<ConfirmSubscriptionResponse/>');
    return;
  }
  if (!path.endsWith('.pem')) {
    response.writeHead(404).end();
    return;
  }
  switch (mode) {
    case 'ok':
      response.writeHead(200, { 'content-type': 'application/x-x509-ca-cert' }).end(sns.certificatePem);
      return;
    case 'slow':
      setTimeout(() => response.writeHead(200).end(sns.certificatePem), 150);
      return;
    case 'oversize':
      // No Content-Length: chunked, so only counting the streamed bytes catches it.
      response.writeHead(200);
      for (let i = 0; i < 200; i++) response.write('A'.repeat(1024));
      response.end();
      return;
    case 'declared-oversize':
      response.writeHead(200, { 'content-length': String(10 * 1024 * 1024) });
      response.write(sns.certificatePem);
      stalled.push(response);
      return;
    case 'stall':
      response.writeHead(200);
      response.write('-----BEGIN CERTIFICATE-----\n');
      stalled.push(response);
      return;
    case 'redirect':
      response.writeHead(302, { location: '/SimpleNotificationService-elsewhere.pem' }).end();
      return;
    case 'not-found':
      response.writeHead(404).end();
      return;
    case 'garbage':
      response.writeHead(200).end('<html>not a certificate</html>');
      return;
    case 'confirm-fails':
      response.writeHead(200).end(sns.certificatePem);
      return;
  }
}

/** fetch, with SNS's origin served by the local server and every other origin refused. */
const viaLocal: typeof fetch = (input, init) => {
  const url = input instanceof Request ? input.url : String(input);
  contacted.push(url);
  if (!url.startsWith(SNS_ORIGIN)) return Promise.reject(new Error(`test refused a request to ${url}`));
  return fetch(`http://127.0.0.1:${port}/${url.slice(SNS_ORIGIN.length)}`, init);
};

beforeAll(async () => {
  server = createServer(handle);
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  port = (server.address() as AddressInfo).port;
});
afterAll(async () => {
  server.closeAllConnections();
  await new Promise((resolve) => server.close(resolve));
});
beforeEach(() => {
  mode = 'ok';
  seen.length = 0;
  contacted.length = 0;
});
afterEach(() => {
  for (const response of stalled.splice(0)) response.destroy();
});

const certUrl = (name = '0123456789abcdef0123456789abcdef') => `${SNS_ORIGIN}SimpleNotificationService-${name}.pem`;

async function expectUnavailable(promise: Promise<unknown>, message: RegExp): Promise<void> {
  const error = await promise.then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(error).toBeInstanceOf(AppError);
  expect((error as AppError).code).toBe('UNAVAILABLE');
  expect((error as AppError).message).toMatch(message);
}

describe('SnsCertificateCache', () => {
  it('fetches a certificate once for concurrent asks, then serves it from the cache', async () => {
    mode = 'slow';
    const cache = new SnsCertificateCache({ fetch: viaLocal });
    const pems = await Promise.all(Array.from({ length: 20 }, () => cache.get(certUrl())));
    expect(new Set(pems)).toEqual(new Set([sns.certificatePem.trim()]));
    expect(await cache.get(certUrl())).toBe(sns.certificatePem.trim());
    expect(seen).toHaveLength(1);
  });

  it('fetches again after the TTL, and evicts the least recently used past maxEntries', async () => {
    let clock = 0;
    const cache = new SnsCertificateCache({ fetch: viaLocal, ttlMs: 1000, maxEntries: 2, clock: () => clock });
    await cache.get(certUrl('a'));
    clock = 999;
    await cache.get(certUrl('a'));
    expect(seen).toHaveLength(1);
    clock = 1001;
    await cache.get(certUrl('a'));
    expect(seen).toHaveLength(2);
    await cache.get(certUrl('b'));
    await cache.get(certUrl('a'));
    await cache.get(certUrl('c'));
    expect(cache.size).toBe(2);
    await cache.get(certUrl('a'));
    expect(seen).toHaveLength(4);
    await cache.get(certUrl('b'));
    expect(seen).toHaveLength(5);
  });

  it('refuses a URL SNS would not use without any request', async () => {
    const cache = new SnsCertificateCache({ fetch: viaLocal });
    for (const url of [
      'http://sns.us-east-1.amazonaws.com/x.pem',
      'https://sns.us-east-1.amazonaws.com.evil.com/x.pem',
      'https://127.0.0.1/x.pem',
    ]) {
      await expect(cache.get(url)).rejects.toMatchObject({ code: 'FORBIDDEN' });
    }
    expect(contacted).toEqual([]);
  });

  it('stops reading a body past the byte limit, declared or streamed', async () => {
    const cache = new SnsCertificateCache({ fetch: viaLocal, maxBytes: 16 * 1024 });
    mode = 'oversize';
    await expectUnavailable(cache.get(certUrl('streamed')), /body over 16384 bytes/);
    mode = 'declared-oversize';
    await expectUnavailable(cache.get(certUrl('declared')), /Content-Length over 16384 bytes/);
  });

  it('gives up on a server that stalls mid-body within the deadline', async () => {
    mode = 'stall';
    const cache = new SnsCertificateCache({ fetch: viaLocal, timeoutMs: 300 });
    const started = performance.now();
    await expectUnavailable(cache.get(certUrl()), /no answer within 300 ms/);
    expect(performance.now() - started).toBeLessThan(3_000);
  });

  it('follows no redirect, and refuses a body that is no certificate', async () => {
    let clock = 0;
    // Each failure is remembered for a second: the clock moves past it before the next mode.
    const cache = new SnsCertificateCache({ fetch: viaLocal, failureTtlMs: 1_000, clock: () => clock });
    mode = 'redirect';
    await expectUnavailable(cache.get(certUrl()), /request failed/);
    expect(seen).toEqual(['/SimpleNotificationService-0123456789abcdef0123456789abcdef.pem']);
    clock += 1_000;
    mode = 'not-found';
    await expectUnavailable(cache.get(certUrl()), /HTTP 404/);
    clock += 1_000;
    mode = 'garbage';
    await expectUnavailable(cache.get(certUrl()), /not a PEM certificate/);
    clock += 1_000;
    mode = 'ok';
    expect(await cache.get(certUrl())).toBe(sns.certificatePem.trim());
    expect(seen).toHaveLength(4);
  });

  it('remembers a failed fetch for a short while: repeats cost no request until it passes', async () => {
    let clock = 0;
    const cache = new SnsCertificateCache({ fetch: viaLocal, failureTtlMs: 30_000, clock: () => clock });
    mode = 'not-found';
    await expectUnavailable(cache.get(certUrl()), /HTTP 404/);
    for (let i = 0; i < 50; i++)
      await expectUnavailable(cache.get(certUrl()), /HTTP 404 \(not fetched again for \d+ s\)/);
    expect(seen).toHaveLength(1);
    // The certificate answers again; within the window the failure still stands, past it one fetch.
    mode = 'ok';
    clock = 29_999;
    await expectUnavailable(cache.get(certUrl()), /not fetched again for 1 s/);
    clock = 30_000;
    expect(await cache.get(certUrl())).toBe(sns.certificatePem.trim());
    expect(seen).toHaveLength(2);
    expect(cache.failedSize).toBe(0);
  });

  it('remembers at most maxFailures failed URLs, forgetting the oldest', async () => {
    const cache = new SnsCertificateCache({ fetch: viaLocal, maxFailures: 2 });
    mode = 'not-found';
    for (const name of ['a', 'b', 'c']) await expectUnavailable(cache.get(certUrl(name)), /HTTP 404/);
    expect(cache.failedSize).toBe(2);
    await expectUnavailable(cache.get(certUrl('c')), /not fetched again/);
    await expectUnavailable(cache.get(certUrl('a')), /^SNS signing certificate fetch: HTTP 404$/);
    expect(seen).toHaveLength(4);
  });

  it('fetches at most maxConcurrentFetches URLs at once: the rest fail at once, fetching nothing', async () => {
    mode = 'slow';
    const cache = new SnsCertificateCache({ fetch: viaLocal, maxConcurrentFetches: 2 });
    const asks = ['a', 'b', 'c', 'd', 'e'].map((name) =>
      cache.get(certUrl(name)).then(
        () => 'ok',
        (error: unknown) => (error as AppError).message,
      ),
    );
    // Asks for a URL already in flight share its fetch: no extra request, no refusal.
    const shared = cache.get(certUrl('a'));
    const answers = await Promise.all(asks);
    expect(await shared).toBe(sns.certificatePem.trim());
    expect(answers.slice(0, 2)).toEqual(['ok', 'ok']);
    expect(answers.slice(2)).toEqual(Array(3).fill('SNS signing certificate fetch: 2 fetches in flight already'));
    expect(seen).toHaveLength(2);
    // Refused for being busy is not a failure of the URL: asked again, it is fetched.
    expect(await cache.get(certUrl('c'))).toBe(sns.certificatePem.trim());
    expect(seen).toHaveLength(3);
  });
});

describe('SnsFeedbackIntake', () => {
  const intake = (options: { confirmSubscriptions?: boolean } = {}) =>
    new SnsFeedbackIntake({
      topicArns: [TEST_SNS_TOPIC_ARN],
      certificates: new SnsCertificateCache({ fetch: viaLocal }),
      fetch: viaLocal,
      ...options,
    });
  const bounce = sesNotification({ type: 'Bounce', recipients: ['Ada@Example.com'], messageId: '<send-1@mail.test>' });
  const body = (fields: Record<string, unknown> = {}) =>
    JSON.stringify({ ...signedSnsMessage({ Message: bounce }, sns.privateKey), ...fields });

  it('turns a signed SES bounce into feedback, fetching the certificate once', async () => {
    const receiver = intake();
    const result = await receiver.receive(body(), now);
    expect(result).toMatchObject({
      kind: 'feedback',
      topicArn: TEST_SNS_TOPIC_ARN,
      ignored: 0,
      events: [
        {
          kind: 'hard_bounce',
          source: 'ses',
          recipient: 'ada@example.com',
          messageId: 'send-1@mail.test',
          diagnostic: '5.1.1',
        },
      ],
    });
    await receiver.receive(Buffer.from(body()), now);
    expect(contacted).toEqual([TEST_SNS_CERT_URL]);
  });

  it('refuses a replay (a signed Timestamp outside the window, 2019 or just past it) without fetching anything', async () => {
    const window = { maxAgeMs: 60 * 60_000, maxFutureMs: 5 * 60_000 };
    const receiver = new SnsFeedbackIntake({
      topicArns: [TEST_SNS_TOPIC_ARN],
      certificates: new SnsCertificateCache({ fetch: viaLocal }),
      fetch: viaLocal,
      timeWindow: window,
    });
    const signedAt = (timestamp: string) =>
      JSON.stringify(signedSnsMessage({ Message: bounce, Timestamp: timestamp }, sns.privateKey));
    for (const timestamp of [
      '2019-03-01T10:00:00.000Z',
      new Date(now.getTime() - window.maxAgeMs - 1).toISOString(),
      new Date(now.getTime() + window.maxFutureMs + 1_000).toISOString(),
    ])
      expect((await receiver.receive(signedAt(timestamp), now)).kind, timestamp).toBe('refused');
    expect(await receiver.receive(signedAt('not a time'), now)).toMatchObject({ kind: 'invalid' });
    expect(contacted).toEqual([]);
    // Inside the window it is verified as before: one fetch, and its content read.
    const fresh = await receiver.receive(
      signedAt(new Date(now.getTime() - window.maxAgeMs + 1_000).toISOString()),
      now,
    );
    expect(fresh).toMatchObject({ kind: 'feedback', events: [{ kind: 'hard_bounce' }] });
    expect(contacted).toEqual([TEST_SNS_CERT_URL]);
  });

  it('a replay whose Timestamp was moved into the window fails its signature (the Timestamp is signed)', async () => {
    const old = signedSnsMessage({ Message: bounce, Timestamp: '2019-03-01T10:00:00.000Z' }, sns.privateKey);
    const moved = JSON.stringify({ ...old, Timestamp: '2026-01-15T10:00:00.000Z' });
    expect(await intake().receive(moved, now)).toEqual({ kind: 'refused', reason: 'SNS signature does not verify' });
  });

  it('refuses a tampered message after checking its signature', async () => {
    const tampered = body({ Message: bounce.replace('Ada@Example.com', 'victim@example.com') });
    expect(await intake().receive(tampered, now)).toEqual({ kind: 'refused', reason: 'SNS signature does not verify' });
  });

  it('refuses a foreign topic and a lookalike certificate URL without contacting anyone', async () => {
    const foreign = JSON.stringify(
      signedSnsMessage(
        { Message: bounce, TopicArn: 'arn:aws:sns:us-east-1:999999999999:ses-feedback' },
        sns.privateKey,
      ),
    );
    expect(await intake().receive(foreign, now)).toMatchObject({
      kind: 'refused',
      reason: 'SNS topic is not on the allow-list',
    });
    for (const url of [
      'https://sns.us-east-1.amazonaws.com.evil.com/x.pem',
      'https://amazonaws.com@evil.com/x.pem',
      'http://sns.us-east-1.amazonaws.com/x.pem',
    ]) {
      const lookalike = JSON.stringify(signedSnsMessage({ Message: bounce, SigningCertURL: url }, sns.privateKey));
      expect((await intake().receive(lookalike, now)).kind).toBe('refused');
    }
    expect(contacted).toEqual([]);
    expect(seen).toEqual([]);
  });

  it('answers an unreadable body with invalid, and a certificate it cannot fetch with a 503 error', async () => {
    expect((await intake().receive('{"Type":"Notification"}', now)).kind).toBe('invalid');
    mode = 'not-found';
    await expectUnavailable(intake().receive(body(), now), /HTTP 404/);
  });

  it('confirms a subscription by calling SNS in the topic region, never the SubscribeURL as sent', async () => {
    const confirmation = JSON.stringify(
      signedSnsMessage(
        {
          Type: 'SubscriptionConfirmation',
          Message: 'You have chosen to subscribe',
          Token: 'tok-1',
          SubscribeURL: 'https://evil.example/confirm',
        },
        sns.privateKey,
      ),
    );
    expect(await intake().receive(confirmation, now)).toEqual({ kind: 'subscribed', topicArn: TEST_SNS_TOPIC_ARN });
    const confirmed = seen.filter((path) => path.startsWith('/?'));
    expect(confirmed).toHaveLength(1);
    expect(Object.fromEntries(new URL(confirmed[0]!, SNS_ORIGIN).searchParams)).toEqual({
      Action: 'ConfirmSubscription',
      TopicArn: TEST_SNS_TOPIC_ARN,
      Token: 'tok-1',
    });
    expect(contacted.every((url) => url.startsWith(SNS_ORIGIN))).toBe(true);
  });

  it('hands the confirmation URL back when told not to confirm, and fails with 503 when SNS refuses it', async () => {
    const confirmation = JSON.stringify(
      signedSnsMessage({ Type: 'SubscriptionConfirmation', Message: 'subscribe', Token: 'tok-2' }, sns.privateKey),
    );
    const manual = await intake({ confirmSubscriptions: false }).receive(confirmation, now);
    expect(manual).toMatchObject({
      kind: 'subscription',
      confirmationUrl: expect.stringMatching(
        /^https:\/\/sns\.us-east-1\.amazonaws\.com\/\?Action=ConfirmSubscription&/,
      ),
    });
    expect(seen.filter((path) => path.startsWith('/?'))).toEqual([]);
    mode = 'confirm-fails';
    await expectUnavailable(intake().receive(confirmation, now), /HTTP 500/);
    const unsubscribed = JSON.stringify(
      signedSnsMessage({ Type: 'UnsubscribeConfirmation', Message: 'unsubscribed' }, sns.privateKey),
    );
    expect(await intake().receive(unsubscribed, now)).toEqual({ kind: 'unsubscribed', topicArn: TEST_SNS_TOPIC_ARN });
  });

  it('needs at least one allowed topic', () => {
    expect(() => new SnsFeedbackIntake({ topicArns: [], certificates: new SnsCertificateCache() })).toThrow(
      /at least one/,
    );
  });
});
