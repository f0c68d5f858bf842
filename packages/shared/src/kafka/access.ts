/**
 * The start-up check: before a service (or a CLI) does any work, prove that the brokers accept our
 * credentials and certificates and that our principal may do what the role needs. A wrong password,
 * an untrusted CA or a missing ACL otherwise shows up as a consumer that retries, crashes and
 * restarts, or a relay that logs the same error forever; here it stops the start with one message
 * that names the cause (StartupError, exit 78). A broker that does not answer is waited for until
 * KAFKA_STARTUP_TIMEOUT_MS, then the start stops too (exit 69): never a silent hang.
 */
import type { Logger } from '../logger.js';
import { TLS_TRUST_CODES, TLS_VALIDITY_CODES } from '../security/tls-errors.js';
import { StartupError, type StartupFailure } from '../service/startup-error.js';
import { createKafka } from './client.js';
import { OAuthTokenError } from './oauth.js';
import type { KafkaAccessNeeds } from './acls.js';
import {
  openBrokerSession,
  TOPIC_AUTHORIZATION_FAILED,
  UNKNOWN_TOPIC_OR_PARTITION,
  type BrokerSession,
} from './authorized-operations.js';
import { PLAINTEXT, type KafkaSecurity } from './security.js';

export interface KafkaAccessCheckOptions {
  readonly brokers: readonly string[];
  readonly security: KafkaSecurity;
  readonly needs: KafkaAccessNeeds;
  readonly timeoutMs: number;
  readonly clientId: string;
  /** The role whose ACLs to point at in the message (acls:print -- --role <role>). */
  readonly role?: string;
  readonly logger?: Pick<Logger, 'warn'>;
  /** False: check credentials and certificates only (KAFKA_STARTUP_ACL_CHECK=false). */
  readonly checkAcls?: boolean;
}

export async function checkKafkaAccess(options: KafkaAccessCheckOptions): Promise<void> {
  const { security, needs } = options;
  const kafka = createKafka({
    brokers: options.brokers,
    clientId: `${options.clientId}-startup-check`,
    security,
    retries: 0,
    connectionTimeoutMs: 5_000,
    requestTimeoutMs: 10_000,
  });
  const deadline = Date.now() + options.timeoutMs;
  const attempt = async <T>(what: string, run: () => Promise<T>): Promise<T> => {
    for (;;) {
      try {
        return await run();
      } catch (error) {
        const known = explainKafkaError(error, security);
        if (known && known.failure !== 'unreachable') throw new StartupError('kafka', known.failure, known.message);
        if (Date.now() >= deadline) {
          const hint = security.ssl
            ? ''
            : ' (if the listener speaks TLS, set KAFKA_SSL=true: a plaintext client sees a closed connection)';
          throw new StartupError(
            'kafka',
            'unreachable',
            `kafka: no answer from ${options.brokers.join(',')} while ${what} for ${Math.round(options.timeoutMs / 1000)} s ` +
              `(${security.description}): ${known?.message ?? messageOf(error)}${hint}`,
          );
        }
        await new Promise((resolve) => setTimeout(resolve, Math.min(1_000, Math.max(0, deadline - Date.now()))));
      }
    }
  };

  const session: BrokerSession = await attempt('connecting', () => openBrokerSession(kafka));
  try {
    if (options.checkAcls === false) return;
    // A Set: the role's needs and the registered consumers name the same topics.
    const missing = new Set<string>();
    const unknown = new Set<string>();
    const unreported = new Set<string>();
    const topics = [...new Set([...needs.read, ...needs.write])];
    if (topics.length > 0) {
      const access = await attempt('describing topics', () => session.topicAccess(topics));
      const require = (topic: string, operation: 'READ' | 'WRITE') => {
        const entry = access.get(topic);
        if (entry?.errorCode === UNKNOWN_TOPIC_OR_PARTITION) {
          unknown.add(topic);
          return;
        }
        if (entry && entry.errorCode !== TOPIC_AUTHORIZATION_FAILED && entry.operations === undefined) {
          // The broker did not compute them (it has no authorizer that answers): nothing to judge by.
          unreported.add(topic);
          return;
        }
        if (!entry || entry.errorCode === TOPIC_AUTHORIZATION_FAILED || !entry.operations?.has(operation)) {
          missing.add(`${operation === 'READ' ? 'Read' : 'Write'} on topic ${topic}`);
        }
      };
      for (const topic of needs.read) require(topic, 'READ');
      for (const topic of needs.write) require(topic, 'WRITE');
    }
    for (const group of new Set(needs.groups)) {
      await attempt(`finding the coordinator of group ${group}`, async () => {
        try {
          await session.findGroupCoordinator(group);
        } catch (error) {
          if (protocolType(error) === 'GROUP_AUTHORIZATION_FAILED') missing.add(`Read on group ${group}`);
          else throw error;
        }
      });
    }
    if (missing.size > 0) {
      const who = security.principal ? `principal "${security.principal}"` : 'this client';
      const grant = options.role
        ? ` Grant role ${options.role}'s ACLs (npm run acls:print -- --role ${options.role}).`
        : '';
      throw new StartupError(
        'kafka',
        'authorization',
        `kafka: ${who} (${security.description}) is not allowed: ${[...missing].join('; ')}.${grant}`,
      );
    }
    if (unreported.size > 0) {
      options.logger?.warn(
        { topics: [...unreported] },
        'kafka: the brokers do not report what we may do on these topics; their ACLs are not checked',
      );
    }
    if (unknown.size > 0) {
      options.logger?.warn(
        { topics: [...unknown] },
        'kafka: topics do not exist yet (run topics:ensure); their ACLs are not checked',
      );
    }
  } finally {
    await session.disconnect().catch(() => undefined);
  }
}

const AUTHORIZATION = /^(TOPIC|GROUP|CLUSTER|TRANSACTIONAL_ID)_AUTHORIZATION_FAILED$/;

/**
 * What went wrong talking to Kafka, in words an operator can act on; undefined for what we cannot
 * name (kept as is). `unreachable` is worth waiting out; the others are not.
 */
export function explainKafkaError(
  error: unknown,
  security: KafkaSecurity,
): { failure: StartupFailure; message: string } | undefined {
  // First the token provider's own error, wherever it is in the chain (our OAUTHBEARER exchange wraps
  // it in a SASL failure): an identity provider that is down is worth waiting for, one that refused
  // us is not.
  for (const cause of causes(error)) {
    if (cause instanceof OAuthTokenError) {
      return { failure: cause.definitive ? 'authentication' : 'unreachable', message: `kafka: ${cause.message}` };
    }
  }
  for (const cause of causes(error)) {
    const { name, code, message } = cause as { name?: string; code?: string; message?: string };
    if (
      name === 'KafkaJSSASLAuthenticationError' ||
      (cause as { type?: unknown }).type === 'SASL_AUTHENTICATION_FAILED'
    ) {
      return {
        failure: 'authentication',
        message: `kafka: the brokers refused our credentials (${security.description}): ${message ?? ''}. ${
          security.sasl?.mechanism === 'oauthbearer'
            ? 'Check the token KAFKA_OAUTH_PROVIDER gives: expired, or issued for another cluster or audience'
            : 'Check KAFKA_SASL_USERNAME and KAFKA_SASL_PASSWORD_FILE'
        }`,
      };
    }
    if (code && TLS_TRUST_CODES.has(code)) {
      return {
        failure: 'tls',
        message: `kafka: the broker's certificate is not signed by a CA we trust (${code}). Check KAFKA_SSL_CA_FILE${security.ssl === true ? ' (unset: the system trust store)' : ''}`,
      };
    }
    if (code && TLS_VALIDITY_CODES.has(code)) {
      return { failure: 'tls', message: `kafka: the broker's certificate is not valid now (${code})` };
    }
    if (code === 'ERR_TLS_CERT_ALTNAME_INVALID') {
      return {
        failure: 'tls',
        message: `kafka: the broker's certificate does not name the host we connected to: ${message ?? ''}`,
      };
    }
    if (code && /^ERR_SSL_.*ALERT/.test(code)) {
      return {
        failure: 'tls',
        message: `kafka: the broker refused the TLS handshake (${code}): ${security.mutualTls ? 'is our client certificate (KAFKA_SSL_CERT_FILE) signed by a CA the broker trusts?' : 'the listener may require a client certificate (KAFKA_SSL_CERT_FILE, KAFKA_SSL_KEY_FILE)'}`,
      };
    }
    const type = protocolType(cause);
    if (type && AUTHORIZATION.test(type)) {
      const topic = refusedTopic(cause);
      return {
        failure: 'authorization',
        message: `kafka: ${type} for ${security.principal ?? security.description}${topic ? ` on topic ${topic} (no ACL grants it: apply the ACLs with npm run acls:print -- --apply, and check TOPIC_PREFIX)` : ''}: ${message ?? ''}`,
      };
    }
    if (type === 'UNSUPPORTED_SASL_MECHANISM' || type === 'ILLEGAL_SASL_STATE') {
      return {
        failure: 'configuration',
        message: `kafka: the listener does not offer ${security.description} (${type}); check KAFKA_SASL_MECHANISM and the port`,
      };
    }
  }
  return undefined;
}

/**
 * Whether the brokers refused our credentials (a SASL authentication failure, or a token provider
 * that refused us), wherever it is in the error's chain: at start final, while running the mark of
 * a rotation half done (the consumer runner waits it out, KAFKA_AUTH_RETRY_WINDOW_MS).
 */
export function isCredentialRefusal(error: unknown): boolean {
  return explainKafkaError(error, PLAINTEXT)?.failure === 'authentication';
}

/**
 * The error and everything it wraps, breadth first: `originalError` / `cause` (KafkaJS retries,
 * our wrappers) and the `errors` of an aggregate (KafkaJSAggregateError from createTopics, whose
 * KafkaJSCreateTopicError entries carry the broker's per-topic TOPIC_AUTHORIZATION_FAILED).
 */
function* causes(error: unknown): Generator<unknown> {
  const seen = new Set<unknown>();
  const queue: unknown[] = [error];
  while (queue.length > 0) {
    const current = queue.shift();
    if (current === undefined || current === null || seen.has(current) || seen.size >= 256) continue;
    seen.add(current);
    yield current;
    const next = current as { originalError?: unknown; cause?: unknown; errors?: unknown };
    queue.push(next.originalError, next.cause);
    if (Array.isArray(next.errors)) queue.push(...(next.errors as unknown[]));
  }
}

function protocolType(error: unknown): string | undefined {
  for (const cause of causes(error)) {
    const type = (cause as { type?: unknown }).type;
    if (typeof type === 'string') return type;
  }
  return undefined;
}

/** The topic a per-topic refusal (KafkaJSCreateTopicError and the like) names, if any. */
function refusedTopic(error: unknown): string | undefined {
  for (const cause of causes(error)) {
    const topic = (cause as { topic?: unknown }).topic;
    if (typeof topic === 'string' && topic !== '') return topic;
  }
  return undefined;
}

function messageOf(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}
