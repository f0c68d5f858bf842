import { randomUUID } from 'node:crypto';
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import autoload from '@fastify/autoload';
import Fastify, {
  LogController,
  type FastifyBaseLogger,
  type FastifyError,
  type FastifyInstance,
  type FastifyReply,
} from 'fastify';
import { brokerList, type BaseConfig } from '../config.js';
import { isSaneCorrelationId, jsonDepthProblem, MAX_JSON_DEPTH } from '@outreach/contracts';
import type { Logger } from '../logger.js';
import fp from 'fastify-plugin';
import type { Registry } from 'prom-client';
import { createMetricsRegistry } from '../metrics.js';
import { registerHttpMetrics } from '../metrics/http.js';
import { accessControl, scopedTokensFrom, type ScopedTokens } from './auth.js';
import { isTransientError } from '../kafka/consumer.js';
import { isKafkaRole, roleAccessNeeds } from '../kafka/acls.js';
import { registerDocsUi, registerOpenApi } from './docs.js';
import { AppError } from './errors.js';
import {
  DEFAULT_READINESS,
  HealthChecks,
  registerHealthRoutes,
  type LivenessCheck,
  type ReadinessCheck,
  type ReadinessOptions,
} from './health.js';
import { kafkaPlugin, type KafkaPluginOptions } from './kafka-plugin.js';
import { postgresPlugin, type PostgresPluginOptions } from './postgres-plugin.js';

/**
 * A request body becomes at most one event, and an event must fit in one Kafka message: the topics
 * keep the broker's default message.max.bytes (1 MiB + 12). 64 KiB stay free for the envelope, the
 * record headers (trace, DLQ reasons) and the batch overhead; Avro encodes no value in more bytes than
 * its JSON text takes.
 */
export const MAX_BODY_BYTES = 1024 * 1024 - 64 * 1024;
/** Longer than any route's parameter schema allows, so the schema (with a reason) decides, not the router. */
export const MAX_PARAM_CHARS = 4096;

declare module 'fastify' {
  interface FastifyInstance {
    /**
     * Named checks that `/health/ready` runs on its timer (service/health.ts); plugins add theirs
     * (postgres, kafka, consumers). The name is public: no group, host or other internal name in it.
     */
    readonly readiness: HealthChecks<ReadinessCheck>;
    /** Named checks that `/health/live` reads: consumers, the outbox relay, periodic tasks (service/workers.ts). */
    readonly liveness: HealthChecks<LivenessCheck>;
    /** The service's Prometheus registry, served at /metrics. */
    readonly metrics: Registry;
  }
}

export interface HttpAppOptions {
  readonly name: string;
  readonly logger: Logger;
  /** When given, `app.pg` is a pool scoped to the service's schema, checked by `/health/ready`. */
  readonly postgres?: PostgresPluginOptions;
  /** When given, `app.kafka` and `app.producer` exist, checked by `/health/ready`. */
  readonly kafka?: KafkaPluginOptions;
  /** Bearer tokens per scope (or how to read them again); a scope without tokens answers 401. */
  readonly apiTokens?: ScopedTokens | (() => ScopedTokens);
  /** With `apiTokens` a function: how often to read the tokens again. */
  readonly apiTokensReloadMs?: number;
  /** Per token (per client address without one), per replica. Defaults to 6000 per minute. */
  readonly rateLimit?: { readonly max: number; readonly windowMs: number };
  /** TRUST_PROXY: proxy addresses/CIDRs (comma-separated) or a hop count; empty trusts no proxy. */
  readonly trustProxy?: string;
  /** How long a client may take to send a request, and to stay silent on its connection (DEFAULT_HTTP_TIMEOUTS). */
  readonly timeouts?: HttpTimeouts;
  /** How often readiness is checked, and how long one check may take (DEFAULT_READINESS). */
  readonly readiness?: Partial<ReadinessOptions>;
  /** Defaults to a new registry with Node's default metrics. */
  readonly metrics?: Registry;
  /** Autoloaded first: external connections (pg, kafka), then app plugins (repositories, relays). */
  readonly pluginsDir?: string;
  /** Autoloaded after the plugins: thin HTTP handlers. */
  readonly routesDir?: string;
  /** Passed to every autoloaded plugin and route. */
  readonly options?: Record<string, unknown>;
}

export interface HttpTimeouts {
  /**
   * HTTP_REQUEST_TIMEOUT_MS: the whole request, headers and body, must arrive within this; a client
   * that trickles its body is answered 408 and disconnected. Node checks every
   * CONNECTIONS_CHECK_MS, so a connection goes at most that much later.
   */
  readonly requestMs: number;
  /** HTTP_CONNECTION_TIMEOUT_MS: a connection on which nothing moves this long is closed (idle keep-alive has its own 72 s). */
  readonly connectionMs: number;
}

export const DEFAULT_HTTP_TIMEOUTS: HttpTimeouts = { requestMs: 30_000, connectionMs: 60_000 };
/** How often Node looks for requests past their timeout (its default is 30 s, which would triple ours). */
const CONNECTIONS_CHECK_MS = 1_000;

/**
 * TRUST_PROXY's spelling to fastify's: false, a list of addresses and CIDRs, or for a hop count the
 * function proxy-addr takes (trust the `n` nearest hops).
 */
export function trustProxyOf(value: string): false | string[] | ((address: string, hop: number) => boolean) {
  const trimmed = value.trim();
  if (trimmed === '') return false;
  if (/^\d+$/.test(trimmed)) {
    const hops = Number(trimmed);
    return (_address, hop) => hop < hops;
  }
  return trimmed.split(',').map((s) => s.trim());
}

/**
 * The HTTP shell every service shares: request ids that double as correlation ids, health routes,
 * one error handler, the API docs (/docs), and autoloaded plugins and routes. Builds; never listens
 * (server.ts does).
 */
export async function buildHttpApp(options: HttpAppOptions): Promise<FastifyInstance> {
  const timeouts = options.timeouts ?? DEFAULT_HTTP_TIMEOUTS;
  const app = Fastify({
    loggerInstance: options.logger as FastifyBaseLogger,
    // A caller's correlation id is kept when it is a plain token (the rule every ingress applies,
    // domain/keys.ts); anything else (16 KiB of it, an address) would travel into every log line
    // and event, so it is replaced.
    requestIdHeader: false,
    genReqId: (req) => {
      const given = req.headers['x-correlation-id'];
      return typeof given === 'string' && isSaneCorrelationId(given) ? given : randomUUID();
    },
    logController: new LogController({ requestIdLogLabel: 'correlationId' }),
    forceCloseConnections: true,
    // Without these a client that sends its body a byte at a time holds its connection forever
    // (300 such connections to /v1/feedback/ses were all still open after 120 s).
    requestTimeout: timeouts.requestMs,
    connectionTimeout: timeouts.connectionMs,
    http: {
      headersTimeout: timeouts.requestMs,
      connectionsCheckingInterval: Math.min(CONNECTIONS_CHECK_MS, timeouts.requestMs),
    },
    trustProxy: trustProxyOf(options.trustProxy ?? ''),
    // Unknown fields in a schema that forbids them are an error with a reason, not silently dropped.
    // A body that is one of several shapes (`oneOf` with a `discriminator`) is checked against the
    // shape its tag names, so the 400 says what that shape lacks.
    ajv: { customOptions: { removeAdditional: false, discriminator: true } },
    bodyLimit: MAX_BODY_BYTES,
    routerOptions: { maxParamLength: MAX_PARAM_CHARS },
    // Errors the router raises before any route or hook: their default messages echo the path,
    // which may hold an address, to a caller who has not authenticated.
    frameworkErrors: (error, _request, reply) => {
      const tooLong = error.code === 'FST_ERR_MAX_PARAM_LENGTH';
      const message = tooLong
        ? `a path segment is longer than ${MAX_PARAM_CHARS} characters`
        : error.code === 'FST_ERR_BAD_URL'
          ? 'the path is not valid percent-encoding'
          : 'the request cannot be routed';
      return (reply as FastifyReply).code(tooLong ? 414 : 400).send({ error: 'BAD_REQUEST', message });
    },
  });

  // fastify's own JSON parser (with its prototype-poisoning checks), after a scan for depth:
  // JSON.parse takes any nesting, and what walks the value afterwards recurses (contracts'
  // json-depth.ts). A body nested too deep is a 400 with the reason, before anything parses it.
  const parseJson = app.getDefaultJsonParser('error', 'error');
  app.removeContentTypeParser('application/json');
  app.addContentTypeParser('application/json', { parseAs: 'string' }, (request, body, done) => {
    const problem = jsonDepthProblem(body as string, MAX_JSON_DEPTH);
    if (problem !== undefined) {
      done(new AppError('BAD_REQUEST', problem), undefined);
      return;
    }
    parseJson(request, body as string, done);
  });

  await app.register(accessControl, {
    tokens: options.apiTokens ?? { publish: [], operate: [], read: [], dsn: [], erase: [] },
    ...(options.apiTokensReloadMs !== undefined ? { reloadMs: options.apiTokensReloadMs } : {}),
    rateLimit: options.rateLimit ?? { max: 6_000, windowMs: 60_000 },
  });
  // Before any route, so the OpenAPI document has them all (service/docs.ts).
  await registerOpenApi(app, options.name);

  await app.register(
    fp(
      async (instance) => {
        instance.decorate('readiness', new HealthChecks<ReadinessCheck>());
        instance.decorate('liveness', new HealthChecks<LivenessCheck>());
        instance.decorate('metrics', options.metrics ?? createMetricsRegistry(options.name));
      },
      { name: 'health' },
    ),
  );
  // Before any route, so every route (and the 404 handler) is counted and timed.
  registerHttpMetrics(app);

  registerHealthRoutes(app, { service: options.name, readiness: { ...DEFAULT_READINESS, ...options.readiness } });
  app.get('/metrics', { logLevel: 'warn', config: { scope: 'public' } }, async (_request, reply) =>
    reply.type(app.metrics.contentType).send(await app.metrics.metrics()),
  );

  // Values no schema keyword catches but every store refuses: a 400 here, not a 500 from the database
  // (or a dead letter later, for what goes to Kafka). After validation, which coerces `?limit=1e400`
  // to Infinity and lets it past `maximum`.
  app.addHook('preHandler', async (request) => {
    const problem = unstorableValue({ params: request.params, querystring: request.query, body: request.body });
    if (problem !== undefined) throw new AppError('BAD_REQUEST', problem);
  });

  app.setErrorHandler((error: FastifyError | AppError, request, reply) => {
    if (error instanceof AppError) {
      return reply
        .code(error.statusCode)
        .send({ error: error.code, message: error.message, ...(error.details ? { details: error.details } : {}) });
    }
    if (error.validation) {
      return reply.code(400).send({ error: 'BAD_REQUEST', message: error.message });
    }
    const status = error.statusCode && error.statusCode < 500 ? error.statusCode : 500;
    if (status < 500) {
      return reply.code(status).send({ error: error.code ?? 'BAD_REQUEST', message: error.message });
    }
    if (isUnavailable(error)) {
      // The broker or the database is away: the caller's request was fine, and may be sent again.
      request.log.warn({ err: error }, 'request failed: a dependency is unavailable');
      return reply
        .code(503)
        .header('retry-after', '5')
        .send({ error: 'UNAVAILABLE', message: 'a dependency is unavailable; retry later', correlationId: request.id });
    }
    request.log.error({ err: error }, 'request failed');
    return reply.code(500).send({ error: 'INTERNAL', message: 'internal error', correlationId: request.id });
  });

  // The path is not echoed: it may hold an address, and this answer goes to callers without a token.
  app.setNotFoundHandler((request, reply) =>
    reply.code(404).send({ error: 'NOT_FOUND', message: `no route for ${request.method} on this path` }),
  );

  // Swagger UI at /docs and the document at /docs/json.
  await registerDocsUi(app);

  if (options.postgres) {
    await app.register(postgresPlugin, options.postgres);
  }
  if (options.kafka) {
    await app.register(kafkaPlugin, options.kafka);
  }
  // Directories may be absent while a service has no plugins or routes of its own yet.
  if (options.pluginsDir && existsSync(options.pluginsDir)) {
    await app.register(autoload, { dir: options.pluginsDir, options: options.options ?? {}, encapsulate: false });
  }
  if (options.routesDir && existsSync(options.routesDir)) {
    await app.register(autoload, { dir: options.routesDir, options: options.options ?? {} });
  }
  return app;
}

/**
 * The first value PostgreSQL, Avro or JSON cannot hold, as a reason: a string or key with U+0000
 * (text columns refuse it), a number that is not finite (JSON's `1e400`). Iterative, so deeply
 * nested JSON cannot overflow the stack.
 */
export function unstorableValue(root: Record<string, unknown>): string | undefined {
  const stack: Array<[string, unknown]> = Object.entries(root);
  while (stack.length > 0) {
    const [path, value] = stack.pop() as [string, unknown];
    if (typeof value === 'string') {
      if (value.includes('\u0000')) return `${path} contains a NUL character (U+0000)`;
    } else if (typeof value === 'number') {
      if (!Number.isFinite(value)) return `${path} is not a finite number`;
    } else if (typeof value === 'object' && value !== null) {
      for (const [key, child] of Object.entries(value)) {
        if (key.includes('\u0000')) return `${path} has a key with a NUL character (U+0000)`;
        stack.push([`${path}/${key}`, child]);
      }
    }
  }
  return undefined;
}

/**
 * A failure of a dependency rather than of the request: a transient error (connection, PostgreSQL
 * class 08/53/57, ...), or any kafkajs error (the producer gives up with a non-retriable wrapper
 * around a connection error once its own retries are spent).
 */
function isUnavailable(error: unknown): boolean {
  const { name, cause } = (error ?? {}) as { name?: unknown; cause?: unknown };
  return isTransientError(error) || isTransientError(cause) || (typeof name === 'string' && name.startsWith('KafkaJS'));
}

/**
 * The usual service: Postgres scoped to its schema, Kafka, bearer tokens, and the `plugins/` and
 * `routes/` directories next to its `app.ts` (`dir`), each autoloaded with `{ config }`.
 */
export async function buildServiceApp(options: {
  readonly name: string;
  readonly dir: string;
  readonly logger: Logger;
  readonly config: BaseConfig & { readonly DATABASE_SCHEMA: string };
}): Promise<FastifyInstance> {
  const { name, dir, logger, config } = options;
  return buildHttpApp({
    name,
    logger,
    postgres: {
      connectionString: config.DATABASE_URL,
      applicationName: name,
      schema: config.DATABASE_SCHEMA,
      ...(config.DATABASE_SESSION_URL ? { sessionConnectionString: config.DATABASE_SESSION_URL } : {}),
    },
    kafka: {
      brokers: brokerList(config.KAFKA_BROKERS),
      clientId: name,
      // A service's Kafka role is its name: the start-up check proves the role's ACLs (kafka/acls.ts).
      ...(isKafkaRole(name) ? { role: name, needs: roleAccessNeeds(name, config.TOPIC_PREFIX) } : {}),
      startupTimeoutMs: config.KAFKA_STARTUP_TIMEOUT_MS,
      checkAcls: config.KAFKA_STARTUP_ACL_CHECK,
      authRetryWindowMs: config.KAFKA_AUTH_RETRY_WINDOW_MS,
      fetchLimits: {
        maxBytes: config.CONSUMER_FETCH_MAX_BYTES,
        maxBytesPerPartition: config.CONSUMER_FETCH_PARTITION_MAX_BYTES,
      },
    },
    // Read at start (an unreadable file stops it: a ConfigError, exit 78), then every
    // SECRET_FILE_REFRESH_MS (30 s): a rotated Secret takes effect without a restart, and a revoked
    // token stops working.
    apiTokens: () => scopedTokensFrom(config),
    apiTokensReloadMs: config.SECRET_FILE_REFRESH_MS,
    rateLimit: { max: config.RATE_LIMIT_MAX, windowMs: config.RATE_LIMIT_WINDOW_MS },
    trustProxy: config.TRUST_PROXY,
    timeouts: { requestMs: config.HTTP_REQUEST_TIMEOUT_MS, connectionMs: config.HTTP_CONNECTION_TIMEOUT_MS },
    readiness: { refreshMs: config.READINESS_REFRESH_MS },
    pluginsDir: join(dir, 'plugins'),
    routesDir: join(dir, 'routes'),
    options: { config },
  });
}
