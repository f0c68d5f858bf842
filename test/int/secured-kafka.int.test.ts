/**
 * Kafka security against a real broker (the secured one `infra:up` starts: TLS, SASL, mutual TLS,
 * StandardAuthorizer with the ACLs generated from the topic declaration), not a mock:
 *   - every mechanism that runs locally connects as its own principal, and that principal may do
 *     what its role allows and nothing more (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512, mutual TLS,
 *     OAUTHBEARER with unsecured JWS, and OIDC client credentials from a local token endpoint);
 *   - unsigned tokens are taken on a listener of their own only: on the SASL_SSL listener an unsigned
 *     token is refused, even one naming the super user, and the token listener takes no password;
 *   - the sender's principal cannot produce to outreach.requested.v1; a publisher's can, and only there;
 *   - the start-up check stops at once, naming the cause, on a wrong password, an untrusted CA, a
 *     client certificate from an untrusted CA, a token endpoint that refuses us, and a missing ACL.
 */
import { randomUUID } from 'node:crypto';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import {
  checkKafkaAccess,
  createKafka,
  EventProducer,
  roleAccessNeeds,
  StartupError,
  topicName,
  type KafkaSecurity,
} from '@outreach/shared';
import { readTopic } from '@outreach/testkit';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { sampleRequest, securedKafkaFixture, type Mechanism, type SecuredKafkaFixture } from './secured-fixtures.js';

const infra = inject('securedInfra');

const request = (candidate: string) => sampleRequest(candidate);

/** The first error code kafkajs reports for a refused produce, from the error or its causes. */
async function produceError(security: KafkaSecurity, brokers: string, topic: string): Promise<string | undefined> {
  const producer = new EventProducer(
    createKafka({ brokers: [brokers], clientId: 'secured-produce', security, retries: 1 }),
  );
  try {
    await producer.publish([{ topic, event: request(`c-${randomUUID()}`) }]);
    return undefined;
  } catch (error) {
    for (
      let e: unknown = error;
      e;
      e = (e as { cause?: unknown; originalError?: unknown }).originalError ?? (e as { cause?: unknown }).cause
    ) {
      const type = (e as { type?: unknown }).type;
      if (typeof type === 'string') return type;
    }
    return /not authorized|authorization failed/i.test((error as Error).message)
      ? 'TOPIC_AUTHORIZATION_FAILED'
      : String(error);
  } finally {
    await producer.disconnect().catch(() => undefined);
  }
}

describe.skipIf(!infra)('secured Kafka', () => {
  let t: SecuredKafkaFixture;
  let tokenServer: Server | undefined;
  const brokersOf = (mechanism: Mechanism) =>
    (mechanism === 'mtls'
      ? infra?.kafka.mtlsBrokers
      : mechanism === 'oauth-unsecured'
        ? infra?.kafka.oauthBrokers
        : infra?.kafka.brokers) ?? '';

  beforeAll(async () => {
    t = await securedKafkaFixture(infra as NonNullable<typeof infra>, ['sender', 'publisher', 'planner']);
  });
  afterAll(async () => {
    tokenServer?.close();
    await t?.cleanup();
  });

  const check = (security: KafkaSecurity, brokers: string, role: 'sender' | 'planner', timeoutMs = 20_000) =>
    checkKafkaAccess({
      brokers: [brokers],
      security,
      needs: { ...roleAccessNeeds(role, t.topicPrefix), groups: [`${t.groupPrefix}${role}`] },
      timeoutMs,
      clientId: `check-${role}`,
      role,
    });

  it.each<Mechanism>(['plain', 'scram-sha-256', 'scram-sha-512', 'mtls', 'oauth-unsecured'])(
    '%s: the sender principal passes its start-up check, writes its outcomes, and is refused outreach.requested.v1',
    async (mechanism) => {
      const security = t.security('sender', mechanism);
      expect(security.principal).toBe('sender');
      await check(security, brokersOf(mechanism), 'sender');
      // Writing where the role allows: the record arrives.
      const outcomes = topicName('sendRecorded', t.topicPrefix);
      const candidate = `c-${mechanism}-${randomUUID()}`;
      const producer = new EventProducer(
        createKafka({ brokers: [brokersOf(mechanism)], clientId: 'sender', security }),
      );
      await producer.publish([{ topic: outcomes, event: request(candidate) }]);
      await producer.disconnect();
      const seen = await readTopic(t.adminKafka, outcomes, (messages) =>
        messages.some((m) => m.key?.includes(candidate)),
      );
      expect(seen.some((m) => m.key?.includes(candidate))).toBe(true);
      // The principal really is the sender (not a super user): the ingress topic is closed to it.
      expect(await produceError(security, brokersOf(mechanism), topicName('outreachRequested', t.topicPrefix))).toBe(
        'TOPIC_AUTHORIZATION_FAILED',
      );
    },
  );

  it('OIDC client credentials: the token from the endpoint logs the client in as its own principal', async () => {
    // A local token endpoint that checks the client's secret and issues an unsecured JWS for it,
    // which this broker's default validator accepts: the client-credentials flow end to end.
    const secret = `secret-${randomUUID()}`;
    let issued = 0;
    tokenServer = createServer((req, res) => {
      const expected = `Basic ${Buffer.from(`sender:${secret}`).toString('base64')}`;
      if (req.headers.authorization !== expected) {
        res.writeHead(401, { 'content-type': 'application/json' }).end('{"error":"invalid_client"}');
        return;
      }
      issued += 1;
      const part = (o: object) => Buffer.from(JSON.stringify(o)).toString('base64url');
      const now = Math.floor(Date.now() / 1000);
      const token = `${part({ alg: 'none' })}.${part({ sub: 'sender', iat: now, exp: now + 600 })}.`;
      res
        .writeHead(200, { 'content-type': 'application/json' })
        .end(JSON.stringify({ access_token: token, expires_in: 600 }));
    });
    await new Promise<void>((resolve) => tokenServer?.listen(0, '127.0.0.1', resolve));
    const endpoint = `http://127.0.0.1:${(tokenServer.address() as AddressInfo).port}/token`;
    const oidc = (clientSecret: string) => ({
      KAFKA_SASL_MECHANISM: 'oauthbearer',
      KAFKA_SASL_USERNAME: '',
      KAFKA_SASL_PASSWORD_FILE: '',
      KAFKA_OAUTH_PROVIDER: 'oidc',
      KAFKA_OAUTH_TOKEN_ENDPOINT: endpoint,
      KAFKA_OAUTH_CLIENT_ID: 'sender',
      KAFKA_OAUTH_CLIENT_SECRET_FILE: t.file(`oidc-${clientSecret.length}`, clientSecret),
    });
    const security = t.security('sender', 'plain', oidc(secret));
    await check(security, infra?.kafka.oauthBrokers ?? '', 'sender');
    expect(issued).toBeGreaterThanOrEqual(1);
    expect(
      await produceError(security, infra?.kafka.oauthBrokers ?? '', topicName('outreachRequested', t.topicPrefix)),
    ).toBe('TOPIC_AUTHORIZATION_FAILED');

    const refused = await check(
      t.security('sender', 'plain', oidc('not-the-secret')),
      infra?.kafka.oauthBrokers ?? '',
      'sender',
    ).catch((e: unknown) => e);
    expect(refused).toBeInstanceOf(StartupError);
    expect(refused).toMatchObject({ failure: 'authentication' });
    expect((refused as Error).message).toMatch(/refused the client credentials of "sender": HTTP 401 invalid_client/);
  });

  it("a publisher's principal produces to outreach.requested.v1 and nowhere else", async () => {
    const security = t.security('publisher', 'scram-sha-512');
    const brokers = infra?.kafka.brokers ?? '';
    expect(await produceError(security, brokers, topicName('outreachRequested', t.topicPrefix))).toBeUndefined();
    for (const id of ['sendRequested', 'sendRecorded', 'conversationEvents', 'assignments', 'liveness'] as const) {
      expect(await produceError(security, brokers, topicName(id, t.topicPrefix)), id).toBe(
        'TOPIC_AUTHORIZATION_FAILED',
      );
    }
  });

  describe('the start-up check stops at once, naming the cause', () => {
    const refusal = async (security: KafkaSecurity, brokers: string, role: 'sender' | 'planner' = 'sender') => {
      const started = Date.now();
      const error = await check(security, brokers, role, 60_000).catch((e: unknown) => e);
      expect(error).toBeInstanceOf(StartupError);
      // Not the 60 s deadline: a refusal is final, there is nothing to wait for.
      expect(Date.now() - started).toBeLessThan(10_000);
      return error as StartupError;
    };

    it('a wrong password', async () => {
      const wrong = `wrong-${randomUUID()}`;
      const error = await refusal(
        t.security('sender', 'scram-sha-512', { KAFKA_SASL_PASSWORD_FILE: t.file('wrong', wrong) }),
        infra?.kafka.brokers ?? '',
      );
      expect(error.failure).toBe('authentication');
      expect(error.exitCode).toBe(78);
      expect(error.message).toMatch(/the brokers refused our credentials \(SASL_SSL SCRAM-SHA-512 as "sender"\)/);
      expect(error.message).not.toContain(wrong);
    });

    it("an untrusted CA (the broker's certificate is not signed by the CA we were given)", async () => {
      const error = await refusal(
        t.security('sender', 'scram-sha-512', { KAFKA_SSL_CA_FILE: infra?.kafka.untrustedCaFile ?? '' }),
        infra?.kafka.brokers ?? '',
      );
      expect(error.failure).toBe('tls');
      expect(error.message).toMatch(
        /the broker's certificate is not signed by a CA we trust \(\w+\)\. Check KAFKA_SSL_CA_FILE/,
      );
    });

    it('a client certificate from an untrusted CA (mutual TLS)', async () => {
      const error = await refusal(
        t.security('sender', 'mtls', {
          KAFKA_SSL_CERT_FILE: infra?.kafka.rogueClient.cert ?? '',
          KAFKA_SSL_KEY_FILE: infra?.kafka.rogueClient.key ?? '',
        }),
        infra?.kafka.mtlsBrokers ?? '',
      );
      expect(error.failure).toBe('tls');
      expect(error.message).toMatch(/the broker refused the TLS handshake .*KAFKA_SSL_CERT_FILE/);
    });

    it('a missing ACL: a publisher principal where the sender role is needed', async () => {
      const error = await refusal(t.security('publisher', 'scram-sha-256'), infra?.kafka.brokers ?? '');
      expect(error.failure).toBe('authorization');
      expect(error.message).toBe(
        `kafka: principal "publisher" (SASL_SSL SCRAM-SHA-256 as "publisher") is not allowed: ` +
          `Read on topic ${t.topicPrefix}outreach.send-requested.v1; ` +
          `Write on topic ${t.topicPrefix}outreach.send-requested.v1.dlq; ` +
          `Write on topic ${t.topicPrefix}outreach.send-recorded.v1; ` +
          `Write on topic ${t.topicPrefix}outreach.suppressions.v1; ` +
          `Read on group ${t.groupPrefix}sender. Grant role sender's ACLs (npm run acls:print -- --role sender).`,
      );
    });

    it('passes for the planner, whose role also writes the ingress topic', async () => {
      await check(t.security('planner', 'scram-sha-512'), infra?.kafka.brokers ?? '', 'planner');
    });

    // The broker validates nothing in an unsigned token: whoever reaches the listener that takes one
    // is whoever the token names. So that listener is a port of its own, and this one takes none.
    it.each(['admin', 'sender'])(
      'an unsigned OAUTHBEARER token naming "%s" on the SASL_SSL (PLAIN/SCRAM) listener',
      async (subject) => {
        const forged = t.security(subject, 'oauth-unsecured');
        const error = await refusal(forged, infra?.kafka.brokers ?? '');
        expect(error.failure).toBe('configuration');
        expect(error.message).toMatch(
          new RegExp(
            `the listener does not offer SASL_SSL OAUTHBEARER .* as "${subject}" \\(UNSUPPORTED_SASL_MECHANISM\\)`,
          ),
        );
        // Not only the check: the super user's name buys no admin request either.
        const topic = `${t.topicPrefix}forged-${randomUUID()}`;
        const admin = createKafka({
          brokers: [infra?.kafka.brokers ?? ''],
          clientId: 'forged-admin',
          security: forged,
          retries: 0,
        }).admin();
        const created = await admin
          .connect()
          .then(() => admin.createTopics({ topics: [{ topic, numPartitions: 1 }] }))
          .then(
            () => 'created',
            (e: unknown) => (e as Error).message,
          );
        await admin.disconnect().catch(() => undefined);
        expect(created).not.toBe('created');
        expect(await t.admin.listTopics()).not.toContain(topic);
      },
    );

    it('SCRAM and PLAIN with the right password on the unsigned-token listener (it takes OAUTHBEARER only)', async () => {
      for (const mechanism of ['scram-sha-512', 'plain'] as const) {
        const error = await refusal(t.security('sender', mechanism), infra?.kafka.oauthBrokers ?? '');
        expect(error.failure, mechanism).toBe('configuration');
        expect(error.message, mechanism).toMatch(/\(UNSUPPORTED_SASL_MECHANISM\)/);
      }
    });
  });
});
