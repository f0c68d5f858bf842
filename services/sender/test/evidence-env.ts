/**
 * A sender in process for the delivery-evidence tests (delivery-evidence.int.test.ts,
 * evidence-attacks.int.test.ts): the real broker, database and SMTP test server (offering DSN, with
 * a hostility planned per transaction), the SendGrid webhook under a test key, SES through SNS with a
 * local server standing in for SNS's certificate host, and the DSN hook's token; with the reads and
 * the signed posts those tests share.
 */
import { generateKeyPairSync, randomUUID, type KeyObject } from 'node:crypto';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { eventCodec, type SendRecorded } from '@outreach/contracts';
import { readTopic, selfSignedCertificate, waitFor, type SmtpHostility } from '@outreach/testkit';
import type { FastifyInstance, LightMyRequestResponse } from 'fastify';
import { signedSnsMessage, signSendGridWebhook, TEST_SNS_TOPIC_ARN } from './fixtures/feedback-fixtures.js';
import { messageIdOf, senderTestEnv, sendRequested, type SenderTestEnv } from './harness.js';

const SNS_ORIGIN = 'https://sns.us-east-1.amazonaws.com/';
/** The DSN hook's token (scope `dsn`). */
export const DSN_HOOK_TOKEN = 'dsn-hook-token';

export interface SendRowView {
  readonly status: string;
  readonly attempts: number;
  readonly reason: string | null;
  readonly providerMessageId: string | null;
}

/** The send identifier (ENVID, and the Message-ID's local part) a send carries (ADR 012). */
export const identifierOf = (sendId: string): string => messageIdOf(sendId).slice(1).split('@')[0] as string;

export interface EvidenceEnv {
  readonly t: SenderTestEnv;
  readonly app: FastifyInstance;
  /** What the SMTP server does in transaction n (counted at MAIL FROM); it behaves in every other. */
  readonly plans: Map<number, SmtpHostility>;
  /** The key the SendGrid webhook is verified against (to sign over another body than the one sent). */
  readonly sendGridPrivateKey: KeyObject;
  rowOf(sendId: string): Promise<SendRowView | undefined>;
  /** Polls until the send is in one of `statuses`; its row then. */
  until(sendId: string, statuses: string | readonly string[], timeoutMs?: number): Promise<SendRowView>;
  /** One request to `email` in `campaignId`, the SMTP server doing `hostility` in its transaction. */
  request(
    email: string,
    campaignId: string,
    hostility?: SmtpHostility,
  ): Promise<{ sendId: string; campaignId: string }>;
  copiesTo(email: string): number;
  /** A SendGrid webhook body signed with the test key at `timestamp` (Unix seconds). */
  postSignedSendGrid(body: string, timestamp?: string): Promise<LightMyRequestResponse>;
  /** An SES notification as SNS delivers it, signed, stamped now. */
  postSes(message: string): Promise<LightMyRequestResponse>;
  /** One message from the bounce mailbox, as the hook posts it. */
  postRawDsn(payload: string | Buffer): Promise<LightMyRequestResponse>;
  /** A metric's value summed over the series whose labels include `labels`. */
  metric(name: string, labels: Record<string, string>): Promise<number>;
  /** The SendRecorded events of `sendId` on the topic, once there are at least `count`. */
  recordedFor(sendId: string, count: number): Promise<SendRecorded[]>;
  cleanup(): Promise<void>;
}

export async function startEvidenceEnv(
  infra: { kafkaBrokers: string; databaseUrl: string },
  env: Record<string, string> = {},
): Promise<EvidenceEnv> {
  const sendGrid = generateKeyPairSync('ec', { namedCurve: 'prime256v1' });
  const sns = selfSignedCertificate({ commonName: 'sns.amazonaws.com' });
  const snsServer: Server = createServer((request, response) => {
    if (request.url?.endsWith('.pem')) response.writeHead(200).end(sns.certificatePem);
    else response.writeHead(404).end();
  });
  await new Promise<void>((resolve) => snsServer.listen(0, '127.0.0.1', resolve));
  const { port } = snsServer.address() as AddressInfo;
  const plans = new Map<number, SmtpHostility>();
  const t = await senderTestEnv(infra, {
    sink: { dsn: true, hostile: (n) => plans.get(n) },
    env: {
      API_TOKENS_DSN: DSN_HOOK_TOKEN,
      SENDGRID_WEBHOOK_PUBLIC_KEY: sendGrid.publicKey.export({ type: 'spki', format: 'der' }).toString('base64'),
      // A late reply to the final dot is awaited this long after the harness's 2 s timeout.
      SMTP_FINAL_REPLY_TIMEOUT_MS: '8000',
      SMTP_DSN_SUCCESS: 'true',
      SES_SNS_TOPIC_ARNS: TEST_SNS_TOPIC_ARN,
      ...env,
    },
  });
  // The app is built while `fetch` sends SNS's origin to the local certificate server: the intake's
  // real certificate fetch and cache run, and it keeps that reference.
  const realFetch = globalThis.fetch;
  globalThis.fetch = (input, init) => {
    const url = input instanceof Request ? input.url : String(input);
    if (!url.startsWith(SNS_ORIGIN)) return Promise.reject(new Error(`test refused a request to ${url}`));
    return realFetch(`http://127.0.0.1:${port}/${url.slice(SNS_ORIGIN.length)}`, init);
  };
  let app: FastifyInstance;
  try {
    app = await t.startApp();
  } finally {
    globalThis.fetch = realFetch;
  }

  const rowOf = async (sendId: string) =>
    (
      await t.query<SendRowView>(
        `SELECT status, attempts, reason, provider_message_id AS "providerMessageId" FROM sends WHERE send_id = $1`,
        [sendId],
      )
    )[0];

  return {
    t,
    app,
    plans,
    sendGridPrivateKey: sendGrid.privateKey,
    rowOf,
    async until(sendId, statuses, timeoutMs = 20_000) {
      const wanted = typeof statuses === 'string' ? [statuses] : statuses;
      let last: SendRowView | undefined;
      await waitFor(
        async () => {
          last = await rowOf(sendId);
          return last !== undefined && wanted.includes(last.status);
        },
        { timeoutMs, description: `send ${sendId} to become ${wanted.join(' or ')}` },
      ).catch((error: unknown) => {
        throw new Error(`${String(error)}; last ${JSON.stringify(last)}`);
      });
      return last as SendRowView;
    },
    async request(email, campaignId, hostility) {
      if (hostility !== undefined) plans.set(t.sink.transactions + 1, hostility);
      const send = sendRequested({ campaignId, candidateId: email.split('@')[0] as string, email });
      await t.publishRequests([send]);
      return { sendId: send.sendId, campaignId };
    },
    copiesTo: (email) => t.sink.deliveredTo(email).length,
    postSignedSendGrid: (body, timestamp = String(Math.floor(Date.now() / 1000))) =>
      app.inject({
        method: 'POST',
        url: '/v1/feedback/sendgrid',
        headers: {
          'content-type': 'application/json',
          'x-twilio-email-event-webhook-timestamp': timestamp,
          'x-twilio-email-event-webhook-signature': signSendGridWebhook(body, timestamp, sendGrid.privateKey),
        },
        payload: body,
      }),
    postSes: (message) =>
      app.inject({
        method: 'POST',
        url: '/v1/feedback/ses',
        headers: { 'content-type': 'text/plain; charset=UTF-8' },
        payload: JSON.stringify(
          signedSnsMessage(
            { MessageId: randomUUID(), Timestamp: new Date().toISOString(), Message: message },
            sns.privateKey,
          ),
        ),
      }),
    postRawDsn: (payload) =>
      app.inject({
        method: 'POST',
        url: '/v1/feedback/dsn',
        headers: { authorization: `Bearer ${DSN_HOOK_TOKEN}`, 'content-type': 'message/rfc822' },
        payload,
      }),
    async metric(name, labels) {
      const values = (await app.metrics.getSingleMetric(name)?.get())?.values ?? [];
      return values
        .filter((v) => Object.entries(labels).every(([k, value]) => v.labels[k] === value))
        .reduce((sum, v) => sum + v.value, 0);
    },
    async recordedFor(sendId, count) {
      const mine = (messages: ReadonlyArray<{ value: Buffer | null }>) =>
        messages.map((m) => eventCodec.decode(m.value as Buffer) as SendRecorded).filter((e) => e.sendId === sendId);
      return mine(await readTopic(t.kafka, t.topic('sendRecorded'), (m) => mine(m).length >= count));
    },
    async cleanup() {
      await t.cleanup();
      snsServer.closeAllConnections();
      await new Promise((resolve) => snsServer.close(resolve));
    },
  };
}
