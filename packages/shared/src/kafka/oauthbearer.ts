/**
 * SASL OAUTHBEARER (RFC 7628, KIP-255) for kafkajs, with the half kafkajs 2.2.4 leaves out: a refused
 * token. A broker that does not accept a token (expired, wrong audience, bad signature) does not fail
 * the exchange at once; it answers the client's message with a JSON error (`{"status":
 * "invalid_token"}`) and waits for the client to acknowledge it with a single %x01 before it fails.
 * kafkajs sends nothing and takes the unread error for a success, so its next request meets a
 * broker still mid-exchange: every request on that connection fails with ILLEGAL_SASL_STATE,
 * an error that names neither the token nor its expiry, and a re-authentication with an expired
 * token leaves a running service in that state for good.
 *
 * createKafka installs this authenticator in place of the built-in one for `oauthbearer` (kafkajs
 * takes a custom `authenticationProvider` for any mechanism). It sends what kafkajs sends, reads
 * the broker's answer, and on an error acknowledges it and fails with the broker's status, as
 * KafkaJSSASLAuthenticationError, which the start-up check and the logs name as a refused token.
 */
import kafkajs, { type AuthenticationProviderArgs, type Authenticator } from 'kafkajs';
import type { OAuthBearerProvider, OAuthBearerToken } from './oauth.js';

// kafkajs' types declare its errors without the message their constructors take.
const SaslAuthenticationError = kafkajs.KafkaJSSASLAuthenticationError as unknown as new (message: string) => Error;

const SOH = '\u0001';

/** The client's first message (RFC 7628 §3.1): no authorization identity, the token, its extensions. */
export function clientInitialResponse(token: OAuthBearerToken): Buffer {
  const extensions = Object.entries(token.extensions ?? {})
    .map(([key, value]) => `${SOH}${key}=${value}`)
    .join('');
  return Buffer.from(`n,,${SOH}auth=Bearer ${token.value}${extensions}${SOH}${SOH}`, 'utf8');
}

/** kafkajs hands mechanism bytes around with the protocol's BYTES length prefix. */
function withLength(payload: Buffer): Buffer {
  const length = Buffer.alloc(4);
  length.writeInt32BE(payload.length);
  return Buffer.concat([length, payload]);
}

function withoutLength(framed: Buffer): Buffer {
  if (framed.length < 4) return Buffer.alloc(0);
  const length = framed.readInt32BE(0);
  return length <= 0 ? Buffer.alloc(0) : framed.subarray(4, 4 + length);
}

const MAX_STATUS_LENGTH = 200;

/** Kafka's default `sasl.server.max.receive.size`: a longer message is cut off by the broker, which looks like a lost connection. */
export const MAX_SASL_MESSAGE_BYTES = 512 * 1024;

/**
 * The broker's error challenge in words, or undefined when the answer is not one: RFC 7628 §3.2.2's
 * JSON object with a `status` (and `scope`, when given); nothing else of it is repeated. Printable
 * ASCII only, and bounded. Kafka answers a good token with nothing; any other answer that is not an
 * error is taken as kafkajs takes it, a success.
 */
export function errorChallengeStatus(challenge: Buffer): string | undefined {
  const clean = (text: string) => text.replace(/[^\x20-\x7e]/g, '?').slice(0, MAX_STATUS_LENGTH);
  let parsed: unknown;
  try {
    parsed = JSON.parse(challenge.toString('utf8'));
  } catch {
    return undefined;
  }
  if (typeof parsed !== 'object' || parsed === null) return undefined;
  const { status, scope } = parsed as { status?: unknown; scope?: unknown };
  if (typeof status !== 'string') return undefined;
  const named = status === '' ? 'no status' : clean(status);
  return typeof scope === 'string' && scope !== '' ? `${named}, scope ${clean(scope)}` : named;
}

/** kafkajs' `authenticationProvider` for OAUTHBEARER, asking `provider` for the token at each (re)authentication. */
export function oauthBearerAuthenticator(
  provider: OAuthBearerProvider,
): (args: AuthenticationProviderArgs) => Authenticator {
  return ({ saslAuthenticate }) => ({
    async authenticate() {
      // kafkajs has sent the handshake before it calls us: from here on, whatever goes wrong must
      // still end the exchange, or the broker stays mid-exchange and refuses every later request on
      // the connection (ILLEGAL_SASL_STATE). A message without a token ends it: the broker fails the
      // authentication and closes the connection, and the next one starts afresh.
      const abandon = async (reason: string, cause?: unknown): Promise<never> => {
        await saslAuthenticate({ request: { encode: () => withLength(Buffer.from(`n,,${SOH}${SOH}`)) } }).catch(
          () => undefined,
        );
        // The provider's own error stays reachable: explainKafkaError tells an identity provider that
        // is down (worth waiting for) from one that refused us.
        throw Object.assign(new SaslAuthenticationError(`SASL OAUTHBEARER: ${reason}`), cause ? { cause } : {});
      };
      let token: OAuthBearerToken;
      try {
        token = await provider();
      } catch (error) {
        return abandon(`the token provider failed: ${error instanceof Error ? error.message : String(error)}`, error);
      }
      if (typeof token?.value !== 'string' || token.value === '') return abandon('the token provider gave no token');
      const message = clientInitialResponse(token);
      if (message.length > MAX_SASL_MESSAGE_BYTES) {
        return abandon(
          `the token is ${token.value.length} bytes, more than a broker takes in one SASL message (sasl.server.max.receive.size, 512 KiB by default)`,
        );
      }
      let challenge: Buffer | void;
      try {
        challenge = await saslAuthenticate<Buffer>({
          request: { encode: () => withLength(message) },
          response: { decode: (raw) => withoutLength(raw), parse: (data) => data },
        });
      } catch (error) {
        // The broker failed the exchange outright (SASL_AUTHENTICATION_FAILED: a message it could not
        // read, a validator that failed, another principal on re-authentication): a refusal, as
        // kafkajs' own exchange reported it. A lost connection stays what it is, worth retrying.
        if (typeof (error as { type?: unknown }).type === 'string') {
          throw new SaslAuthenticationError(`SASL OAUTHBEARER authentication failed: ${(error as Error).message}`);
        }
        throw error;
      }
      const status = challenge ? errorChallengeStatus(challenge) : undefined;
      if (status === undefined) return;
      // RFC 7628 §3.2.2: an error. Acknowledge it (%x01) so the broker ends the exchange; it then
      // fails the authentication and closes the connection, which is what we report either way.
      await saslAuthenticate({ request: { encode: () => withLength(Buffer.from(SOH)) } }).catch(() => undefined);
      throw new SaslAuthenticationError(
        `SASL OAUTHBEARER authentication failed: the broker refused the token (${status})`,
      );
    },
  });
}
