/**
 * The OAUTHBEARER exchange's framing and its failure half (RFC 7628 §3.2.2), against a scripted
 * broker side; the real broker's answers are in test/int/secured-token-expiry.int.test.ts. And the
 * re-authentication margin of kafkajs-patches.ts.
 */
import { createRequire } from 'node:module';
import type { AuthenticationProviderArgs, Logger } from 'kafkajs';
import { describe, expect, it } from 'vitest';
import { patchKafkajsReauthentication, reauthenticationDue } from './kafkajs-patches.js';
import {
  clientInitialResponse,
  errorChallengeStatus,
  MAX_SASL_MESSAGE_BYTES,
  oauthBearerAuthenticator,
} from './oauthbearer.js';

const require = createRequire(import.meta.url);
const kafkajsRequest = require('kafkajs/src/protocol/sasl/oauthBearer/request.js') as (
  sasl: object,
  token: { value: string; extensions?: Record<string, string> },
) => Promise<{ encode(): Promise<Buffer> }>;

/** A broker side that answers each client message in turn; records what the client sent (without the length prefix). */
function scripted(answers: Array<Buffer | Error>) {
  const sent: Buffer[] = [];
  const saslAuthenticate = (async ({
    request,
    response,
  }: {
    request: { encode(): Buffer | Promise<Buffer> };
    response?: { decode(raw: Buffer): Buffer | Promise<Buffer>; parse(data: Buffer): unknown };
  }) => {
    const framed = await request.encode();
    expect(framed.readInt32BE(0)).toBe(framed.length - 4);
    sent.push(framed.subarray(4));
    const answer = answers.shift() ?? Buffer.alloc(0);
    if (answer instanceof Error) throw answer;
    if (!response) return undefined;
    const length = Buffer.alloc(4);
    length.writeInt32BE(answer.length);
    return response.parse(await response.decode(Buffer.concat([length, answer])));
  }) as AuthenticationProviderArgs['saslAuthenticate'];
  const args: AuthenticationProviderArgs = { host: 'b', port: 1, logger: {} as Logger, saslAuthenticate };
  return { sent, args };
}

describe('OAUTHBEARER', () => {
  it("sends the client's first message byte for byte as kafkajs does, extensions included", async () => {
    for (const token of [
      { value: 'a.b.c' },
      { value: 'x.y.', extensions: { traceId: 'abc', logicalCluster: 'lkc-1' } },
    ]) {
      const theirs = await (await kafkajsRequest({}, token)).encode();
      expect(clientInitialResponse(token)).toEqual(theirs.subarray(4));
    }
  });

  it('authenticates when the broker answers with nothing, and sends one message', async () => {
    const { sent, args } = scripted([Buffer.alloc(0)]);
    await oauthBearerAuthenticator(async () => ({ value: 'tok' }))(args).authenticate();
    expect(sent.map((b) => b.toString())).toEqual(['n,,\u0001auth=Bearer tok\u0001\u0001']);
  });

  it("acknowledges an error challenge with %x01 and fails with the broker's status, not the token", async () => {
    const { sent, args } = scripted([
      Buffer.from('{"status":"invalid_token","scope":"kafka","openid-configuration":"https://idp/x"}'),
      new Error('Authentication failed during authentication due to invalid credentials'),
    ]);
    const error = await oauthBearerAuthenticator(async () => ({ value: 'secret-token' }))(args)
      .authenticate()
      .catch((e: unknown) => e as Error);
    expect(error).toBeInstanceOf(Error);
    expect((error as Error).name).toBe('KafkaJSSASLAuthenticationError');
    expect((error as Error).message).toBe(
      'SASL OAUTHBEARER authentication failed: the broker refused the token (invalid_token, scope kafka)',
    );
    expect((error as Error).message).not.toContain('secret-token');
    expect(sent.map((b) => b.toString())).toEqual(['n,,\u0001auth=Bearer secret-token\u0001\u0001', '\u0001']);
  });

  it('ends the exchange (a message without a token) when the provider fails or gives no token, and says why', async () => {
    for (const [provider, reason] of [
      [async () => ({ value: '' }), /the token provider gave no token/],
      [async () => ({ value: undefined }), /the token provider gave no token/],
      [async () => ({ value: 42 }), /the token provider gave no token/],
      [
        async () => {
          throw new Error('the OAuth token endpoint https://idp/token answered HTTP 503');
        },
        /the token provider failed: the OAuth token endpoint https:\/\/idp\/token answered HTTP 503/,
      ],
      [async () => ({ value: 'x'.repeat(MAX_SASL_MESSAGE_BYTES) }), /more than a broker takes in one SASL message/],
    ] as const) {
      // The broker fails such a message (SASL_AUTHENTICATION_FAILED) and closes the connection.
      const { sent, args } = scripted([new Error('Authentication failed')]);
      const error = await oauthBearerAuthenticator(provider as never)(args)
        .authenticate()
        .catch((e: unknown) => e as Error);
      expect((error as Error).name).toBe('KafkaJSSASLAuthenticationError');
      expect((error as Error).message).toMatch(reason);
      // Without it the broker would stay mid-exchange and refuse every later request (ILLEGAL_SASL_STATE).
      expect(sent.map((b) => b.toString())).toEqual(['n,,\u0001\u0001']);
    }
  });

  it('reports an outright failure of the exchange as a refusal, and a lost connection as it is', async () => {
    const refused = Object.assign(new Error('Authentication failed: invalid credentials'), {
      type: 'SASL_AUTHENTICATION_FAILED',
    });
    const first = scripted([refused]);
    const error = await oauthBearerAuthenticator(async () => ({ value: 'tok' }))(first.args)
      .authenticate()
      .catch((e: unknown) => e as Error);
    expect((error as Error).name).toBe('KafkaJSSASLAuthenticationError');
    expect((error as Error).message).toBe(
      'SASL OAUTHBEARER authentication failed: Authentication failed: invalid credentials',
    );
    const lost = Object.assign(new Error('Connection closed by the server'), { name: 'KafkaJSConnectionError' });
    const second = scripted([lost]);
    await expect(oauthBearerAuthenticator(async () => ({ value: 'tok' }))(second.args).authenticate()).rejects.toBe(
      lost,
    );
  });

  it('takes an answer that is not an error as a success, as kafkajs does, and acknowledges nothing', async () => {
    for (const answer of ['ok', '[1,2]', '{"status":1}', 'null']) {
      const { sent, args } = scripted([Buffer.from(answer)]);
      await oauthBearerAuthenticator(async () => ({ value: 'tok' }))(args).authenticate();
      expect(sent, answer).toHaveLength(1);
    }
  });

  it.each([
    ['a status and a scope', Buffer.from('{"status":"invalid_token","scope":"a b"}'), 'invalid_token, scope a b'],
    ['an empty status', Buffer.from('{"status":""}'), 'no status'],
    ['control characters', Buffer.from('{"status":"bad\\u001b[31m\\nline"}'), 'bad?[31m?line'],
    ['a huge status', Buffer.from(JSON.stringify({ status: 'x'.repeat(100_000) })), 'x'.repeat(200)],
    ['not JSON', Buffer.from('<html>'), undefined],
    ['JSON without a status', Buffer.from('{"error":"x"}'), undefined],
    ['a status that is not a string', Buffer.from('{"status":{"a":1}}'), undefined],
    ['invalid UTF-8', Buffer.from([0x7b, 0xff, 0xfe, 0x7d]), undefined],
  ])('reads an error challenge with %s in bounded, printable words', (_, challenge, expected) => {
    expect(errorChallengeStatus(challenge)).toBe(expected);
  });
});

describe('re-authentication margin (kafkajs-patches.ts)', () => {
  it('is the 10 s threshold for long sessions and 15% of short ones, so a new session is never due at once', () => {
    // A one-hour session: due 10 s before its end.
    expect(reauthenticationDue(3_590_000 - 1, 3_600_000, 10_000)).toBe(false);
    expect(reauthenticationDue(3_590_000, 3_600_000, 10_000)).toBe(true);
    // A 10 s session (a token read near its expiry): kafkajs as shipped is due at 0 ms; now at 8.5 s.
    expect(reauthenticationDue(0, 10_000, 10_000)).toBe(false);
    expect(reauthenticationDue(8_499, 10_000, 10_000)).toBe(false);
    expect(reauthenticationDue(8_500, 10_000, 10_000)).toBe(true);
    // A 1 s session is still not due when it starts.
    expect(reauthenticationDue(0, 1_000, 10_000)).toBe(false);
    // No lifetime (a broker that does not end sessions): never.
    expect(reauthenticationDue(1e12, 0, 10_000)).toBe(false);
  });

  it('leaves at least 1.25 s between two authentications of a connection (brokers refuse a re-authentication within 1 s)', () => {
    // A 1.1 s session, the last before a token lapses: not due within the broker's second, due after it.
    expect(reauthenticationDue(900, 1_100, 10_000)).toBe(false);
    expect(reauthenticationDue(1_249, 1_100, 10_000)).toBe(false);
    expect(reauthenticationDue(1_250, 1_100, 10_000)).toBe(true);
  });

  it('is installed in kafkajs, in place of its own rule', () => {
    expect(patchKafkajsReauthentication()).toBe(true);
    const Connection = require('kafkajs/src/network/connection.js') as { prototype: Record<symbol, unknown> };
    const Long = require('kafkajs/src/utils/long.js') as { fromValue(value: string): unknown };
    const key = Object.getOwnPropertySymbols(Connection.prototype).find(
      (k) => k.description === 'private:Connection:shouldReauthenticate',
    ) as symbol;
    const shouldReauthenticate = Connection.prototype[key] as (this: object) => boolean;
    // Authenticated just now, with a 10 s session: kafkajs as shipped says "due" (10 s threshold).
    const connection = {
      sessionLifetime: Long.fromValue('10000'),
      authenticatedAt: process.hrtime(),
      reauthenticationThreshold: 10_000,
    };
    expect(shouldReauthenticate.call(connection)).toBe(false);
    const [seconds, nanos] = process.hrtime();
    // Authenticated 9 s ago: due (margin 1.5 s).
    expect(shouldReauthenticate.call({ ...connection, authenticatedAt: [seconds - 9, nanos] })).toBe(true);
    expect(shouldReauthenticate.call({ ...connection, sessionLifetime: Long.fromValue('0') })).toBe(false);
  });
});
