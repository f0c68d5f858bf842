import { randomUUID } from 'node:crypto';
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import autoload from '@fastify/autoload';
import Fastify, { LogController, type FastifyBaseLogger, type FastifyError, type FastifyInstance } from 'fastify';
import { brokerList, tokenList, type BaseConfig } from '../config.js';
import type { Logger } from '../logger.js';
import fp from 'fastify-plugin';
import type { Registry } from 'prom-client';
import { createMetricsRegistry } from '../metrics.js';
import { bearerAuth } from './auth.js';
import { AppError } from './errors.js';
import { kafkaPlugin, type KafkaPluginOptions } from './kafka-plugin.js';
import { postgresPlugin, type PostgresPluginOptions } from './postgres-plugin.js';

export type ReadinessCheck = () => Promise<void>;

declare module 'fastify' {
  interface FastifyInstance {
    /** Named checks that `/health/ready` runs; plugins add theirs (postgres, kafka, ...). */
    readonly readiness: Map<string, ReadinessCheck>;
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
  /** Bearer tokens accepted on mutating `/v1` routes; none configured = those routes answer 401. */
  readonly apiTokens?: readonly string[];
  /** Defaults to a new registry with Node's default metrics. */
  readonly metrics?: Registry;
  /** Autoloaded first: external connections (pg, kafka), then app plugins (repositories, relays). */
  readonly pluginsDir?: string;
  /** Autoloaded after the plugins: thin HTTP handlers. */
  readonly routesDir?: string;
  /** Passed to every autoloaded plugin and route. */
  readonly options?: Record<string, unknown>;
}

/**
 * The HTTP shell every service shares: request ids that double as correlation ids, health routes,
 * one error handler, and autoloaded plugins and routes. Builds; never listens (server.ts does).
 */
export async function buildHttpApp(options: HttpAppOptions): Promise<FastifyInstance> {
  const app = Fastify({
    loggerInstance: options.logger as FastifyBaseLogger,
    requestIdHeader: 'x-correlation-id',
    genReqId: () => randomUUID(),
    logController: new LogController({ requestIdLogLabel: 'correlationId' }),
    forceCloseConnections: true,
    // Unknown fields in a schema that forbids them are an error with a reason, not silently dropped.
    ajv: { customOptions: { removeAdditional: false } },
  });

  await app.register(
    fp(
      async (instance) => {
        instance.decorate('readiness', new Map<string, ReadinessCheck>());
        instance.decorate('metrics', options.metrics ?? createMetricsRegistry(options.name));
      },
      { name: 'health' },
    ),
  );

  app.get('/health/live', { logLevel: 'warn' }, async () => ({ status: 'ok', service: options.name }));
  app.get('/health/ready', { logLevel: 'warn' }, async (_request, reply) => {
    const checks: Record<string, string> = {};
    let ready = true;
    await Promise.all(
      [...app.readiness].map(async ([name, check]) => {
        try {
          await withTimeout(check(), 3_000, `${name} check timed out`);
          checks[name] = 'ok';
        } catch (error) {
          ready = false;
          checks[name] = error instanceof Error ? error.message : 'failed';
        }
      }),
    );
    return reply.code(ready ? 200 : 503).send({ status: ready ? 'ready' : 'not_ready', service: options.name, checks });
  });
  app.get('/metrics', { logLevel: 'warn' }, async (_request, reply) =>
    reply.type(app.metrics.contentType).send(await app.metrics.metrics()),
  );

  app.addHook('onRequest', bearerAuth(options.apiTokens ?? []));

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
    request.log.error({ err: error }, 'request failed');
    return reply.code(500).send({ error: 'INTERNAL', message: 'internal error', correlationId: request.id });
  });

  app.setNotFoundHandler((request, reply) =>
    reply.code(404).send({ error: 'NOT_FOUND', message: `no route ${request.method} ${request.url}` }),
  );

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

function withTimeout<T>(promise: Promise<T>, ms: number, message: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  return Promise.race([
    promise,
    new Promise<never>((_, reject) => {
      timer = setTimeout(() => reject(new Error(message)), ms);
    }),
  ]).finally(() => clearTimeout(timer));
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
    postgres: { connectionString: config.DATABASE_URL, applicationName: name, schema: config.DATABASE_SCHEMA },
    kafka: { brokers: brokerList(config.KAFKA_BROKERS), clientId: name },
    apiTokens: tokenList(config.API_TOKENS),
    pluginsDir: join(dir, 'plugins'),
    routesDir: join(dir, 'routes'),
    options: { config },
  });
}
