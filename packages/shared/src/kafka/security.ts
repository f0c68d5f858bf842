/**
 * TLS and SASL for every Kafka client, from the KAFKA_SSL* / KAFKA_SASL* / KAFKA_OAUTH* variables
 * (config.ts, KafkaSecurityConfigSchema). Checked at start: a bad combination or an unreadable file
 * is a ConfigError naming the variable (exit 78). Credential files (CA, client certificate and key,
 * key passphrase, SASL username and password) are read again for every new connection, so a rotated
 * Secret (Strimzi renewing a user certificate or the cluster CA, a new SCRAM password) takes effect
 * without a restart; a file that cannot be read again keeps the value in hand, and says so through
 * `onReloadProblem`. Secrets live only inside the kafkajs options this returns; `description` says
 * how we connect, and as whom (at start), without them.
 */
import { X509Certificate } from 'node:crypto';
import { createSecureContext, type ConnectionOptions, type SecureContext } from 'node:tls';
import type { SASLOptions } from 'kafkajs';
import { ConfigError } from '../config.js';
import type { Logger } from '../logger.js';
import { readPemFile, readSecret, readSecretFile, readTextFile, type Env, type ReadFile } from '../security/secrets.js';
import {
  awsMskIamTokenProvider,
  oidcClientCredentialsProvider,
  tokenFileProvider,
  unsecuredTokenProvider,
  type OAuthBearerProvider,
} from './oauth.js';

export type SaslMechanism = 'plain' | 'scram-sha-256' | 'scram-sha-512' | 'oauthbearer';
export type OAuthProviderKind = 'oidc' | 'aws-msk-iam' | 'token-file' | 'unsecured';

export interface KafkaSecurity {
  /** kafkajs `ssl`: TLS options (CA, client certificate) or `true` for the system trust store. */
  readonly ssl?: ConnectionOptions | true;
  readonly sasl?: SASLOptions;
  /** `SASL_SSL SCRAM-SHA-512 as "sender"`: for start-up messages and logs; no secret in it. */
  readonly description: string;
  /** The identity the brokers will see, when we know it (SASL username, token subject, certificate CN), at start. */
  readonly principal?: string;
  /** True when we present a client certificate (mutual TLS). */
  readonly mutualTls?: boolean;
  /**
   * PLAIN and SCRAM: the username and password as one snapshot, read again (from files) at each call.
   * createKafka takes one per authentication, so a login never mixes an old and a new value.
   */
  readonly saslCredentials?: () => { readonly username: string; readonly password: string };
}

export const PLAINTEXT: KafkaSecurity = { description: 'PLAINTEXT' };

export interface KafkaSecurityOptions {
  /** Hears of a credential file that could not be read again (the value in hand is kept): its variable and why, never a value. */
  readonly onReloadProblem?: (variable: string, reason: string) => void;
}

/** onReloadProblem as a warning in `logger`'s log: the variable and why, never the value. */
export function reloadWarnings(logger: Pick<Logger, 'warn'>): KafkaSecurityOptions {
  return {
    onReloadProblem: (variable, reason) =>
      logger.warn(
        { variable, reason },
        `${variable} could not be read again; new Kafka connections keep the previous value`,
      ),
  };
}

/** What a failed re-read says, without the prefix its start-up ConfigError carries. */
function reasonOf(error: unknown): string {
  return (error instanceof Error ? error.message : String(error)).replace(/^invalid configuration: /, '');
}

/**
 * A set of credentials read from their files at every call (kafkajs asks for each new connection
 * or authentication) and taken as a set: read twice until both reads agree (a Secret swapped
 * between the reads of two of its files is read again), then `check`ed. A read or check that fails
 * keeps the last good set, whole (never a new certificate with an old key), and the first such
 * problem is reported, once until a read succeeds again. An unchanged set is the same object.
 */
function liveSet<T extends object>(
  variables: string,
  initial: T,
  read: () => T,
  onProblem: KafkaSecurityOptions['onReloadProblem'],
  check: (value: T) => void = () => undefined,
): () => T {
  const same = (a: T, b: T) => JSON.stringify(a) === JSON.stringify(b);
  let last = initial;
  let reported: string | undefined;
  /** The last set `check` refused, so a refused set on disk is not checked again for every connection. */
  let refused: { json: string; reason: string } | undefined;
  return () => {
    try {
      let current = read();
      let agreed = false;
      for (let attempt = 0; attempt < 3 && !agreed; attempt++) {
        const again = read();
        agreed = same(current, again);
        current = again;
      }
      if (!agreed) throw new Error('the files changed while being read; trying again at the next connection');
      if (!same(current, last)) {
        const json = JSON.stringify(current);
        if (refused?.json === json) throw new Error(refused.reason);
        try {
          check(current);
        } catch (error) {
          refused = { json, reason: error instanceof Error ? error.message : String(error) };
          throw error;
        }
        last = current;
      }
      reported = undefined;
    } catch (error) {
      // Once until a read succeeds again: a rotation written in several steps fails in several ways.
      if (reported === undefined) {
        reported = reasonOf(error);
        onProblem?.(variables, reported);
      }
    }
    return last;
  };
}

interface TlsMaterial {
  ca?: string;
  cert?: string;
  key?: string;
  passphrase?: string;
}

const CERTIFICATE_BLOCK = /-----BEGIN CERTIFICATE-----[\s\S]*?-----END CERTIFICATE-----/g;

/**
 * Whether Node can make a TLS context of `material` (a certificate with its own key, the right
 * passphrase), and every certificate of the CA bundle is whole: createSecureContext skips a broken
 * or truncated one without a word, and a bundle cut in half would distrust the brokers.
 */
function checkTlsMaterial(material: TlsMaterial): void {
  if (material.ca !== undefined) {
    const blocks = material.ca.match(CERTIFICATE_BLOCK) ?? [];
    const begun = material.ca.split('-----BEGIN CERTIFICATE-----').length - 1;
    const whole = blocks.filter((block) => {
      try {
        new X509Certificate(block);
        return true;
      } catch {
        return false;
      }
    }).length;
    if (begun === 0 || whole !== begun) {
      throw new ConfigError(
        `invalid configuration: KAFKA_SSL_CA_FILE holds ${begun === 0 ? 'no certificate' : `${begun - whole} of ${begun} certificates that cannot be read (cut short or damaged)`}`,
      );
    }
  }
  try {
    createSecureContext(material);
  } catch (error) {
    const code = (error as { code?: string }).code;
    throw new ConfigError(
      `invalid configuration: KAFKA_SSL_CA_FILE, KAFKA_SSL_CERT_FILE, KAFKA_SSL_KEY_FILE and KAFKA_SSL_KEY_PASSWORD do not make a TLS context: ${(error as Error).message.split('\n')[0]}${code ? ` (${code})` : ''}`,
    );
  }
}

/**
 * The Kafka security of this process, from its environment. Each call builds fresh token providers
 * (each with its own cache), so call it once per client.
 */
function isHttpsOrLoopback(endpoint: string): boolean {
  try {
    const url = new URL(endpoint);
    if (url.protocol === 'https:') return true;
    return url.protocol === 'http:' && ['127.0.0.1', '[::1]', 'localhost'].includes(url.hostname);
  } catch {
    return false;
  }
}

export function kafkaSecurityFromEnv(
  env: Env = process.env,
  readFile: ReadFile = readTextFile,
  securityOptions: KafkaSecurityOptions = {},
): KafkaSecurity {
  const { onReloadProblem } = securityOptions;
  const flag = (name: string) => (env[name] ?? '').trim().toLowerCase();
  const value = (name: string) => (env[name] ?? '').trim();
  /** A set of credentials read again at each call when any of `fileVariables` is set (liveSet); fixed otherwise. */
  const liveCredentials = <T extends object>(
    fileVariables: readonly string[],
    initial: T,
    read: () => T,
  ): (() => T) => {
    const files = fileVariables.filter((name) => value(name) !== '');
    return files.length === 0 ? () => initial : liveSet(files.join(', '), initial, read, onReloadProblem);
  };
  // As services' loadConfig reads it (a JSON-schema boolean): `true` or `false`, unset is false. Any
  // other spelling (`on`, `1`, `yes`, `TRUE`) is refused rather than read as false, which would
  // quietly connect without TLS.
  const sslSetting = env.KAFKA_SSL ?? '';
  if (!['', 'true', 'false'].includes(sslSetting)) {
    throw new ConfigError(
      `invalid configuration: KAFKA_SSL must be true or false (it is ${JSON.stringify(sslSetting.slice(0, 20))})`,
    );
  }
  const sslOn = sslSetting === 'true';
  const mechanism = flag('KAFKA_SASL_MECHANISM') as SaslMechanism | '';
  if (!['', 'plain', 'scram-sha-256', 'scram-sha-512', 'oauthbearer'].includes(mechanism)) {
    throw new ConfigError(
      'invalid configuration: KAFKA_SASL_MECHANISM must be plain, scram-sha-256, scram-sha-512 or oauthbearer',
    );
  }

  const tlsFiles = ['KAFKA_SSL_CA_FILE', 'KAFKA_SSL_CERT_FILE', 'KAFKA_SSL_KEY_FILE'].filter((n) => value(n) !== '');
  if (!sslOn && tlsFiles.length > 0) {
    throw new ConfigError(`invalid configuration: ${tlsFiles.join(', ')} set but KAFKA_SSL is not true`);
  }
  let ssl: ConnectionOptions | true | undefined;
  let certificateSubject: string | undefined;
  if (sslOn) {
    const caFile = value('KAFKA_SSL_CA_FILE');
    const certFile = value('KAFKA_SSL_CERT_FILE');
    const keyFile = value('KAFKA_SSL_KEY_FILE');
    if ((certFile === '') !== (keyFile === '')) {
      throw new ConfigError('invalid configuration: KAFKA_SSL_CERT_FILE and KAFKA_SSL_KEY_FILE go together');
    }
    const readMaterial = (): TlsMaterial => {
      const material: TlsMaterial = {};
      if (caFile !== '') material.ca = readPemFile('KAFKA_SSL_CA_FILE', caFile, readFile);
      if (certFile !== '') {
        material.cert = readPemFile('KAFKA_SSL_CERT_FILE', certFile, readFile);
        material.key = readPemFile('KAFKA_SSL_KEY_FILE', keyFile, readFile);
        const passphrase = readSecret(env, 'KAFKA_SSL_KEY_PASSWORD', readFile);
        if (passphrase !== undefined) material.passphrase = passphrase;
      }
      return material;
    };
    const initial = readMaterial();
    if (Object.keys(initial).length > 0) {
      checkTlsMaterial(initial);
      if (initial.cert !== undefined) certificateSubject = subjectCommonName(initial.cert);
      const variables = [
        'KAFKA_SSL_CA_FILE',
        'KAFKA_SSL_CERT_FILE',
        'KAFKA_SSL_KEY_FILE',
        'KAFKA_SSL_KEY_PASSWORD_FILE',
      ]
        .filter((name) => value(name) !== '')
        .join(', ');
      const material = liveSet(variables, initial, readMaterial, onReloadProblem, checkTlsMaterial);
      let context: { material: TlsMaterial; secureContext: SecureContext } | undefined;
      const options: ConnectionOptions = {};
      // kafkajs copies these options for each connection (Object.assign, which calls the getter):
      // one context, from one snapshot of the files, rebuilt only when they changed.
      Object.defineProperty(options, 'secureContext', {
        enumerable: true,
        get: () => {
          const now = material();
          if (context?.material !== now) context = { material: now, secureContext: createSecureContext(now) };
          return context.secureContext;
        },
      });
      // What the context was made of, for reading (not copied into a connection's options).
      for (const key of ['ca', 'cert', 'key', 'passphrase'] as const) {
        if (initial[key] !== undefined)
          Object.defineProperty(options, key, { enumerable: false, get: () => material()[key] });
      }
      ssl = options;
    } else {
      ssl = true;
    }
  }

  const protocol = `${mechanism === '' ? '' : 'SASL_'}${sslOn ? 'SSL' : 'PLAINTEXT'}`;
  if (mechanism === '') {
    if (value('KAFKA_OAUTH_PROVIDER') !== '') {
      throw new ConfigError('invalid configuration: KAFKA_OAUTH_PROVIDER needs KAFKA_SASL_MECHANISM=oauthbearer');
    }
    const as = certificateSubject ? ` as certificate "${certificateSubject}"` : '';
    return {
      ...(ssl ? { ssl } : {}),
      description: `${sslOn ? (certificateSubject ? 'SSL (mutual TLS)' : 'SSL') : 'PLAINTEXT'}${as}`,
      ...(certificateSubject ? { principal: certificateSubject, mutualTls: true } : {}),
    };
  }
  // The secret itself crosses the wire with PLAIN and OAUTHBEARER; SCRAM never sends the password.
  if (!sslOn && (mechanism === 'plain' || mechanism === 'oauthbearer')) {
    throw new ConfigError(
      `invalid configuration: KAFKA_SASL_MECHANISM=${mechanism} sends the secret in clear; set KAFKA_SSL=true`,
    );
  }

  if (mechanism === 'oauthbearer') {
    const { provider, subject, source } = oauthProvider(env, readFile, liveCredentials);
    return {
      ...(ssl ? { ssl } : {}),
      sasl: { mechanism: 'oauthbearer', oauthBearerProvider: provider },
      description: `${protocol} OAUTHBEARER (${source})${subject ? ` as "${subject}"` : ''}`,
      ...(subject ? { principal: subject } : {}),
      ...(certificateSubject ? { mutualTls: true } : {}),
    };
  }
  const readCredentials = () => ({
    username: readSecret(env, 'KAFKA_SASL_USERNAME', readFile),
    password: readSecret(env, 'KAFKA_SASL_PASSWORD', readFile),
  });
  const { username, password } = readCredentials();
  if (username === undefined) {
    throw new ConfigError(
      `invalid configuration: KAFKA_SASL_USERNAME (or KAFKA_SASL_USERNAME_FILE) is required with KAFKA_SASL_MECHANISM=${mechanism}`,
    );
  }
  if (password === undefined) {
    throw new ConfigError(
      `invalid configuration: KAFKA_SASL_PASSWORD_FILE (or KAFKA_SASL_PASSWORD) is required with KAFKA_SASL_MECHANISM=${mechanism}`,
    );
  }
  const credentials = liveCredentials(
    ['KAFKA_SASL_USERNAME_FILE', 'KAFKA_SASL_PASSWORD_FILE'],
    { username, password },
    () => {
      const now = readCredentials();
      // Both were set at start; a variable cannot go away, so undefined is not possible here.
      return { username: now.username ?? username, password: now.password ?? password };
    },
  );
  const sasl = {
    mechanism,
    get username() {
      return credentials().username;
    },
    get password() {
      return credentials().password;
    },
  };
  return {
    ...(ssl ? { ssl } : {}),
    sasl: sasl as SASLOptions,
    description: `${protocol} ${mechanism.toUpperCase()} as "${username}"`,
    principal: username,
    ...(certificateSubject ? { mutualTls: true } : {}),
    saslCredentials: credentials,
  };
}

function oauthProvider(
  env: Env,
  readFile: ReadFile,
  liveCredentials: <T extends object>(fileVariables: readonly string[], initial: T, read: () => T) => () => T,
): { provider: OAuthBearerProvider; subject?: string; source: string } {
  const value = (name: string) => (env[name] ?? '').trim();
  const kind = value('KAFKA_OAUTH_PROVIDER') as OAuthProviderKind | '';
  const extensions = parseExtensions(value('KAFKA_OAUTH_EXTENSIONS'));
  switch (kind) {
    case 'oidc': {
      const tokenEndpoint = value('KAFKA_OAUTH_TOKEN_ENDPOINT');
      if (tokenEndpoint === '') {
        throw new ConfigError(
          'invalid configuration: KAFKA_OAUTH_TOKEN_ENDPOINT is required with KAFKA_OAUTH_PROVIDER=oidc',
        );
      }
      // The client secret goes to this endpoint: never in clear text, except to this host itself.
      if (!isHttpsOrLoopback(tokenEndpoint)) {
        throw new ConfigError(
          'invalid configuration: KAFKA_OAUTH_TOKEN_ENDPOINT must be an https URL (the client secret is sent to it)',
        );
      }
      const readClient = () => ({
        clientId: readSecret(env, 'KAFKA_OAUTH_CLIENT_ID', readFile),
        clientSecret: readSecret(env, 'KAFKA_OAUTH_CLIENT_SECRET', readFile),
      });
      const { clientId, clientSecret } = readClient();
      if (clientId === undefined || clientSecret === undefined) {
        throw new ConfigError(
          'invalid configuration: KAFKA_OAUTH_CLIENT_ID and KAFKA_OAUTH_CLIENT_SECRET (or their _FILE forms) are required with KAFKA_OAUTH_PROVIDER=oidc',
        );
      }
      return {
        // The client id and secret, one set, read again for each token request.
        provider: oidcClientCredentialsProvider({
          tokenEndpoint,
          clientId,
          clientSecret,
          ...(value('KAFKA_OAUTH_SCOPE') ? { scope: value('KAFKA_OAUTH_SCOPE') } : {}),
          ...(value('KAFKA_OAUTH_AUDIENCE') ? { audience: value('KAFKA_OAUTH_AUDIENCE') } : {}),
          ...(extensions ? { extensions } : {}),
          credentials: liveCredentials(
            ['KAFKA_OAUTH_CLIENT_ID_FILE', 'KAFKA_OAUTH_CLIENT_SECRET_FILE'],
            { clientId, clientSecret },
            () => {
              const now = readClient();
              return { clientId: now.clientId ?? clientId, clientSecret: now.clientSecret ?? clientSecret };
            },
          ),
        }),
        subject: clientId,
        source: `OIDC client credentials at ${new URL(tokenEndpoint).origin}`,
      };
    }
    case 'aws-msk-iam': {
      const region = value('KAFKA_AWS_REGION') || value('AWS_REGION');
      if (region === '') {
        throw new ConfigError(
          'invalid configuration: KAFKA_AWS_REGION (or AWS_REGION) is required with KAFKA_OAUTH_PROVIDER=aws-msk-iam',
        );
      }
      return { provider: awsMskIamTokenProvider({ region }), source: `AWS MSK IAM, region ${region}` };
    }
    case 'token-file': {
      const path = value('KAFKA_OAUTH_TOKEN_FILE');
      if (path === '') {
        throw new ConfigError(
          'invalid configuration: KAFKA_OAUTH_TOKEN_FILE is required with KAFKA_OAUTH_PROVIDER=token-file',
        );
      }
      // Read now, so a missing file stops the start; read again at every authentication.
      const readToken = () => ({ value: readSecretFile('KAFKA_OAUTH_TOKEN_FILE', path, readFile) });
      // The token in hand stays while the file cannot be read (a sidecar that truncates, then
      // writes): the broker says when it has expired.
      const token = liveCredentials(['KAFKA_OAUTH_TOKEN_FILE'], readToken(), readToken);
      return {
        provider: tokenFileProvider(path, extensions, () => token().value),
        source: `token from ${path}`,
      };
    }
    case 'unsecured': {
      // An unsigned token names whatever principal it likes: only a test broker accepts one.
      if (value('NODE_ENV').toLowerCase() === 'production') {
        throw new ConfigError(
          'invalid configuration: KAFKA_OAUTH_PROVIDER=unsecured is for test brokers only and is refused when NODE_ENV=production',
        );
      }
      const subject = value('KAFKA_OAUTH_SUBJECT');
      if (subject === '') {
        throw new ConfigError(
          'invalid configuration: KAFKA_OAUTH_SUBJECT is required with KAFKA_OAUTH_PROVIDER=unsecured',
        );
      }
      return {
        provider: unsecuredTokenProvider(subject, extensions),
        subject,
        source: 'unsecured JWS, test brokers only',
      };
    }
    case '':
      throw new ConfigError(
        'invalid configuration: KAFKA_OAUTH_PROVIDER (oidc, aws-msk-iam, token-file or unsecured) is required with KAFKA_SASL_MECHANISM=oauthbearer',
      );
    default:
      throw new ConfigError(
        'invalid configuration: KAFKA_OAUTH_PROVIDER must be oidc, aws-msk-iam, token-file or unsecured',
      );
  }
}

function parseExtensions(text: string): Record<string, string> | undefined {
  if (text === '') return undefined;
  const pairs = text.split(',').map((pair) => pair.split('='));
  // RFC 7628 §3.1: a key is letters (and `auth` is the token's); a value is printable ASCII,
  // spaces and tabs. Anything else would break the message or be refused by the broker as a bad token.
  if (
    pairs.some(
      (p) =>
        p.length !== 2 || !/^[A-Za-z]+$/.test(p[0] ?? '') || p[0] === 'auth' || !/^[\x21-\x7e \t]+$/.test(p[1] ?? ''),
    )
  ) {
    throw new ConfigError(
      'invalid configuration: KAFKA_OAUTH_EXTENSIONS must be key=value pairs separated by commas (keys of letters other than auth, values of printable ASCII)',
    );
  }
  return Object.fromEntries(pairs as Array<[string, string]>);
}

/** The CN of a PEM certificate's subject: the principal a broker's default mapping rule derives. */
function subjectCommonName(pem: ConnectionOptions['cert']): string | undefined {
  try {
    const subject = new X509Certificate(String(pem)).subject;
    return /(?:^|\n)CN=([^\n]+)/.exec(subject)?.[1] ?? subject.replaceAll('\n', ',');
  } catch {
    throw new ConfigError('invalid configuration: KAFKA_SSL_CERT_FILE does not hold a readable PEM certificate');
  }
}
