/**
 * TLS and SASL for every Kafka client, from the KAFKA_SSL* / KAFKA_SASL* / KAFKA_OAUTH* variables
 * (config.ts, KafkaSecurityConfigSchema). Read once, at start: a bad combination or an unreadable
 * file is a ConfigError naming the variable (exit 78). Secrets live only inside the kafkajs options
 * this returns; `description` says how we connect, and as whom, without them.
 */
import { X509Certificate } from 'node:crypto';
import type { ConnectionOptions } from 'node:tls';
import type { SASLOptions } from 'kafkajs';
import { ConfigError } from '../config.js';
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
  /** The identity the brokers will see, when we know it (SASL username, token subject, certificate CN). */
  readonly principal?: string;
}

export const PLAINTEXT: KafkaSecurity = { description: 'PLAINTEXT' };

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

export function kafkaSecurityFromEnv(env: Env = process.env, readFile: ReadFile = readTextFile): KafkaSecurity {
  const flag = (name: string) => (env[name] ?? '').trim().toLowerCase();
  const value = (name: string) => (env[name] ?? '').trim();
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
    const options: { -readonly [K in keyof ConnectionOptions]: ConnectionOptions[K] } = {};
    if (value('KAFKA_SSL_CA_FILE')) options.ca = readPemFile('KAFKA_SSL_CA_FILE', value('KAFKA_SSL_CA_FILE'), readFile);
    const certFile = value('KAFKA_SSL_CERT_FILE');
    const keyFile = value('KAFKA_SSL_KEY_FILE');
    if ((certFile === '') !== (keyFile === '')) {
      throw new ConfigError('invalid configuration: KAFKA_SSL_CERT_FILE and KAFKA_SSL_KEY_FILE go together');
    }
    if (certFile !== '') {
      options.cert = readPemFile('KAFKA_SSL_CERT_FILE', certFile, readFile);
      options.key = readPemFile('KAFKA_SSL_KEY_FILE', keyFile, readFile);
      const passphrase = readSecret(env, 'KAFKA_SSL_KEY_PASSWORD', readFile);
      if (passphrase !== undefined) options.passphrase = passphrase;
      certificateSubject = subjectCommonName(options.cert);
    }
    ssl = Object.keys(options).length > 0 ? options : true;
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
      ...(certificateSubject ? { principal: certificateSubject } : {}),
    };
  }
  // The secret itself crosses the wire with PLAIN and OAUTHBEARER; SCRAM never sends the password.
  if (!sslOn && (mechanism === 'plain' || mechanism === 'oauthbearer')) {
    throw new ConfigError(
      `invalid configuration: KAFKA_SASL_MECHANISM=${mechanism} sends the secret in clear; set KAFKA_SSL=true`,
    );
  }

  if (mechanism === 'oauthbearer') {
    const { provider, subject, source } = oauthProvider(env, readFile);
    return {
      ...(ssl ? { ssl } : {}),
      sasl: { mechanism: 'oauthbearer', oauthBearerProvider: provider },
      description: `${protocol} OAUTHBEARER (${source})${subject ? ` as "${subject}"` : ''}`,
      ...(subject ? { principal: subject } : {}),
    };
  }
  const username = readSecret(env, 'KAFKA_SASL_USERNAME', readFile);
  const password = readSecret(env, 'KAFKA_SASL_PASSWORD', readFile);
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
  return {
    ...(ssl ? { ssl } : {}),
    sasl: { mechanism, username, password } as SASLOptions,
    description: `${protocol} ${mechanism.toUpperCase()} as "${username}"`,
    principal: username,
  };
}

function oauthProvider(
  env: Env,
  readFile: ReadFile,
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
      const clientId = readSecret(env, 'KAFKA_OAUTH_CLIENT_ID', readFile);
      const clientSecret = readSecret(env, 'KAFKA_OAUTH_CLIENT_SECRET', readFile);
      if (clientId === undefined || clientSecret === undefined) {
        throw new ConfigError(
          'invalid configuration: KAFKA_OAUTH_CLIENT_ID and KAFKA_OAUTH_CLIENT_SECRET (or their _FILE forms) are required with KAFKA_OAUTH_PROVIDER=oidc',
        );
      }
      return {
        provider: oidcClientCredentialsProvider({
          tokenEndpoint,
          clientId,
          clientSecret,
          ...(value('KAFKA_OAUTH_SCOPE') ? { scope: value('KAFKA_OAUTH_SCOPE') } : {}),
          ...(value('KAFKA_OAUTH_AUDIENCE') ? { audience: value('KAFKA_OAUTH_AUDIENCE') } : {}),
          ...(extensions ? { extensions } : {}),
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
      readSecretFile('KAFKA_OAUTH_TOKEN_FILE', path, readFile);
      return {
        provider: tokenFileProvider(path, extensions, (p) => readSecretFile('KAFKA_OAUTH_TOKEN_FILE', p, readFile)),
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
  if (pairs.some((p) => p.length !== 2 || !/^[A-Za-z]+$/.test(p[0] ?? '') || (p[1] ?? '') === '')) {
    throw new ConfigError('invalid configuration: KAFKA_OAUTH_EXTENSIONS must be key=value pairs separated by commas');
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
