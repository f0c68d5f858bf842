/**
 * OAUTHBEARER token providers for kafkajs, which asks for a token at every (re)authentication and
 * leaves caching to us. Each provider keeps its token until 80% of its lifetime has passed (what
 * Kafka's own Java login does), and concurrent connections share one request for a new one.
 *
 *   oidc         OAuth 2 client credentials (RFC 6749 §4.4) at any OIDC provider's token endpoint
 *   aws-msk-iam  AWS's signer (aws-msk-iam-sasl-signer-js): a presigned kafka-cluster:Connect request
 *                from the default AWS credential chain (IRSA, ECS, instance profile, environment)
 *   token-file   a token something else keeps fresh (a sidecar, a projected service-account token)
 *   unsecured    an unsigned JWS (`alg: none`), which Kafka's default validator accepts: test brokers only
 *
 * Errors never include the client secret or a token: an OAuthTokenError names the endpoint, the
 * HTTP status and the OAuth `error` code.
 */
import { readFileSync } from 'node:fs';
import { readBoundedBody } from '../bounded-body.js';

export interface OAuthBearerToken {
  readonly value: string;
  readonly extensions?: Record<string, string>;
}
export type OAuthBearerProvider = () => Promise<OAuthBearerToken>;

export class OAuthTokenError extends Error {
  override readonly name = 'OAuthTokenError';
  constructor(
    message: string,
    /** A refusal (bad credentials, unknown client): asking again will not help. */
    readonly definitive: boolean,
  ) {
    super(message);
  }
}

interface Cached {
  readonly token: OAuthBearerToken;
  /** When to fetch a new one (80% of the lifetime). */
  readonly refreshAt: number;
  /** When it expires: until then it stands in for a new one that could not be fetched. */
  readonly expiresAt: number;
}

/**
 * Caches what `fetchToken` returns until its refresh time; one fetch at a time. A refresh that fails
 * while the token in hand has not expired gives that token (an identity provider down for a moment
 * at a refresh costs nothing); the next call tries again.
 */
function caching(
  fetchToken: () => Promise<{ value: string; expiresAt: number }>,
  extensions: Record<string, string> | undefined,
  now: () => number,
): OAuthBearerProvider {
  let cached: Cached | undefined;
  let inflight: Promise<OAuthBearerToken> | undefined;
  return () => {
    if (cached && now() < cached.refreshAt) return Promise.resolve(cached.token);
    inflight ??= fetchToken()
      .then(
        ({ value, expiresAt }) => {
          const issuedAt = now();
          const token = extensions ? { value, extensions } : { value };
          cached = { token, refreshAt: issuedAt + Math.max(0, (expiresAt - issuedAt) * 0.8), expiresAt };
          return token;
        },
        (error: unknown) => {
          if (cached && now() < cached.expiresAt) return cached.token;
          throw error;
        },
      )
      .finally(() => {
        inflight = undefined;
      });
    return inflight;
  };
}

export interface OidcClientCredentialsOptions {
  readonly tokenEndpoint: string;
  readonly clientId: string;
  readonly clientSecret: string;
  /** The id and secret now, as one set (read again from their files); clientId and clientSecret otherwise. */
  readonly credentials?: () => { readonly clientId: string; readonly clientSecret: string };
  readonly scope?: string;
  readonly audience?: string;
  readonly extensions?: Record<string, string>;
  readonly timeoutMs?: number;
  readonly now?: () => number;
}

/**
 * Client credentials with HTTP Basic authentication of the client (client_secret_basic, which RFC
 * 6749 §2.3.1 says every server supports), form-encoded as §2.3.1 asks.
 */
export function oidcClientCredentialsProvider(options: OidcClientCredentialsOptions): OAuthBearerProvider {
  const now = options.now ?? Date.now;
  const endpoint = new URL(options.tokenEndpoint);
  const shownEndpoint = `${endpoint.origin}${endpoint.pathname}`;
  return caching(
    async () => {
      // One set per request: the files may have been rotated since the last one.
      const { clientId, clientSecret } = options.credentials?.() ?? options;
      const basic = Buffer.from(`${encodeURIComponent(clientId)}:${encodeURIComponent(clientSecret)}`).toString(
        'base64',
      );
      const body = new URLSearchParams({ grant_type: 'client_credentials' });
      if (options.scope) body.set('scope', options.scope);
      if (options.audience) body.set('audience', options.audience);
      let response: Response;
      try {
        response = await fetch(endpoint, {
          method: 'POST',
          headers: {
            authorization: `Basic ${basic}`,
            'content-type': 'application/x-www-form-urlencoded',
            accept: 'application/json',
          },
          body,
          signal: AbortSignal.timeout(options.timeoutMs ?? 10_000),
        });
      } catch (error) {
        throw new OAuthTokenError(
          `the OAuth token endpoint ${shownEndpoint} did not answer: ${(error as Error).message}`,
          false,
        );
      }
      const text = await boundedText(response, MAX_TOKEN_RESPONSE_BYTES);
      let json: Record<string, unknown> = {};
      try {
        json = JSON.parse(text) as Record<string, unknown>;
      } catch {
        // Reported below by what is missing.
      }
      if (!response.ok) {
        const code = typeof json.error === 'string' ? ` ${json.error.slice(0, 100)}` : '';
        throw new OAuthTokenError(
          `the OAuth token endpoint ${shownEndpoint} refused the client credentials of "${clientId}": HTTP ${response.status}${code}`,
          response.status >= 400 && response.status < 500 && response.status !== 408 && response.status !== 429,
        );
      }
      if (typeof json.access_token !== 'string' || json.access_token === '') {
        throw new OAuthTokenError(`the OAuth token endpoint ${shownEndpoint} answered without an access_token`, true);
      }
      const expiresIn = typeof json.expires_in === 'number' ? json.expires_in : Number(json.expires_in);
      const expiresAt =
        Number.isFinite(expiresIn) && expiresIn > 0 ? now() + expiresIn * 1000 : jwtExpiry(json.access_token, now);
      return { value: json.access_token, expiresAt };
    },
    options.extensions,
    now,
  );
}

/** A token's `exp` if it is a JWT; five minutes otherwise, so an opaque token without expires_in is refreshed. */
function jwtExpiry(token: string, now: () => number): number {
  try {
    const payload = JSON.parse(Buffer.from(token.split('.')[1] ?? '', 'base64url').toString('utf8')) as {
      exp?: unknown;
    };
    if (typeof payload.exp === 'number') return payload.exp * 1000;
  } catch {
    // Not a JWT.
  }
  return now() + 5 * 60_000;
}

export interface AwsCredentials {
  readonly accessKeyId: string;
  readonly secretAccessKey: string;
  readonly sessionToken?: string;
}

/**
 * MSK IAM through AWS's signer library. It is imported on first use: it brings the AWS SDK's
 * credential chain, which no other configuration needs to load.
 */
export function awsMskIamTokenProvider(options: {
  readonly region: string;
  /** Instead of the default AWS credential chain (tests, or credentials from elsewhere). */
  readonly credentials?: () => Promise<AwsCredentials>;
  readonly now?: () => number;
}): OAuthBearerProvider {
  const now = options.now ?? Date.now;
  return caching(
    async () => {
      const signer = await import('aws-msk-iam-sasl-signer-js');
      try {
        const { token, expiryTime } = options.credentials
          ? await signer.generateAuthTokenFromCredentialsProvider({
              region: options.region,
              awsCredentialsProvider: options.credentials,
            })
          : await signer.generateAuthToken({ region: options.region });
        return { value: token, expiresAt: expiryTime };
      } catch (error) {
        throw new OAuthTokenError(
          `could not sign an MSK IAM token in ${options.region}: ${(error as Error).message}`,
          (error as Error).name === 'CredentialsProviderError',
        );
      }
    },
    undefined,
    now,
  );
}

/** Reads the token at every authentication: whoever writes the file owns its freshness. */
export function tokenFileProvider(
  path: string,
  extensions?: Record<string, string>,
  read: (path: string) => string = (p) => readFileSync(p, 'utf8').trim(),
): OAuthBearerProvider {
  return async () => {
    const value = read(path).trim();
    return extensions ? { value, extensions } : { value };
  };
}

/**
 * An unsecured JWS (RFC 7515 with `alg: none`, an empty signature), as Kafka's
 * OAuthBearerUnsecuredJws expects: `sub` becomes the principal. Only brokers without a real token
 * validator (tests) accept it.
 */
/** A token response is a small JSON object; anything larger is refused rather than buffered. */
const MAX_TOKEN_RESPONSE_BYTES = 64 * 1024;

async function boundedText(response: Response, maxBytes: number): Promise<string> {
  const body = await readBoundedBody(response, maxBytes);
  if (body === undefined)
    throw new OAuthTokenError(`the OAuth token endpoint answered more than ${maxBytes} bytes`, false);
  return body.toString('utf8');
}

export function unsecuredJws(subject: string, nowMs: number, lifetimeMs = 60 * 60_000): string {
  const part = (value: object) => Buffer.from(JSON.stringify(value)).toString('base64url');
  const iat = Math.floor(nowMs / 1000);
  return `${part({ alg: 'none' })}.${part({ sub: subject, iat, exp: iat + Math.floor(lifetimeMs / 1000) })}.`;
}

export function unsecuredTokenProvider(
  subject: string,
  extensions?: Record<string, string>,
  now: () => number = Date.now,
): OAuthBearerProvider {
  return caching(
    async () => {
      const issuedAt = now();
      return { value: unsecuredJws(subject, issuedAt), expiresAt: issuedAt + 60 * 60_000 };
    },
    extensions,
    now,
  );
}
