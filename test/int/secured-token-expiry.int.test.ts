/**
 * OAUTHBEARER tokens that expire, on a listener that ends each session with its token
 * (`connections.max.reauth.ms`, as MSK IAM and Confluent Cloud do): the secured broker's token
 * listener. The tokens come from a file, as a sidecar or a projected token would leave them, so the
 * test decides when a new one appears. What must hold, counted at the producer:
 *   - a token already expired at the start stops the start-up check at once, naming the refused token;
 *   - a token replaced shortly before it expires: every send succeeds past the old token's expiry
 *     (the client re-authenticates with the new one; kafkajs as shipped re-authenticated twice in a
 *     row once less than 10 s were left, and the broker then refused every request);
 *   - a token that expires with no new one: sends fail naming the refused token (kafkajs as shipped
 *     took the broker's refusal for a success and then failed every request with ILLEGAL_SASL_STATE),
 *     and succeed again once the file holds a fresh token; a consumer stops for good and its
 *     liveness says why, so the orchestrator restarts the process (whose start-up check then names
 *     the refused token until a fresh one is there).
 */
import { readFileSync, writeFileSync } from 'node:fs';
import {
  checkKafkaAccess,
  ConsumerRunner,
  createKafka,
  createLogger,
  EventProducer,
  kafkaSecurityFromEnv,
  roleAccessNeeds,
  StartupError,
  topicName,
  unsecuredJws,
  waitFor,
  type KafkaSecurity,
} from '@outreach/shared';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { sampleRequest, securedKafkaFixture, type SecuredKafkaFixture } from './secured-fixtures.js';

const infra = inject('securedInfra');

describe.skipIf(!infra)('OAUTHBEARER tokens that expire', () => {
  let t: SecuredKafkaFixture;
  const brokers = () => infra?.kafka.oauthBrokers ?? '';

  beforeAll(async () => {
    t = await securedKafkaFixture(infra as NonNullable<typeof infra>, ['sender']);
  });
  afterAll(async () => {
    await t?.cleanup();
  });

  /** The sender principal with its token read from `file` at each (re)authentication; `reads` sees each token read. */
  function tokenFileSecurity(file: string, reads: (token: string) => void = () => undefined): KafkaSecurity {
    return kafkaSecurityFromEnv(
      t.env('sender', 'oauth-unsecured', {
        KAFKA_OAUTH_PROVIDER: 'token-file',
        KAFKA_OAUTH_SUBJECT: '',
        KAFKA_OAUTH_TOKEN_FILE: file,
      }),
      (path) => {
        const text = readFileSync(path, 'utf8');
        if (path === file) reads(text.trim());
        return text;
      },
    );
  }

  /** One outcome record to the sender's own topic: 'ok' or the error's message. */
  const send = (producer: EventProducer) =>
    producer
      .publish([
        {
          topic: topicName('sendRecorded', t.topicPrefix),
          event: sampleRequest('c-1', 'token-expiry-test'),
        },
      ])
      .then(
        () => 'ok',
        (error: unknown) => (error as Error).message,
      );

  const producerFor = (security: KafkaSecurity) =>
    new EventProducer(createKafka({ brokers: [brokers()], clientId: 'token-expiry', security, retries: 1 }));

  /** Sends until one fails (polled, with a deadline); its error message. */
  const firstFailure = (producer: EventProducer, description: string) =>
    waitFor(
      async () => {
        const outcome = await send(producer);
        return outcome === 'ok' ? undefined : outcome;
      },
      { timeoutMs: 30_000, intervalMs: 250, description },
    );

  /** Sends until one succeeds (polled, with a deadline). */
  const untilSent = (producer: EventProducer, description: string) =>
    waitFor(async () => (await send(producer)) === 'ok', { timeoutMs: 30_000, intervalMs: 250, description });

  it('a token that expired before the start: the start-up check stops at once, naming the refused token', async () => {
    const expired = unsecuredJws('sender', Date.now() - 120_000, 60_000);
    const started = Date.now();
    const error = await checkKafkaAccess({
      brokers: [brokers()],
      security: tokenFileSecurity(t.file('expired.jwt', `${expired}\n`)),
      needs: { ...roleAccessNeeds('sender', t.topicPrefix), groups: [`${t.groupPrefix}sender`] },
      timeoutMs: 60_000,
      clientId: 'token-expiry',
      role: 'sender',
    }).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(StartupError);
    expect(error).toMatchObject({ failure: 'authentication', exitCode: 78 });
    expect((error as Error).message).toMatch(/the broker refused the token \(invalid_token\)/);
    expect((error as Error).message).toMatch(/KAFKA_OAUTH_PROVIDER/);
    expect((error as Error).message).not.toContain(expired);
    expect(Date.now() - started).toBeLessThan(10_000);
  });

  it("a token replaced 8 s before it expires: every send succeeds past the old token's expiry", async () => {
    const file = t.file('rotated.jwt', '');
    const issuedAt = Date.now();
    const first = unsecuredJws('sender', issuedAt, 20_000);
    writeFileSync(file, `${first}\n`);
    const read = new Set<string>();
    const producer = producerFor(tokenFileSecurity(file, (token) => read.add(token)));
    const outcomes: string[] = [];
    let second: string | undefined;
    // The first token's `exp` is whole seconds: it lapses at most 1 s before issuedAt + 20 s.
    const pastExpiry = issuedAt + 23_000;
    try {
      await waitFor(
        async () => {
          if (second === undefined && Date.now() >= issuedAt + 12_000) {
            second = unsecuredJws('sender', Date.now(), 10 * 60_000);
            writeFileSync(file, `${second}\n`);
          }
          outcomes.push(await send(producer));
          return Date.now() >= pastExpiry;
        },
        { timeoutMs: 60_000, intervalMs: 250, description: "sends until the first token's expiry has passed" },
      );
    } finally {
      await producer.disconnect().catch(() => undefined);
    }
    expect(outcomes.filter((o) => o !== 'ok')).toEqual([]);
    expect(outcomes.length).toBeGreaterThan(20);
    // The broker ended the first session with its token: the client authenticated again, with the new one.
    expect(read.has(second as string)).toBe(true);
  });

  it('a token that expires with no new one: sends fail naming the refused token, and work again once a fresh one is in the file', async () => {
    const file = t.file('lapsed.jwt', `${unsecuredJws('sender', Date.now(), 8_000)}\n`);
    const producer = producerFor(tokenFileSecurity(file));
    try {
      expect(await send(producer)).toBe('ok');
      const failure = await firstFailure(producer, 'a send to fail once the token lapsed');
      expect(failure).toMatch(/the broker refused the token \(invalid_token\)/);
      expect(failure).not.toMatch(/ILLEGAL_SASL_STATE|SASL state/);

      writeFileSync(file, `${unsecuredJws('sender', Date.now(), 10 * 60_000)}\n`);
      await untilSent(producer, 'a send to succeed with the fresh token');
    } finally {
      await producer.disconnect().catch(() => undefined);
    }
  });

  it('a token provider that fails at re-authentication: sends fail naming it, never ILLEGAL_SASL_STATE, and recover with it', async () => {
    let failing = false;
    const security: KafkaSecurity = {
      ...t.security('sender', 'oauth-unsecured'),
      sasl: {
        mechanism: 'oauthbearer',
        oauthBearerProvider: async () => {
          if (failing) throw new Error('the identity provider is down');
          return { value: unsecuredJws('sender', Date.now(), 8_000) };
        },
      },
    };
    const producer = producerFor(security);
    try {
      expect(await send(producer)).toBe('ok');
      failing = true;
      const failure = await firstFailure(producer, 'a send to fail once re-authentication needs a token');
      expect(failure).toMatch(/the token provider failed: the identity provider is down/);
      expect(failure).not.toMatch(/ILLEGAL_SASL_STATE|SASL state/);
      failing = false;
      await untilSent(producer, 'a send to succeed once the provider gives tokens again');
    } finally {
      await producer.disconnect().catch(() => undefined);
    }
  });

  it('a consumer whose token expires with no new one stops for good after its retry window, and its liveness names the refused token', async () => {
    const file = t.file('consumer.jwt', `${unsecuredJws('sender', Date.now(), 8_000)}\n`);
    const runner = new ConsumerRunner({
      kafka: createKafka({
        brokers: [brokers()],
        clientId: 'token-expiry-consumer',
        security: tokenFileSecurity(file),
      }),
      groupId: `${t.groupPrefix}sender`,
      topics: [topicName('sendRequested', t.topicPrefix)],
      handler: async () => undefined,
      logger: createLogger({ name: 'token-expiry-consumer', level: 'silent' }),
      maxWaitTimeMs: 500,
      // A refused credential is retried (re-reading the file) for this long before the consumer is
      // dead: a Secret refresh in a rotation (services/sender/test/credential-rotation.int.test.ts).
      authRetryWindowMs: 3_000,
    });
    await runner.start();
    try {
      await waitFor(() => runner.joined, {
        timeoutMs: 30_000,
        description: 'the consumer to join with the fresh token',
      });
      expect(runner.liveness()).toBeUndefined();
      const reason = await waitFor(() => runner.liveness(), {
        timeoutMs: 40_000,
        intervalMs: 250,
        description: 'the consumer to report itself dead once its token lapsed',
      });
      expect(reason).toMatch(
        /the brokers refused our credentials for \d+ s .*the broker refused the token \(invalid_token\)/,
      );
    } finally {
      await runner.stop().catch(() => undefined);
    }
  });
});
