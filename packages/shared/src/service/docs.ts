/**
 * Every service's API document, generated from the routes themselves: @fastify/swagger collects each
 * route's schema as it registers, the scope it declares becomes the operation's `x-scope` and its
 * bearer security scheme, and the answers every route can give (400, 401, 403, 413, 429, 503, with
 * the error handler's `{ error, message }` body) are added where they apply. `/docs` serves Swagger
 * UI, `/docs/json` the OpenAPI 3.1 document.
 *
 * The docs are `public` (they describe routes, not data) but not exempt from rate limiting, as
 * probes and scrapers are: people load them, so they get a per-address limit of their own.
 *
 * `openApiDocument` gives the same document without starting the service (no database, no broker):
 * the routes a built app registered are replayed, schema and scope, into an empty fastify with the
 * same options. `server.js openapi` prints it; `npm run specs:gen` commits it (docs/api/).
 */
import swagger, { type FastifyDynamicSwaggerOptions } from '@fastify/swagger';
import swaggerUi from '@fastify/swagger-ui';
import Fastify, { type FastifyInstance, type HTTPMethods } from 'fastify';
import { clientRateLimit, scopePluginRoutes, scopes, type RouteAccess, type Scope } from './auth.js';
import { AppError } from './errors.js';

const DOCS_PREFIX = '/docs';
/** Per client address: a page load of Swagger UI is about ten requests. */
const DOCS_RATE_LIMIT = { max: 300, windowMs: 60_000 } as const;

/** The security scheme a token of each scope is presented under. */
const securitySchemeOf = (scope: Scope) => `${scope}Token`;

const ERROR = '#/components/schemas/Error';
const errorResponse = (description: string) => ({
  description,
  content: { 'application/json': { schema: { $ref: ERROR } } },
});

type Operation = Record<string, unknown> & { responses?: Record<string, unknown> };

/** The answers the shared shell gives on a route, whatever its handler does (service/http.ts, auth.ts). */
function shellResponses(operation: Operation): Record<string, unknown> {
  const guarded = operation['x-scope'] !== 'public';
  const body = operation.requestBody !== undefined;
  // Integer-like keys keep ascending order in an object, whatever order they are added in.
  const responses: Record<string, unknown> = {};
  if (body || Array.isArray(operation.parameters))
    responses[400] = errorResponse('The request does not match the schema; `message` says where');
  if (guarded) {
    responses[401] = errorResponse('No valid bearer token');
    responses[403] = errorResponse(`The token does not hold scope ${String(operation['x-scope'])}`);
    responses[429] = errorResponse('Rate limit of the token exceeded; see `retry-after`');
    responses[503] = errorResponse('A dependency (database, broker) is unavailable; retry after `retry-after`');
  }
  if (body) responses[413] = errorResponse('The body is larger than one Kafka message');
  return responses;
}

function openApiOptions(name: string): FastifyDynamicSwaggerOptions {
  return {
    openapi: {
      openapi: '3.1.0',
      info: {
        title: `${name} API`,
        version: '1',
        description:
          `The HTTP API of the ${name} service, generated from its routes. Each operation names the scope ` +
          'its bearer token must hold (`x-scope`; `public` needs none): `publish` for systems that feed work ' +
          "in, `operate` for operators, `read` for every read, `dsn` for the sender's bounce-mailbox hook, " +
          '`erase` for data-subject erasures (ADR 014). ' +
          'Errors are `{ error, message }`.',
      },
      components: {
        securitySchemes: Object.fromEntries(
          scopes.map((scope) => [
            securitySchemeOf(scope),
            {
              type: 'http',
              scheme: 'bearer',
              description: `A token listed in API_TOKENS_${scope.toUpperCase()} (or its _FILE): scope ${scope}.`,
            },
          ]),
        ),
        schemas: {
          Error: {
            type: 'object',
            required: ['error', 'message'],
            properties: {
              error: { type: 'string', description: 'A code: BAD_REQUEST, UNAUTHORIZED, CONFLICT, ...' },
              message: { type: 'string', description: 'Why, naming fields but never quoting values' },
              details: { type: 'object', description: 'Facts about the refusal, when there are any' },
              correlationId: { type: 'string', description: 'On a 5xx: the id to quote in a report' },
            },
          },
        },
      },
    },
    transform: ({ schema, url, route }) => {
      const scope = (route.config as { scope?: RouteAccess } | undefined)?.scope ?? 'public';
      return {
        url,
        schema: {
          ...schema,
          'x-scope': scope,
          security: scope === 'public' ? [] : [{ [securitySchemeOf(scope)]: [] }],
        } as typeof schema,
      };
    },
    transformObject: (document) => {
      const openapi = (document as { openapiObject: Record<string, unknown> }).openapiObject;
      const paths = (openapi.paths ?? {}) as Record<string, Record<string, Operation>>;
      for (const operations of Object.values(paths)) {
        for (const operation of Object.values(operations)) {
          operation.responses = { ...shellResponses(operation), ...operation.responses };
        }
      }
      return openapi;
    },
  };
}

/** @fastify/swagger on `app`: before any route, so it sees them all. */
export async function registerOpenApi(app: FastifyInstance, name: string): Promise<void> {
  await app.register(swagger, openApiOptions(name));
}

/**
 * Swagger UI at /docs (and the document at /docs/json) in a context of its own: public, limited
 * per client address. After the error and not-found handlers, which a context takes from its parent
 * when it is created.
 */
export async function registerDocsUi(app: FastifyInstance): Promise<void> {
  await app.register(async (docs) => {
    scopePluginRoutes(docs, 'public');
    docs.addHook(
      'onRequest',
      clientRateLimit(docs, {
        name: 'docs',
        ...DOCS_RATE_LIMIT,
        refuse: (retryIn) => new AppError('RATE_LIMITED', `too many requests for the API docs; retry in ${retryIn} s`),
      }),
    );
    await docs.register(swaggerUi, { routePrefix: DOCS_PREFIX });
  });
}

/**
 * The document `app` serves at /docs/json, without readying it: the routes it registered are
 * replayed into an empty fastify with the same options (the apps connect to PostgreSQL and Kafka
 * when they become ready, and @fastify/swagger answers only then).
 */
export async function openApiDocument(app: FastifyInstance, name: string): Promise<Record<string, unknown>> {
  const mirror = Fastify({ logger: false });
  // It serves nothing: the schemas are documented, not compiled.
  mirror.setValidatorCompiler(() => () => true);
  await mirror.register(swagger, openApiOptions(name));
  for (const route of app.registeredRoutes) {
    // fastify adds a HEAD to every GET (and @fastify/swagger leaves them out).
    if (route.method === 'HEAD') continue;
    mirror.route({
      method: route.method as HTTPMethods,
      url: route.url,
      ...(route.schema ? { schema: route.schema } : {}),
      config: { scope: route.scope },
      handler: async () => null,
    });
  }
  await mirror.ready();
  try {
    return structuredClone(mirror.swagger()) as Record<string, unknown>;
  } finally {
    await mirror.close();
  }
}
