/**
 * What every console request goes through: security headers, the form parser, the session (a
 * signed cookie, or the OIDC proxy's headers when they can be believed), sign-in for pages, the
 * CSRF token on every POST, and the operator role for actions. A route says what it is in its
 * config: `console: 'open'` (sign-in, assets), `'page'` (signed in), `'action'` (a POST by an operator).
 */
import { readFileSync } from 'node:fs';
import type { FastifyError, FastifyReply, FastifyRequest } from 'fastify';
import fp from 'fastify-plugin';
import {
  AppError,
  brokerList,
  ConfigError,
  kafkaSecurityFromEnv,
  readSecretFile,
  reloadingSecret,
} from '@outreach/shared';
import { AuditRepository } from '../adapters/audit-repository.js';
import { DeadLetters } from '../adapters/dead-letters.js';
import { OutcomeSampler } from '../adapters/outcome-sampler.js';
import { Services } from '../adapters/services.js';
import { LoginLimiter } from '../security/login-limiter.js';
import { parseCidrs, proxyIdentity, type ProxyTrust } from '../security/proxy.js';
import { csrfMatches, newSession, signSession, verifySession, type Session } from '../security/session.js';
import { parseUsers, type LocalUser } from '../security/users.js';
import type { Config } from '../config.js';
import { notice, sendPage } from '../views/layout.js';

export type ConsoleAccess = 'open' | 'page' | 'action';

declare module 'fastify' {
  interface FastifyContextConfig {
    console?: ConsoleAccess;
  }
  interface FastifyRequest {
    session: Session;
  }
  interface FastifyInstance {
    readonly services: Services;
    readonly audit: AuditRepository;
    /** The DLQs, when KAFKA_BROKERS is set. */
    readonly deadLetters: DeadLetters | undefined;
    /** The sender's outcome counters over the last CONSOLE_OUTCOME_WINDOW_MS (the overview's chart). */
    readonly outcomes: OutcomeSampler;
    /** Signs and checks what a page hands itself back (a dry run's permission to replay). */
    readonly consoleKey: Buffer;
    readonly localUsers: () => readonly LocalUser[];
    /** Sign-in throttling for the local users form (security/login-limiter.ts). */
    readonly loginLimiter: LoginLimiter;
    readonly consoleConfig: Config;
    /** Issues `session` as the request's cookie (after sign-in, sign-out). */
    setSession(reply: FastifyReply, session: Session): void;
  }
}

/** A strict policy: scripts and styles from the console alone, nothing inline, no framing, forms post home. */
export const CONTENT_SECURITY_POLICY = [
  "default-src 'none'",
  "script-src 'self'",
  "style-src 'self'",
  "img-src 'self'",
  "connect-src 'self'",
  "form-action 'self'",
  "base-uri 'none'",
  "frame-ancestors 'none'",
].join('; ');

const MAX_FORM_BYTES = 16 * 1024;

function cookieValue(header: string | undefined, name: string): string | undefined {
  if (!header) return undefined;
  for (const part of header.split(';')) {
    const index = part.indexOf('=');
    if (index > 0 && part.slice(0, index).trim() === name) return part.slice(index + 1).trim();
  }
  return undefined;
}

export default fp(
  async (app, options: { config: Config }) => {
    const { config } = options;
    const key = (() => {
      const inline = config.CONSOLE_SESSION_KEY;
      const file = config.CONSOLE_SESSION_KEY_FILE;
      if (inline !== '' && file !== '')
        throw new ConfigError('invalid configuration: set one of CONSOLE_SESSION_KEY and CONSOLE_SESSION_KEY_FILE');
      const value = file !== '' ? readSecretFile('CONSOLE_SESSION_KEY_FILE', file) : inline;
      if (Buffer.byteLength(value) < 32)
        throw new ConfigError('invalid configuration: CONSOLE_SESSION_KEY(_FILE) must hold at least 32 bytes');
      return Buffer.from(value);
    })();
    const secrets = { intervalMs: config.SECRET_FILE_REFRESH_MS, logger: app.log };
    const env = process.env;
    const readToken = reloadingSecret(env, 'CONSOLE_READ_TOKEN', secrets);
    const operateToken = reloadingSecret(env, 'CONSOLE_OPERATE_TOKEN', secrets);
    const proxySecret = reloadingSecret(env, 'CONSOLE_PROXY_SECRET', secrets);
    app.addHook('onClose', async () => {
      readToken.stop();
      operateToken.stop();
      proxySecret.stop();
    });
    let trust: ProxyTrust | undefined;
    if (config.CONSOLE_PROXY_CIDRS.trim() !== '') {
      if (proxySecret.current() === undefined)
        throw new ConfigError('invalid configuration: CONSOLE_PROXY_CIDRS needs CONSOLE_PROXY_SECRET_FILE');
      let cidrs;
      try {
        cidrs = parseCidrs(config.CONSOLE_PROXY_CIDRS);
      } catch (error) {
        throw new ConfigError(`invalid configuration: CONSOLE_PROXY_CIDRS: ${(error as Error).message}`);
      }
      const groups = (text: string) =>
        new Set(
          text
            .split(',')
            .map((g) => g.trim())
            .filter(Boolean),
        );
      trust = {
        cidrs,
        secret: () => proxySecret.current(),
        emailHeader: config.CONSOLE_PROXY_EMAIL_HEADER,
        groupsHeader: config.CONSOLE_PROXY_GROUPS_HEADER,
        secretHeader: config.CONSOLE_PROXY_SECRET_HEADER,
        operatorGroups: groups(config.CONSOLE_OPERATOR_GROUPS),
        readerGroups: groups(config.CONSOLE_READER_GROUPS),
      };
    }
    let users: readonly LocalUser[] = [];
    if (config.CONSOLE_USERS_FILE !== '') {
      try {
        users = parseUsers(readFileSync(config.CONSOLE_USERS_FILE, 'utf8'));
      } catch (error) {
        const reason = (error as NodeJS.ErrnoException).code ?? (error as Error).message;
        throw new ConfigError(`invalid configuration: CONSOLE_USERS_FILE (${config.CONSOLE_USERS_FILE}): ${reason}`);
      }
    }
    if (users.length === 0 && trust === undefined)
      throw new ConfigError('invalid configuration: no sign-in: set CONSOLE_USERS_FILE or CONSOLE_PROXY_CIDRS');

    app.decorate('consoleConfig', config);
    app.decorate('consoleKey', key);
    let deadLetters: DeadLetters | undefined;
    if (config.KAFKA_BROKERS.trim() !== '') {
      try {
        deadLetters = new DeadLetters({
          brokers: brokerList(config.KAFKA_BROKERS),
          security: kafkaSecurityFromEnv(process.env),
          topicPrefix: config.TOPIC_PREFIX,
          registryUrl: config.SCHEMA_REGISTRY_URL || undefined,
          timeoutMs: config.DLQ_READ_TIMEOUT_MS,
          replayTimeoutMs: replayTimeoutMs(config),
        });
      } catch (error) {
        throw new ConfigError(`invalid configuration: the console's Kafka settings: ${(error as Error).message}`);
      }
    }
    app.decorate('deadLetters', deadLetters);
    app.decorate('localUsers', () => users);
    app.decorate('loginLimiter', new LoginLimiter());
    app.decorate('audit', new AuditRepository(app.pg));
    const services = new Services({
      urls: {
        planner: config.PLANNER_URL,
        sender: config.SENDER_URL,
        experiment: config.EXPERIMENT_URL,
        liveness: config.LIVENESS_URL,
      },
      readToken: () => readToken.current(),
      operateToken: () => operateToken.current(),
      timeoutMs: config.UPSTREAM_TIMEOUT_MS,
    });
    app.decorate('services', services);
    const outcomes = new OutcomeSampler(services, config.CONSOLE_OUTCOME_SAMPLE_MS, config.CONSOLE_OUTCOME_WINDOW_MS);
    app.decorate('outcomes', outcomes);
    app.addHook('onReady', async () => outcomes.start());
    app.addHook('onClose', async () => outcomes.stop());

    const cookieName = config.CONSOLE_COOKIE_SECURE ? '__Host-console_session' : 'console_session';
    const setSession = (reply: FastifyReply, session: Session) => {
      const maxAge = Math.max(0, Math.floor((session.exp - Date.now()) / 1000));
      const secure = config.CONSOLE_COOKIE_SECURE ? '; Secure' : '';
      reply.header(
        'set-cookie',
        `${cookieName}=${signSession(session, key)}; Path=/; HttpOnly; SameSite=Strict; Max-Age=${maxAge}${secure}`,
      );
    };
    app.decorate('setSession', setSession);
    app.decorateRequest('session', undefined as unknown as Session);

    // Forms arrive urlencoded; the fields become a flat object of strings (the last of a repeated name).
    app.addContentTypeParser(
      'application/x-www-form-urlencoded',
      { parseAs: 'string', bodyLimit: MAX_FORM_BYTES },
      (_request, body, done) => done(null, Object.fromEntries(new URLSearchParams(body as string))),
    );

    app.addHook('onSend', async (_request, reply, payload) => {
      reply.header('content-security-policy', CONTENT_SECURITY_POLICY);
      reply.header('x-frame-options', 'DENY');
      reply.header('x-content-type-options', 'nosniff');
      reply.header('referrer-policy', 'same-origin');
      reply.header('cross-origin-opener-policy', 'same-origin');
      if (!reply.hasHeader('cache-control')) reply.header('cache-control', 'no-store');
      return payload;
    });

    app.addHook('onRequest', async (request: FastifyRequest, reply: FastifyReply) => {
      const access = request.routeOptions.config.console;
      if (access === undefined) return;
      const fromCookie = verifySession(cookieValue(request.headers.cookie, cookieName), [key]);
      const vouched = proxyIdentity(trust, request.socket.remoteAddress, request.raw.headersDistinct);
      let session: Session | undefined;
      if (vouched) {
        // The proxy speaks for every request: its identity, with the role its groups give now.
        session =
          fromCookie?.via === 'proxy' && fromCookie.user === vouched.user && fromCookie.role === vouched.role
            ? fromCookie
            : newSession({ ...vouched, via: 'proxy' }, config.CONSOLE_SESSION_TTL_MS);
      } else if (fromCookie && fromCookie.via !== 'proxy') {
        session = fromCookie;
      }
      if (session === undefined) session = newSession(null, config.CONSOLE_SESSION_TTL_MS);
      if (session !== fromCookie) setSession(reply, session);
      request.session = session;
    });

    // A console route answers a bad value (a query's, a form's) with a page that says what is wrong and
    // a 4xx, not the shell's JSON; what is not the caller's fault goes on to the shell's handler.
    app.addHook('onRoute', (route) => {
      if (route.config?.console !== undefined && route.errorHandler === undefined) route.errorHandler = pageError;
    });

    // Before validation: a forged or tokenless POST is a 403, whatever its fields.
    app.addHook('preValidation', async (request, reply) => {
      const access = request.routeOptions.config.console;
      if (access === undefined) return;
      const { session } = request;
      if (access !== 'open' && session.user === null) {
        if (request.method === 'GET') {
          return reply.redirect(`/login?next=${encodeURIComponent(request.url)}`, 303);
        }
        return refuse(request, reply, 'sign in first');
      }
      if (request.method !== 'GET' && request.method !== 'HEAD') {
        // A cross-site form is refused before its token is even looked at; a same-site one needs the token.
        if (request.headers['sec-fetch-site'] === 'cross-site') return refuse(request, reply, 'a cross-site request');
        const token = (request.body as Record<string, unknown> | undefined)?._csrf;
        if (!csrfMatches(session, token))
          return refuse(request, reply, 'the form has expired or did not come from this console; reload the page');
      }
      if (access === 'action' && session.role !== 'operator') return refuse(request, reply, 'your role may only read');
      return undefined;
    });
  },
  { name: 'console', dependencies: ['postgres'] },
);

/**
 * A replay's own timeout: six DLQ reads, but within the HTTP request's (four fifths of it), so the
 * page answers with what happened before the connection is cut and the audit says so.
 */
export function replayTimeoutMs(config: Pick<Config, 'DLQ_READ_TIMEOUT_MS' | 'HTTP_REQUEST_TIMEOUT_MS'>): number {
  return Math.min(config.DLQ_READ_TIMEOUT_MS * 6, Math.floor(config.HTTP_REQUEST_TIMEOUT_MS * 0.8));
}

/**
 * A console route's error as a page: a value that fails its schema (which field, and what it must
 * be; never the value, which may be an address), or another 4xx with its reason. 5xx errors are
 * thrown on to the shell's handler (logged, with a correlation id).
 */
function pageError(error: FastifyError | AppError, request: FastifyRequest, reply: FastifyReply) {
  const invalid = error instanceof AppError ? undefined : error.validation ? error : undefined;
  const status = error instanceof AppError ? error.statusCode : invalid ? 400 : (error.statusCode ?? 500);
  if (status >= 500 || status < 400) throw error;
  const why = invalid ? validationProblem(invalid) : error.message;
  const shown = notice('refused', `Refused (${status}): ${why}.`);
  if (request.headers['hx-request'] === 'true')
    return reply.code(status).type('text/html; charset=utf-8').send(shown.value);
  return sendPage(reply, request, 'Refused', shown, '', status);
}

/** What a schema refused, by field: `reason must be one of "idle", ...; minAgeMinutes must match ...`. */
function validationProblem(error: FastifyError): string {
  const byField = new Map<string, { allowed: string[]; other: string[] }>();
  for (const issue of error.validation ?? []) {
    const field =
      issue.instancePath.replace(/^\//, '').replaceAll('/', '.') ||
      String(issue.params?.missingProperty ?? error.validationContext ?? 'the request');
    const said = byField.get(field) ?? { allowed: [], other: [] };
    // A union's alternatives each say "must be equal to constant": the allowed values, named once.
    // An empty value (a form's blank field) is allowed by most; naming it says nothing.
    if (issue.keyword === 'const') {
      const value = JSON.stringify(issue.params?.allowedValue);
      if (value !== '""') said.allowed.push(value);
    } else if (issue.keyword !== 'anyOf' && issue.message) said.other.push(issue.message);
    byField.set(field, said);
  }
  return [...byField]
    .map(([field, { allowed, other }]) => {
      const musts = [...(allowed.length > 0 ? [`must be one of ${allowed.join(', ')}`] : []), ...other];
      return `${field} ${musts.join(', or ') || 'is not valid'}`;
    })
    .join('; ');
}

function refuse(request: FastifyRequest, reply: FastifyReply, why: string) {
  return sendPage(reply, request, 'Refused', notice('refused', `Refused: ${why}.`), '', 403);
}
