import { createServer, type IncomingMessage } from 'node:http';
import { createRequire } from 'node:module';
import type { AddressInfo } from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import { ConfigError } from '../config.js';
import { readFromTable, selfSignedCertificate } from '@outreach/testkit';
import { waitFor } from '../wait.js';
import { explainKafkaError, isCredentialRefusal } from './access.js';
import {
  awsMskIamTokenProvider,
  OAuthTokenError,
  oidcClientCredentialsProvider,
  unsecuredJws,
  unsecuredTokenProvider,
} from './oauth.js';
import { kafkaSecurityFromEnv, PLAINTEXT } from './security.js';

const cert = selfSignedCertificate({ commonName: 'sender', keyType: 'ec' });
const pem = cert.certificatePem;
const keyPem = cert.privateKey.export({ type: 'pkcs8', format: 'pem' }).toString();
const files: Record<string, string> = {
  '/s/ca.pem': pem,
  '/s/client.pem': pem,
  '/s/client.key': keyPem,
  '/s/user': 'sender\n',
  '/s/password': 's3cret-Password\n',
  '/s/empty': '\n',
  '/s/token': 'opaque-token\n',
};
const readFile = readFromTable(files);
const security = (env: Record<string, string>) => kafkaSecurityFromEnv(env, readFile);
/** What the TLS options were made of (kafkajs gets a context built from them). */
const material = (ssl: unknown) => {
  const o = ssl as Record<string, unknown>;
  return Object.fromEntries(
    (['ca', 'cert', 'key', 'passphrase'] as const).filter((k) => o[k] !== undefined).map((k) => [k, o[k]]),
  );
};
/** Environment fragments the cases build on: TLS with the test CA; OAUTHBEARER over TLS. */
const TLS_WITH_CA = { KAFKA_SSL: 'true', KAFKA_SSL_CA_FILE: '/s/ca.pem' };
const OAUTH = { KAFKA_SSL: 'true', KAFKA_SASL_MECHANISM: 'oauthbearer' };
const configError = (env: Record<string, string>) => {
  try {
    security(env);
  } catch (error) {
    expect(error).toBeInstanceOf(ConfigError);
    return (error as Error).message;
  }
  throw new Error('no ConfigError');
};

describe('Kafka security from the environment', () => {
  it('reads KAFKA_SSL as services do (true or false); any other spelling stops the start instead of meaning false', () => {
    expect(security({ KAFKA_SSL: 'true' }).ssl).toBe(true);
    expect(security({ KAFKA_SSL: 'false' }).ssl).toBeUndefined();
    expect(security({ KAFKA_SSL: '' }).ssl).toBeUndefined();
    for (const spelling of ['on', '1', 'yes', 'TRUE', ' true', 'off', '0', 'no']) {
      expect(configError({ KAFKA_SSL: spelling, KAFKA_SASL_MECHANISM: 'scram-sha-512' })).toMatch(
        /KAFKA_SSL must be true or false/,
      );
    }
  });

  it('is plaintext when nothing is set', () => {
    expect(security({})).toEqual(PLAINTEXT);
  });

  it('reads SCRAM credentials from files, with TLS and a CA, and never puts the password in the description', () => {
    const s = security({
      ...TLS_WITH_CA,
      KAFKA_SASL_MECHANISM: 'scram-sha-512',
      KAFKA_SASL_USERNAME_FILE: '/s/user',
      KAFKA_SASL_PASSWORD_FILE: '/s/password',
    });
    expect(s.sasl).toEqual({ mechanism: 'scram-sha-512', username: 'sender', password: 's3cret-Password' });
    expect(material(s.ssl)).toEqual({ ca: pem });
    expect(s.description).toBe('SASL_SSL SCRAM-SHA-512 as "sender"');
    expect(JSON.stringify({ d: s.description, p: s.principal })).not.toContain('s3cret');
  });

  it('takes mutual TLS from a certificate and key, naming the principal by the CN', () => {
    const s = security({
      ...TLS_WITH_CA,
      KAFKA_SSL_CERT_FILE: '/s/client.pem',
      KAFKA_SSL_KEY_FILE: '/s/client.key',
    });
    expect(material(s.ssl)).toEqual({ ca: pem, cert: pem, key: keyPem });
    expect(s.mutualTls).toBe(true);
    expect(s.principal).toBe('sender');
    expect(s.description).toBe('SSL (mutual TLS) as certificate "sender"');
  });

  it('uses the system trust store with TLS and no CA file', () => {
    expect(
      security({ KAFKA_SSL: 'true', KAFKA_SASL_MECHANISM: 'plain', KAFKA_SASL_USERNAME: 'u', KAFKA_SASL_PASSWORD: 'p' })
        .ssl,
    ).toBe(true);
  });

  it('refuses what would leak a secret or is ambiguous, naming the variable and never the value', () => {
    expect(
      configError({ KAFKA_SASL_MECHANISM: 'plain', KAFKA_SASL_USERNAME: 'u', KAFKA_SASL_PASSWORD: 'hunter2' }),
    ).toMatch(/KAFKA_SASL_MECHANISM=plain sends the secret in clear; set KAFKA_SSL=true/);
    const both = configError({
      KAFKA_SSL: 'true',
      KAFKA_SASL_MECHANISM: 'scram-sha-256',
      KAFKA_SASL_USERNAME: 'u',
      KAFKA_SASL_PASSWORD: 'hunter2',
      KAFKA_SASL_PASSWORD_FILE: '/s/password',
    });
    expect(both).toMatch(/set KAFKA_SASL_PASSWORD_FILE or KAFKA_SASL_PASSWORD, not both/);
    expect(both).not.toContain('hunter2');
    expect(configError({ KAFKA_SSL: 'true', KAFKA_SASL_MECHANISM: 'scram-sha-256', KAFKA_SASL_USERNAME: 'u' })).toMatch(
      /KAFKA_SASL_PASSWORD_FILE \(or KAFKA_SASL_PASSWORD\) is required/,
    );
    expect(configError({ KAFKA_SSL_CA_FILE: '/s/ca.pem' })).toMatch(/KAFKA_SSL_CA_FILE set but KAFKA_SSL is not true/);
    expect(configError({ KAFKA_SSL: 'true', KAFKA_SSL_CA_FILE: '/s/missing.pem' })).toMatch(
      /KAFKA_SSL_CA_FILE \(\/s\/missing.pem\) cannot be read \(ENOENT\)/,
    );
    expect(configError({ KAFKA_SSL: 'true', KAFKA_SSL_CA_FILE: '/s/user' })).toMatch(/is not a PEM file/);
    expect(
      configError({
        KAFKA_SSL: 'true',
        KAFKA_SASL_MECHANISM: 'plain',
        KAFKA_SASL_USERNAME: 'u',
        KAFKA_SASL_PASSWORD_FILE: '/s/empty',
      }),
    ).toMatch(/KAFKA_SASL_PASSWORD_FILE \(\/s\/empty\) is empty/);
    expect(configError({ KAFKA_SSL: 'true', KAFKA_SSL_CERT_FILE: '/s/client.pem' })).toMatch(/go together/);
    expect(configError({ KAFKA_SSL: 'true', KAFKA_SASL_MECHANISM: 'oauthbearer' })).toMatch(
      /KAFKA_OAUTH_PROVIDER .* is required/,
    );
    expect(
      configError({ KAFKA_SSL: 'true', KAFKA_SASL_MECHANISM: 'oauthbearer', KAFKA_OAUTH_PROVIDER: 'oidc' }),
    ).toMatch(/KAFKA_OAUTH_TOKEN_ENDPOINT is required/);
    expect(
      configError({ KAFKA_SSL: 'true', KAFKA_SASL_MECHANISM: 'oauthbearer', KAFKA_OAUTH_PROVIDER: 'aws-msk-iam' }),
    ).toMatch(/KAFKA_AWS_REGION \(or AWS_REGION\) is required/);
    expect(configError({ KAFKA_SASL_MECHANISM: 'gssapi' })).toMatch(/KAFKA_SASL_MECHANISM must be/);
  });

  it('builds OAUTHBEARER providers: unsecured for tests, a token file, OIDC with extensions', async () => {
    const unsecured = security({
      ...OAUTH,
      KAFKA_OAUTH_PROVIDER: 'unsecured',
      KAFKA_OAUTH_SUBJECT: 'sender',
    });
    expect(unsecured.principal).toBe('sender');
    const token = await (
      unsecured.sasl as { oauthBearerProvider: () => Promise<{ value: string }> }
    ).oauthBearerProvider();
    expect(JSON.parse(Buffer.from(token.value.split('.')[1] ?? '', 'base64url').toString())).toMatchObject({
      sub: 'sender',
    });

    const fromFile = security({
      ...OAUTH,
      KAFKA_OAUTH_PROVIDER: 'token-file',
      KAFKA_OAUTH_TOKEN_FILE: '/s/token',
      KAFKA_OAUTH_EXTENSIONS: 'logicalCluster=lkc-1,identityPoolId=pool-2',
    });
    expect(await (fromFile.sasl as { oauthBearerProvider: () => Promise<unknown> }).oauthBearerProvider()).toEqual({
      value: 'opaque-token',
      extensions: { logicalCluster: 'lkc-1', identityPoolId: 'pool-2' },
    });
    expect(
      configError({
        ...OAUTH,
        KAFKA_OAUTH_PROVIDER: 'token-file',
        KAFKA_OAUTH_TOKEN_FILE: '/s/none',
      }),
    ).toMatch(/KAFKA_OAUTH_TOKEN_FILE \(\/s\/none\) cannot be read/);
  });
});

describe('unsecured JWS tokens', () => {
  it('are refused in production: an unsigned token names any principal it likes', () => {
    const env = {
      ...OAUTH,
      KAFKA_OAUTH_PROVIDER: 'unsecured',
      KAFKA_OAUTH_SUBJECT: 'admin',
    };
    expect(() => kafkaSecurityFromEnv({ ...env, NODE_ENV: 'production' })).toThrow(/test brokers only/);
    expect(() => kafkaSecurityFromEnv({ ...env, NODE_ENV: 'development' })).not.toThrow();
  });

  it('have alg none, an empty signature, and sub, iat and exp in seconds', () => {
    const [header, payload, signature] = unsecuredJws('publisher', 1_700_000_000_500, 60_000).split('.');
    expect(JSON.parse(Buffer.from(header ?? '', 'base64url').toString())).toEqual({ alg: 'none' });
    expect(JSON.parse(Buffer.from(payload ?? '', 'base64url').toString())).toEqual({
      sub: 'publisher',
      iat: 1_700_000_000,
      exp: 1_700_000_060,
    });
    expect(signature).toBe('');
  });

  it('are cached until 80% of their lifetime', async () => {
    let now = 1_000_000;
    const provider = unsecuredTokenProvider('x', undefined, () => now);
    const first = await provider();
    now += 47 * 60_000;
    expect(await provider()).toBe(first);
    now += 2 * 60_000;
    expect((await provider()).value).not.toBe(first.value);
  });
});

describe('OIDC client credentials', () => {
  const servers: Array<{ close(): void }> = [];
  afterEach(() => servers.splice(0).forEach((s) => s.close()));

  async function tokenEndpoint(answer: (request: IncomingMessage, body: string) => { status: number; json: object }) {
    const requests: Array<{ authorization: string | undefined; body: string }> = [];
    const server = createServer((request, response) => {
      let body = '';
      request.on('data', (chunk: Buffer) => (body += chunk.toString()));
      request.on('end', () => {
        requests.push({ authorization: request.headers.authorization, body });
        const { status, json } = answer(request, body);
        response.writeHead(status, { 'content-type': 'application/json' }).end(JSON.stringify(json));
      });
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    servers.push(server);
    return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}/oauth2/token`, requests };
  }

  it('posts the client credentials with Basic auth, caches the token and shares one request', async () => {
    const endpoint = await tokenEndpoint(() => ({
      status: 200,
      json: { access_token: 'tok-1', expires_in: 300, token_type: 'Bearer' },
    }));
    let now = 0;
    const provider = oidcClientCredentialsProvider({
      tokenEndpoint: endpoint.url,
      clientId: 'svc:sender',
      clientSecret: 'sec ret',
      scope: 'kafka',
      audience: 'cluster-1',
      extensions: { logicalCluster: 'lkc-1' },
      now: () => now,
    });
    const [a, b] = await Promise.all([provider(), provider()]);
    expect(a).toEqual({ value: 'tok-1', extensions: { logicalCluster: 'lkc-1' } });
    expect(b).toBe(a);
    now = 200_000;
    await provider();
    expect(endpoint.requests).toHaveLength(1);
    now = 241_000;
    await provider();
    expect(endpoint.requests).toHaveLength(2);
    const first = endpoint.requests[0];
    expect(first?.authorization).toBe(`Basic ${Buffer.from('svc%3Asender:sec%20ret').toString('base64')}`);
    expect(Object.fromEntries(new URLSearchParams(first?.body))).toEqual({
      grant_type: 'client_credentials',
      scope: 'kafka',
      audience: 'cluster-1',
    });
  });

  it('reads a rotated client id and secret at the next token request, as one set', async () => {
    const endpoint = await tokenEndpoint(() => ({ status: 200, json: { access_token: 'tok', expires_in: 1 } }));
    const disk: Record<string, string> = { '/id': 'sender\n', '/secret': 'old-secret\n' };
    const s = kafkaSecurityFromEnv(
      {
        ...OAUTH,
        KAFKA_OAUTH_PROVIDER: 'oidc',
        KAFKA_OAUTH_TOKEN_ENDPOINT: endpoint.url,
        KAFKA_OAUTH_CLIENT_ID_FILE: '/id',
        KAFKA_OAUTH_CLIENT_SECRET_FILE: '/secret',
      },
      (path) => disk[path] ?? '',
    );
    const provider = (s.sasl as { oauthBearerProvider: () => Promise<unknown> }).oauthBearerProvider;
    await provider();
    // Half a rotation (a new id, the secret file empty): the old pair, whole.
    disk['/id'] = 'publisher\n';
    disk['/secret'] = '';
    await waitFor(async () => (await provider(), endpoint.requests.length >= 2), {
      timeoutMs: 5_000,
      description: 'a second token request',
    });
    disk['/secret'] = 'new-secret\n';
    // A 1 s token is kept for 0.8 s: the next request is a new fetch.
    await waitFor(async () => (await provider(), endpoint.requests.length >= 3), {
      timeoutMs: 5_000,
      description: 'a third token request',
    });
    expect(endpoint.requests.map((r) => Buffer.from((r.authorization ?? '').slice(6), 'base64').toString())).toEqual([
      'sender:old-secret',
      'sender:old-secret',
      'publisher:new-secret',
    ]);
  });

  it('keeps the token in hand while a refresh fails and it has not expired, then reports the failure', async () => {
    let down = false;
    const endpoint = await tokenEndpoint(() =>
      down ? { status: 503, json: {} } : { status: 200, json: { access_token: 'tok-1', expires_in: 100 } },
    );
    let now = 0;
    const provider = oidcClientCredentialsProvider({
      tokenEndpoint: endpoint.url,
      clientId: 'sender',
      clientSecret: 's',
      now: () => now,
    });
    expect((await provider()).value).toBe('tok-1');
    down = true;
    now = 90_000; // past the refresh (80 s), before the expiry (100 s)
    expect((await provider()).value).toBe('tok-1');
    expect(endpoint.requests).toHaveLength(2);
    now = 100_000;
    await expect(provider()).rejects.toThrow(/HTTP 503/);
  });

  it('reports a refusal as definitive, naming the endpoint and the OAuth error, never the secret', async () => {
    const endpoint = await tokenEndpoint(() => ({ status: 401, json: { error: 'invalid_client' } }));
    const provider = oidcClientCredentialsProvider({
      tokenEndpoint: endpoint.url,
      clientId: 'sender',
      clientSecret: 'wrong-secret',
    });
    const error = await provider().catch((e: unknown) => e);
    expect(error).toBeInstanceOf(OAuthTokenError);
    expect((error as OAuthTokenError).definitive).toBe(true);
    expect((error as Error).message).toBe(
      `the OAuth token endpoint ${endpoint.url} refused the client credentials of "sender": HTTP 401 invalid_client`,
    );
    expect((error as Error).message).not.toContain('wrong-secret');
    // The start-up check stops the start on it, rather than waiting.
    expect(explainKafkaError(error, PLAINTEXT)?.failure).toBe('authentication');
  });

  it('refuses an endpoint in clear text (the client secret goes to it), except on this host', () => {
    const env = (endpoint: string) => ({
      ...OAUTH,
      KAFKA_OAUTH_PROVIDER: 'oidc',
      KAFKA_OAUTH_TOKEN_ENDPOINT: endpoint,
      KAFKA_OAUTH_CLIENT_ID: 'sender',
      KAFKA_OAUTH_CLIENT_SECRET: 'S3CRET',
    });
    for (const endpoint of ['http://idp.corp.example/token', 'http://127.0.0.1.evil.example/token', 'ftp://idp/token'])
      expect(() => kafkaSecurityFromEnv(env(endpoint)), endpoint).toThrow(/must be an https URL/);
    expect(() => kafkaSecurityFromEnv(env('https://idp.corp.example/token'))).not.toThrow();
    expect(() => kafkaSecurityFromEnv(env('http://127.0.0.1:8080/token'))).not.toThrow();
  });

  it('refuses an answer larger than a token response, instead of buffering it', async () => {
    const { url } = await tokenEndpoint(() => ({
      status: 200,
      json: { access_token: 'x'.repeat(200_000), expires_in: 60 },
    }));
    const error = await oidcClientCredentialsProvider({ tokenEndpoint: url, clientId: 'a', clientSecret: 'b' })().catch(
      (e: unknown) => e,
    );
    expect(error).toBeInstanceOf(OAuthTokenError);
    expect((error as Error).message).toMatch(/more than 65536 bytes/);
  });

  it('counts an endpoint that does not answer as worth waiting for', async () => {
    const provider = oidcClientCredentialsProvider({
      tokenEndpoint: 'http://127.0.0.1:1/token',
      clientId: 'a',
      clientSecret: 'b',
    });
    const error = await provider().catch((e: unknown) => e);
    expect(error).toBeInstanceOf(OAuthTokenError);
    expect((error as OAuthTokenError).definitive).toBe(false);
    expect(explainKafkaError(error, PLAINTEXT)?.failure).toBe('unreachable');
  });
});

describe('AWS MSK IAM (through AWS signer library)', () => {
  it('signs a kafka-cluster:Connect request for the region with the given credentials, valid 15 minutes', async () => {
    const provider = awsMskIamTokenProvider({
      region: 'eu-west-1',
      credentials: async () => ({
        accessKeyId: 'AKIDEXAMPLE',
        secretAccessKey: 'wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY',
      }),
    });
    const { value } = await provider();
    const url = new URL(Buffer.from(value, 'base64url').toString('utf8'));
    expect(url.host).toBe('kafka.eu-west-1.amazonaws.com');
    expect(url.searchParams.get('Action')).toBe('kafka-cluster:Connect');
    expect(url.searchParams.get('X-Amz-Algorithm')).toBe('AWS4-HMAC-SHA256');
    expect(url.searchParams.get('X-Amz-Credential')).toMatch(
      /^AKIDEXAMPLE\/\d{8}\/eu-west-1\/kafka-cluster\/aws4_request$/,
    );
    expect(url.searchParams.get('X-Amz-Expires')).toBe('900');
    expect(url.searchParams.get('X-Amz-Signature')).toMatch(/^[0-9a-f]{64}$/);
    expect(value).not.toContain('wJalrXUtnFEMI');
  });
});

describe('explainKafkaError: refused credentials', () => {
  const oauth = kafkaSecurityFromEnv({
    ...OAUTH,
    KAFKA_OAUTH_PROVIDER: 'unsecured',
    KAFKA_OAUTH_SUBJECT: 'sender',
  });
  const scram = kafkaSecurityFromEnv({
    KAFKA_SSL: 'true',
    KAFKA_SASL_MECHANISM: 'scram-sha-512',
    KAFKA_SASL_USERNAME: 'sender',
    KAFKA_SASL_PASSWORD: 'pw',
  });

  it('names a bare SASL_AUTHENTICATION_FAILED from the broker, wrapped or not, as refused credentials (78 at start)', () => {
    const refused = Object.assign(new Error('Authentication failed'), { type: 'SASL_AUTHENTICATION_FAILED' });
    for (const error of [refused, Object.assign(new Error('retries exceeded'), { cause: refused })]) {
      expect(explainKafkaError(error, scram)?.failure).toBe('authentication');
    }
  });

  it('tells a token endpoint that is down from one that refused us, through the SASL failure that wraps it', () => {
    const wrapped = (definitive: boolean) =>
      Object.assign(new Error('SASL OAUTHBEARER: the token provider failed: ...'), {
        name: 'KafkaJSSASLAuthenticationError',
        cause: new OAuthTokenError('the OAuth token endpoint https://idp/token answered HTTP 503', definitive),
      });
    expect(explainKafkaError(wrapped(false), oauth)?.failure).toBe('unreachable');
    expect(explainKafkaError(wrapped(true), oauth)?.failure).toBe('authentication');
  });

  it('points an OAUTHBEARER refusal at the token, and a password refusal at the password', () => {
    const error = Object.assign(new Error('the broker refused the token (invalid_token)'), {
      name: 'KafkaJSSASLAuthenticationError',
    });
    expect(explainKafkaError(error, oauth)?.message).toMatch(/Check the token KAFKA_OAUTH_PROVIDER gives/);
    expect(explainKafkaError(error, scram)?.message).toMatch(/Check KAFKA_SASL_USERNAME and KAFKA_SASL_PASSWORD_FILE$/);
  });
});

describe('credential files are read again for each new connection (rotation without a restart)', () => {
  /** Files that the test rewrites, and the problems reported. */
  function rotating(initial: Record<string, string>) {
    const disk: Record<string, string> = { ...initial };
    const problems: Array<[string, string]> = [];
    const read = readFromTable(disk);
    const make = (env: Record<string, string>) =>
      kafkaSecurityFromEnv(env, read, { onReloadProblem: (variable, reason) => problems.push([variable, reason]) });
    return { disk, problems, make };
  }
  /** SCRAM with the username in /u and the password in /p. */
  const scramFromFiles = {
    KAFKA_SSL: 'true',
    KAFKA_SASL_MECHANISM: 'scram-sha-512',
    KAFKA_SASL_USERNAME_FILE: '/u',
    KAFKA_SASL_PASSWORD_FILE: '/p',
  };
  const other = selfSignedCertificate({ commonName: 'sender', keyType: 'ec' });
  const otherKey = other.privateKey.export({ type: 'pkcs8', format: 'pem' }).toString();

  it('SCRAM: a new password in the file is what the next authentication sends', () => {
    const { disk, problems, make } = rotating({ '/u': 'sender\n', '/p': 'old-password\n' });
    const s = make(scramFromFiles);
    const sasl = s.sasl as { username: string; password: string };
    expect(sasl.password).toBe('old-password');
    disk['/p'] = 'new-password\n';
    expect(sasl.password).toBe('new-password');
    expect(problems).toEqual([]);
    // What was read at start names the principal; the description does not change.
    expect(s.description).toBe('SASL_SSL SCRAM-SHA-512 as "sender"');
  });

  it('a file that cannot be read again keeps the value in hand, and says so once, without the value', () => {
    const { disk, problems, make } = rotating({ '/u': 'sender\n', '/p': 'old-password\n' });
    const sasl = make(scramFromFiles).sasl as { password: string };
    for (const bad of ['', 'two\nlines-XYZZY\n', '\uFEFFbom-XYZZY']) {
      disk['/p'] = bad;
      expect(sasl.password).toBe('old-password');
      expect(sasl.password).toBe('old-password');
    }
    delete disk['/p'];
    expect(sasl.password).toBe('old-password');
    // Once until a read succeeds again, however many ways it failed meanwhile.
    expect(problems).toEqual([
      ['KAFKA_SASL_USERNAME_FILE, KAFKA_SASL_PASSWORD_FILE', expect.stringMatching(/is empty|cannot be read/)],
    ]);
    expect(JSON.stringify(problems)).not.toMatch(/XYZZY|old-password/);
    // Fixed: the new value, and a later problem is reported again.
    disk['/p'] = 'new-password\n';
    expect(sasl.password).toBe('new-password');
    disk['/p'] = '';
    expect(sasl.password).toBe('new-password');
    expect(problems).toHaveLength(2);
  });

  it('a file that changes at every read is not taken: the set in hand stays until two reads agree', () => {
    let reads = 0;
    const problems: string[] = [];
    const s = kafkaSecurityFromEnv(
      {
        KAFKA_SSL: 'true',
        KAFKA_SASL_MECHANISM: 'scram-sha-512',
        KAFKA_SASL_USERNAME: 'u',
        KAFKA_SASL_PASSWORD_FILE: '/p',
      },
      () => `password-${reads++ < 1 ? 'first' : reads}\n`,
      { onReloadProblem: (_, reason) => problems.push(reason) },
    );
    expect(s.saslCredentials?.()).toEqual({ username: 'u', password: 'password-first' });
    expect(problems).toEqual([expect.stringMatching(/changed while being read/)]);
  });

  it('an inline password is the same for every connection (nothing to read again)', () => {
    const { make } = rotating({});
    const sasl = make({
      KAFKA_SSL: 'true',
      KAFKA_SASL_MECHANISM: 'plain',
      KAFKA_SASL_USERNAME: 'u',
      KAFKA_SASL_PASSWORD: 'inline',
    }).sasl as { password: string };
    expect(sasl.password).toBe('inline');
  });

  it('mutual TLS: a renewed certificate, key and CA become the context of the next connection, as one set', () => {
    const { disk, problems, make } = rotating({ '/ca': pem, '/crt': pem, '/key': keyPem });
    const s = make({
      KAFKA_SSL: 'true',
      KAFKA_SSL_CA_FILE: '/ca',
      KAFKA_SSL_CERT_FILE: '/crt',
      KAFKA_SSL_KEY_FILE: '/key',
    });
    // kafkajs' socket factory: Object.assign({ host, port }, ..., ssl): a context, and nothing else.
    const first = Object.assign({}, s.ssl) as { secureContext?: unknown };
    expect(Object.keys(first)).toEqual(['secureContext']);
    expect(material(s.ssl)).toEqual({ ca: pem, cert: pem, key: keyPem });
    // Unchanged files: the same context, not a new one per connection.
    expect((Object.assign({}, s.ssl) as { secureContext?: unknown }).secureContext).toBe(first.secureContext);

    disk['/crt'] = other.certificatePem;
    disk['/key'] = otherKey;
    disk['/ca'] = `${pem}${other.certificatePem}`;
    const renewed = (Object.assign({}, s.ssl) as { secureContext?: unknown }).secureContext;
    expect(renewed).not.toBe(first.secureContext);
    expect(material(s.ssl)).toEqual({ ca: `${pem}${other.certificatePem}`, cert: other.certificatePem, key: otherKey });

    // Half a renewal (a new certificate with the old key), a broken PEM: the whole last good set stays.
    disk['/crt'] = pem;
    expect((Object.assign({}, s.ssl) as { secureContext?: unknown }).secureContext).toBe(renewed);
    expect(material(s.ssl)).toMatchObject({ cert: other.certificatePem, key: otherKey });
    disk['/crt'] = 'not a certificate';
    expect(material(s.ssl)).toMatchObject({ cert: other.certificatePem, key: otherKey });
    expect(problems).toEqual([
      [
        'KAFKA_SSL_CA_FILE, KAFKA_SSL_CERT_FILE, KAFKA_SSL_KEY_FILE',
        expect.stringMatching(/do not make a TLS context: .*key values mismatch/),
      ],
    ]);
    // A CA bundle cut short, or with a damaged certificate (createSecureContext would skip it and
    // distrust the brokers): the set in hand stays.
    disk['/crt'] = other.certificatePem;
    for (const ca of [
      pem.slice(0, pem.length / 2),
      `${pem}-----BEGIN CERTIFICATE-----\nMIIB\n`,
      pem.replace(/[A-Za-z]{8}\n/, 'AAAAAAAA\n'),
    ]) {
      disk['/ca'] = ca;
      expect(material(s.ssl).ca).toBe(`${pem}${other.certificatePem}`);
    }
    disk['/ca'] = pem;
    expect(material(s.ssl).ca).toBe(pem);
    expect(JSON.stringify(problems)).not.toContain('PRIVATE KEY');
  });

  it('a CA file cut short or without a certificate stops the start', () => {
    for (const [ca, reason] of [
      [pem.slice(0, pem.length / 2), /KAFKA_SSL_CA_FILE holds 1 of 1 certificates that cannot be read/],
      ['-----BEGIN PUBLIC KEY-----\nAAAA\n-----END PUBLIC KEY-----\n', /KAFKA_SSL_CA_FILE holds no certificate/],
    ] as const) {
      const { make } = rotating({ '/ca': ca });
      expect(() => make({ KAFKA_SSL: 'true', KAFKA_SSL_CA_FILE: '/ca' })).toThrow(reason);
    }
  });

  it('refuses SASL extensions that would break the message: the auth key, control characters, empty values', () => {
    for (const extensions of ['auth=Bearer', 'a=x\u0001y', 'a=x\u0000', 'a=x\u007f', 'a=', 'a b=c', 'a=é']) {
      expect(() =>
        kafkaSecurityFromEnv({
          ...OAUTH,
          KAFKA_OAUTH_PROVIDER: 'unsecured',
          KAFKA_OAUTH_SUBJECT: 's',
          KAFKA_OAUTH_EXTENSIONS: extensions,
        }),
      ).toThrow(/KAFKA_OAUTH_EXTENSIONS must be key=value pairs/);
    }
    expect(() =>
      kafkaSecurityFromEnv({
        ...OAUTH,
        KAFKA_OAUTH_PROVIDER: 'unsecured',
        KAFKA_OAUTH_SUBJECT: 's',
        KAFKA_OAUTH_EXTENSIONS: 'logicalCluster=lkc-1,identityPoolId=pool-Ab12',
      }),
    ).not.toThrow();
  });

  it('a token file that cannot be read again keeps the token in hand, and says so once', async () => {
    const { disk, problems, make } = rotating({ '/token': 'token-1\n' });
    const s = make({
      ...OAUTH,
      KAFKA_OAUTH_PROVIDER: 'token-file',
      KAFKA_OAUTH_TOKEN_FILE: '/token',
    });
    const provider = (s.sasl as { oauthBearerProvider: () => Promise<{ value: string }> }).oauthBearerProvider;
    disk['/token'] = '';
    expect((await provider()).value).toBe('token-1');
    delete disk['/token'];
    expect((await provider()).value).toBe('token-1');
    disk['/token'] = 'token-2\n';
    expect((await provider()).value).toBe('token-2');
    expect(problems).toEqual([['KAFKA_OAUTH_TOKEN_FILE', expect.stringMatching(/is empty|cannot be read/)]]);
  });

  it('a certificate with another key, or a wrong passphrase, stops the start naming the variables', () => {
    const { make } = rotating({ '/crt': other.certificatePem, '/key': keyPem });
    expect(() => make({ KAFKA_SSL: 'true', KAFKA_SSL_CERT_FILE: '/crt', KAFKA_SSL_KEY_FILE: '/key' })).toThrow(
      /KAFKA_SSL_CERT_FILE, KAFKA_SSL_KEY_FILE and KAFKA_SSL_KEY_PASSWORD do not make a TLS context: .*key values mismatch/,
    );
  });

  it('SCRAM: a username and password are one set; a login never gets a new username with an old password', () => {
    const { disk, problems, make } = rotating({ '/u': 'sender\n', '/p': 'sender-password\n' });
    const s = make(scramFromFiles);
    disk['/u'] = 'publisher\n';
    disk['/p'] = '';
    expect(s.saslCredentials?.()).toEqual({ username: 'sender', password: 'sender-password' });
    disk['/p'] = 'publisher-password\n';
    expect(s.saslCredentials?.()).toEqual({ username: 'publisher', password: 'publisher-password' });
    expect(problems.map(([variables]) => variables)).toEqual(['KAFKA_SASL_USERNAME_FILE, KAFKA_SASL_PASSWORD_FILE']);
  });
});

describe('a refused credential, as the consumer runner tells it from other crashes', () => {
  // kafkajs' own error classes, as its consumer throws them (its package exports no error classes).
  const errors = createRequire(import.meta.url)('kafkajs/src/errors.js') as Record<
    string,
    new (e: unknown, metadata?: Record<string, unknown>) => Error
  >;
  const make = (name: string, e: unknown, metadata?: Record<string, unknown>) => {
    const ErrorClass = errors[name];
    if (!ErrorClass) throw new Error(`kafkajs has no ${name}`);
    return new ErrorClass(e, metadata);
  };

  it('is a SASL authentication failure or a definitive token refusal, however wrapped; nothing else', () => {
    const sasl = make('KafkaJSSASLAuthenticationError', 'SASL SCRAM SHA512 authentication failed: invalid credentials');
    expect(isCredentialRefusal(sasl)).toBe(true);
    expect(isCredentialRefusal(make('KafkaJSNumberOfRetriesExceeded', sasl, { retryCount: 5, retryTime: 100 }))).toBe(
      true,
    );
    // As kafkajs' retrier wraps what it may not retry.
    expect(isCredentialRefusal(make('KafkaJSNonRetriableError', sasl, { cause: sasl }))).toBe(true);
    expect(isCredentialRefusal(new OAuthTokenError('the identity provider refused the client (401)', true))).toBe(true);
    // Worth waiting for, but not a refusal: kafkajs restarts on these itself, or they are another fault.
    expect(isCredentialRefusal(new OAuthTokenError('the identity provider did not answer', false))).toBe(false);
    expect(isCredentialRefusal(make('KafkaJSConnectionError', 'Connection error: connect ECONNREFUSED'))).toBe(false);
    expect(
      isCredentialRefusal(
        make('KafkaJSProtocolError', { type: 'GROUP_AUTHORIZATION_FAILED', code: 30, message: 'Not authorized' }),
      ),
    ).toBe(false);
    expect(isCredentialRefusal(new Error('SASL authentication failed'))).toBe(false);
    expect(isCredentialRefusal(undefined)).toBe(false);
  });
});
