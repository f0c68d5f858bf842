/**
 * Credentials rotated in place, against the secured broker: a service holds one Kafka client for
 * its life, and the files behind its credentials change under it (the kubelet swaps a mounted
 * Secret when Strimzi renews a user certificate or a SCRAM password changes). The next connection
 * must use what the files hold now. To see which credentials a connection used, the files are
 * rewritten with another principal's: `sender` may not write outreach.requested.v1, `publisher` may.
 * Counted at the broker's answer to a produce.
 */
import { readFileSync, writeFileSync } from 'node:fs';
import { createKafka, EventProducer, kafkaSecurityFromEnv, topicName, type KafkaSecurity } from '@outreach/shared';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { sampleRequest, securedKafkaFixture, type SecuredKafkaFixture } from './secured-fixtures.js';

const infra = inject('securedInfra');

describe.skipIf(!infra)('Kafka credentials rotated in place', () => {
  let t: SecuredKafkaFixture;

  beforeAll(async () => {
    t = await securedKafkaFixture(infra as NonNullable<typeof infra>, ['sender', 'publisher']);
  });
  afterAll(async () => {
    await t?.cleanup();
  });

  /**
   * One produce to the ingress topic through a producer of `kafka` connected for it (new
   * connections, the same client): 'ok', or the broker's error type.
   */
  async function ingressAs(kafka: ReturnType<typeof createKafka>): Promise<string> {
    const producer = new EventProducer(kafka);
    try {
      await producer.publish([
        {
          topic: topicName('outreachRequested', t.topicPrefix),
          event: sampleRequest('c-1', 'rotation-test'),
        },
      ]);
      return 'ok';
    } catch (error) {
      for (let e: unknown = error; e; e = (e as { cause?: unknown }).cause) {
        const type = (e as { type?: unknown }).type;
        if (typeof type === 'string') return type;
      }
      return (error as Error).message;
    } finally {
      await producer.disconnect().catch(() => undefined);
    }
  }

  const client = (brokers: string, security: KafkaSecurity) =>
    createKafka({ brokers: [brokers], clientId: 'rotation', security, retries: 1 });

  it('mutual TLS: a renewed certificate and key are used by the next connection of the same client', async () => {
    const certs = infra?.kafka.clientCerts ?? {};
    const copy = (principal: string) => ({
      cert: readFileSync(certs[principal]?.cert ?? '', 'utf8'),
      key: readFileSync(certs[principal]?.key ?? '', 'utf8'),
    });
    const sender = copy('sender');
    const publisher = copy('publisher');
    const certFile = t.file('user.crt', sender.cert);
    const keyFile = t.file('user.key', sender.key);
    const problems: string[] = [];
    const security = kafkaSecurityFromEnv(
      t.env('sender', 'mtls', { KAFKA_SSL_CERT_FILE: certFile, KAFKA_SSL_KEY_FILE: keyFile }),
      undefined,
      { onReloadProblem: (variable) => problems.push(variable) },
    );
    const kafka = client(infra?.kafka.mtlsBrokers ?? '', security);
    expect(await ingressAs(kafka)).toBe('TOPIC_AUTHORIZATION_FAILED');

    writeFileSync(certFile, publisher.cert);
    writeFileSync(keyFile, publisher.key);
    expect(await ingressAs(kafka)).toBe('ok');

    // Half a renewal (a certificate that is not the key's), then a broken file: the next connections
    // keep the pair in hand, whole, and still connect as the publisher.
    writeFileSync(certFile, sender.cert);
    expect(await ingressAs(kafka)).toBe('ok');
    writeFileSync(certFile, 'not a certificate\n');
    expect(await ingressAs(kafka)).toBe('ok');
    // Reported once until a read succeeds again.
    expect(problems).toEqual(['KAFKA_SSL_CA_FILE, KAFKA_SSL_CERT_FILE, KAFKA_SSL_KEY_FILE']);
  });

  it('SCRAM: a new username and password in the files are used by the next connection of the same client', async () => {
    const passwords = infra?.kafka.passwords ?? {};
    const userFile = t.file('username', 'sender\n');
    const passwordFile = t.file('password', `${passwords.sender ?? ''}\n`);
    const security = kafkaSecurityFromEnv(
      t.env('sender', 'scram-sha-512', {
        KAFKA_SASL_USERNAME: '',
        KAFKA_SASL_USERNAME_FILE: userFile,
        KAFKA_SASL_PASSWORD_FILE: passwordFile,
      }),
    );
    const kafka = client(infra?.kafka.brokers ?? '', security);
    expect(await ingressAs(kafka)).toBe('TOPIC_AUTHORIZATION_FAILED');

    writeFileSync(userFile, 'publisher\n');
    writeFileSync(passwordFile, `${passwords.publisher ?? ''}\n`);
    expect(await ingressAs(kafka)).toBe('ok');
  });
});
