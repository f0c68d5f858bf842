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
    await expectUnavailable(cache.get(certUrl()), /body over 16384 bytes/);
    mode = 'declared-oversize';
    await expectUnavailable(cache.get(certUrl()), /Content-Length over 16384 bytes/);
  });

  it('gives up on a server that stalls mid-body within the deadline', async () => {
    mode = 'stall';
    const cache = new SnsCertificateCache({ fetch: viaLocal, timeoutMs: 300 });
    const started = performance.now();
    await expectUnavailable(cache.get(certUrl()), /no answer within 300 ms/);
    expect(performance.now() - started).toBeLessThan(3_000);
  });

  it('follows no redirect, caches no failure, and refuses a body that is no certificate', async () => {
    const cache = new SnsCertificateCache({ fetch: viaLocal });
    mode = 'redirect';
    await expectUnavailable(cache.get(certUrl()), /request failed/);
    expect(seen).toEqual(['/SimpleNotificationService-0123456789abcdef0123456789abcdef.pem']);
    mode = 'not-found';
    await expectUnavailable(cache.get(certUrl()), /HTTP 404/);
    mode = 'garbage';
    await expectUnavailable(cache.get(certUrl()), /not a PEM certificate/);
    mode = 'ok';
    expect(await cache.get(certUrl())).toBe(sns.certificatePem.trim());
    expect(seen).toHaveLength(4);
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
