/**
 * Who may call what. Every route declares its access in its config (`config: { scope: 'operate' }`)
 * and the decision is made on the route fastify matched, never on the URL string: the router decodes
 * `%76` to `v` and accepts absolute-form targets, so a check on `request.url` can be walked around,
 * while whatever spelling reaches a handler has also reached that handler's declared scope. A route
 * that declares nothing refuses to register, so a new route cannot be forgotten (the routes of a
 * third-party plugin, which take no config, get the scope of the context that registers it:
 * scopePluginRoutes); a request no route matches falls through to the 404 handler, which runs nothing.
 *
 * Scopes: `publish` (ingress: systems that feed work in), `operate` (pause, resume, resolve,
 * suppress, graces, experiments), `read` (every GET: they reveal candidates, addresses' hashes,
 * suppressions, send details), `dsn` (the sender's bounce-mailbox hook, nothing else: its token
 * lives in a mail system outside the platform, so it must not also stop sending or lift suppressions),
 * `erase` (a data subject's erasure, ADR 014: irreversible and audited, a duty apart from `operate`).
 * A token may hold several scopes; each scope may list several tokens,
 * so a rotation adds the new token before it removes the old one.
 */
import { createHmac, randomBytes, timingSafeEqual } from 'node:crypto';
import { isIP } from 'node:net';
import rateLimit from '@fastify/rate-limit';
import type { FastifyInstance, FastifyReply, FastifyRequest, FastifySchema, onRequestAsyncHookHandler } from 'fastify';
import fp from 'fastify-plugin';
import { ConfigError, type BaseConfig } from '../config.js';
import { reloadEvery } from '../security/reload.js';
import { readTextFile, type ReadFile } from '../security/secrets.js';
import { AppError } from './errors.js';
import { CountingStore } from './rate-limit-store.js';

export const scopes = ['publish', 'operate', 'read', 'dsn', 'erase'] as const;
export type Scope = (typeof scopes)[number];
/** `public` needs no token (health, metrics); every other value is the scope a token must hold. */
export type RouteAccess = Scope | 'public';

export type ScopedTokens = Readonly<Record<Scope, readonly string[]>>;

export interface Principal {
  /** Stable within this process only (an HMAC under a per-process key): a rate-limit key, never the token. */
  readonly id: string;
  readonly scopes: ReadonlySet<Scope>;
}

export type Authentication =
  | { readonly kind: 'principal'; readonly principal: Principal }
  | { readonly kind: 'anonymous'; readonly reason: string };

export interface RegisteredRoute {
  readonly method: string;
  /** The pattern as registered, prefix included (`/v1/suppressions/:email`). */
  readonly url: string;
  readonly scope: RouteAccess;
  readonly schema: FastifySchema | undefined;
}

declare module 'fastify' {
  interface FastifyContextConfig {
    /** Required on every route: who may call it (see service/auth.ts). */
    scope?: RouteAccess;
  }
  interface FastifyRequest {
    authentication: Authentication;
  }
  interface FastifyInstance {
    /** Every route registered so far with its access: what the route tests walk. */
    readonly registeredRoutes: readonly RegisteredRoute[];
  }
}

const envName = (scope: Scope) => `API_TOKENS_${scope.toUpperCase()}`;

function isRouteAccess(value: unknown): value is RouteAccess {
  return value === 'public' || (scopes as readonly unknown[]).includes(value);
}

/** Comma- or newline-separated tokens; blank entries and `#` comment lines are ignored. */
export function parseTokens(text: string): string[] {
  // Comments are whole lines, commas and all (`# revoked, incident 42` is no token).
  return text
    .split(/\r?\n|\r/)
    .filter((line) => !line.trim().startsWith('#'))
    .flatMap((line) => line.split(','))
    .map((t) => t.trim())
    .filter((t) => t.length > 0);
}

/** Printable ASCII without space or comma: what a client can send after `Bearer `, and what a list can hold. */
const TOKEN = /^[\x21-\x2b\x2d-\x7e]+$/;

function checkedTokens(where: string, tokens: string[]): string[] {
  const bad = tokens.findIndex((t) => !TOKEN.test(t));
  if (bad >= 0)
    throw new ConfigError(
      `${where}: token ${bad + 1} holds a character no client can send (a token is printable ASCII without spaces or commas)`,
    );
  return tokens;
}

/**
 * The tokens of each scope: `API_TOKENS_<SCOPE>` (comma-separated) plus the lines of the file named by
 * `API_TOKENS_<SCOPE>_FILE` (a mounted Secret). An unreadable file is a ConfigError naming the variable.
 */
export function scopedTokensFrom(config: BaseConfig, readFile: ReadFile = readTextFile): ScopedTokens {
  const read = (scope: Scope): string[] => {
    const inline = checkedTokens(envName(scope), parseTokens(config[envName(scope) as keyof BaseConfig] as string));
    const variable = `${envName(scope)}_FILE`;
    const file = config[variable as keyof BaseConfig] as string;
    if (file === '') return inline;
    let text: string;
    try {
      text = readFile(file);
    } catch (error) {
      const reason = (error as NodeJS.ErrnoException).code ?? (error instanceof Error ? error.message : String(error));
      throw new ConfigError(`${variable}: cannot read ${file} (${reason})`);
    }
    const where = `${variable} (${file})`;
    if (text.startsWith('\uFEFF'))
      throw new ConfigError(`${where} begins with a byte-order mark (save it without one)`);
    // An empty file (a Secret key never filled in, a rotation half done) would revoke every token of
    // the scope at once: at start it stops the start, on a re-read the tokens in hand stay
    // (accessControl). Revoking them all is said in words: a file of comments only (`# none`).
    if (text.trim() === '')
      throw new ConfigError(`${where} is empty (to revoke every token of the scope, write a comment: # none)`);
    return [...inline, ...checkedTokens(where, parseTokens(text))];
  };
  return {
    publish: read('publish'),
    operate: read('operate'),
    read: read('read'),
    dsn: read('dsn'),
    erase: read('erase'),
  };
}

/**
 * Constant-time token checks that leak neither which token matched nor any token's length: both
 * sides are HMACed under a random per-process key, and the fixed-size digests are compared with
 * timingSafeEqual against every configured token, always.
 */
export class TokenVerifier {
  private readonly entries: ReadonlyArray<{ readonly digest: Buffer; readonly scope: Scope }>;
  private readonly configuredScopes: ReadonlySet<Scope>;

  /** `key`: kept across reloads, so a token's id (its rate-limit bucket) survives a rotation. */
  constructor(
    tokens: ScopedTokens,
    private readonly key: Buffer = randomBytes(32),
  ) {
    this.entries = scopes.flatMap((scope) => tokens[scope].map((token) => ({ digest: this.digest(token), scope })));
    this.configuredScopes = new Set(this.entries.map((e) => e.scope));
  }

  isConfigured(scope: Scope): boolean {
    return this.configuredScopes.has(scope);
  }

  verify(presented: string): Principal | null {
    const digest = this.digest(presented);
    const granted = new Set<Scope>();
    for (const entry of this.entries) {
      if (timingSafeEqual(entry.digest, digest)) granted.add(entry.scope);
    }
    return granted.size > 0 ? { id: digest.subarray(0, 12).toString('base64url'), scopes: granted } : null;
  }

  private digest(token: string): Buffer {
    return createHmac('sha256', this.key).update(token, 'utf8').digest();
  }
}

/**
 * Parsed strictly, on ASCII only: spaces between scheme and token (RFC 9110 `1*SP`), optional
 * spaces and tabs around, a token of printable ASCII without commas. `String.prototype.trim` and
 * `\s` would also strip U+00A0, U+2028, U+FEFF and the other Unicode spaces, so `Bearer <token>\u00A0`
 * passed as `<token>`; now any other byte makes the header malformed.
 */
const BEARER = /^[ \t]*Bearer +([\x21-\x2b\x2d-\x7e]+)[ \t]*$/i;
const BLANK = /^[ \t]*$/;

/** Reads the Authorization header; never throws (the route decides whether anonymity is fine). */
export function authenticate(header: string | undefined, verifier: TokenVerifier): Authentication {
  if (header === undefined || BLANK.test(header)) {
    return { kind: 'anonymous', reason: 'missing bearer token (Authorization: Bearer <token>)' };
  }
  const scheme = /^[ \t]*([^ \t]+)/.exec(header)?.[1] ?? '';
  if (scheme.toLowerCase() !== 'bearer') {
    return { kind: 'anonymous', reason: 'unsupported authorization scheme: use Authorization: Bearer <token>' };
  }
  const match = BEARER.exec(header);
  if (!match?.[1]) {
    return { kind: 'anonymous', reason: 'malformed Authorization header: expected exactly one bearer token' };
  }
  const principal = verifier.verify(match[1]);
  return principal ? { kind: 'principal', principal } : { kind: 'anonymous', reason: 'invalid bearer token' };
}

/** 401 without a valid token, 403 with a valid token that lacks the route's scope. */
export function authorize(access: RouteAccess | undefined, authentication: Authentication, verifier: TokenVerifier) {
  if (access === 'public') return;
  if (!isRouteAccess(access)) {
    // Unreachable while the onRoute check holds; kept so a mistake fails closed, not open.
    throw new AppError('FORBIDDEN', 'this route declares no scope');
  }
  if (authentication.kind === 'anonymous') {
    const hint = verifier.isConfigured(access)
      ? ''
      : ` (no tokens are configured for scope ${access}: set ${envName(access)} or ${envName(access)}_FILE)`;
    throw new AppError('UNAUTHORIZED', `${authentication.reason}${hint}`, { scope: access });
  }
  if (!authentication.principal.scopes.has(access)) {
    throw new AppError('FORBIDDEN', `this token does not hold scope ${access}, which this route requires`, {
      scope: access,
    });
  }
}

/**
 * The client address a per-address bucket is named by. Behind a proxy trusted by hop count
 * (TRUST_PROXY=1), `request.ip` is whatever the nearest untrusted hop wrote into X-Forwarded-For,
 * and a caller that reaches the pod directly writes it itself: unique 8 KB strings were a bucket
 * each (20,000 of them held 166 MB in one limiter). A value that is no IP address is no address of
 * anyone: all of them share one bucket, and no bucket keeps a caller's bytes.
 */
function clientBucket(request: FastifyRequest): string {
  const address = request.ip;
  // 45 characters: the longest spelling of an IPv6 address; `isIP` also takes a zone of any length.
  return isIP(address) === 0 || address.length > 45 ? 'not-an-address' : address.toLowerCase();
}

export interface AccessControlOptions {
  /** The tokens, or how to read them again: files named by `*_FILE` change when a Secret is rotated. */
  readonly tokens: ScopedTokens | (() => ScopedTokens);
  /** With `tokens` a function: how often to read them again (a revoked token stops working then). */
  readonly reloadMs?: number;
  /** Requests per window per token (per client address without a valid one). */
  readonly rateLimit: { readonly max: number; readonly windowMs: number };
}

/**
 * Registers the route check, the route catalogue, and three onRequest hooks in order: authenticate
 * (never throws), rate limit, authorize. All of it runs before the body is read. The limit's bucket
 * is the token when it is valid, else the client address: made-up tokens buy no fresh bucket, and no
 * number of them, from the same address or any other, uses up a valid token's (a DSN hook's token is
 * never refused because someone posts garbage at its route). A caller with a purpose of its own (the
 * DSN hook) gets a token of its own, and so a bucket of its own.
 */
export const accessControl = fp(
  async (app: FastifyInstance, options: AccessControlOptions) => {
    const key = randomBytes(32);
    const read = typeof options.tokens === 'function' ? options.tokens : () => options.tokens as ScopedTokens;
    const first = read();
    let verifier = new TokenVerifier(first, key);
    if (typeof options.tokens === 'function' && options.reloadMs !== undefined) {
      const tokens = reloadEvery(first, read, {
        intervalMs: options.reloadMs,
        same: (a, b) => scopes.every((s) => a[s].join('\n') === b[s].join('\n')),
        onChange: (next) => {
          verifier = new TokenVerifier(next, key);
          app.log.info({ tokens: Object.fromEntries(scopes.map((s) => [s, next[s].length])) }, 'API tokens reloaded');
        },
        // A Secret mid-update or a file gone: the tokens in hand stay valid rather than none.
        onError: (error) =>
          app.log.warn({ err: error }, 'API tokens could not be read again; keeping the previous ones'),
      });
      app.addHook('onClose', async () => tokens.stop());
    }
    const routes: RegisteredRoute[] = [];
    app.decorate('registeredRoutes', routes);
    // Set by the first onRequest hook on every request; null only before it runs.
    app.decorateRequest('authentication', null as never);

    app.addHook('onRoute', function (route) {
      const access = route.config?.scope ?? pluginScopeOf(this);
      const methods = Array.isArray(route.method) ? route.method : [route.method];
      if (!isRouteAccess(access)) {
        throw new Error(
          `${methods.join(',')} ${route.url} declares no access: add config: { scope: 'publish' | 'operate' | 'read' | 'dsn' | 'erase' | 'public' }`,
        );
      }
      // Written into the route's config, which fastify builds after these hooks: authorize and the
      // rate limiter read it there, as they read a declared one.
      route.config = { ...route.config, scope: access };
      for (const method of methods) routes.push({ method, url: route.url, scope: access, schema: route.schema });
    });

    app.addHook('onRequest', async (request) => {
      request.authentication = authenticate(request.headers.authorization, verifier);
    });

    const windowSeconds = Math.round(options.rateLimit.windowMs / 1000);
    await app.register(rateLimit, {
      global: false,
      max: options.rateLimit.max,
      timeWindow: options.rateLimit.windowMs,
      store: CountingStore,
      // Probes and scrapers are not clients; they must never be throttled into a restart. The public
      // routes people and providers call limit themselves (credentialRateLimit, clientRateLimit).
      allowList: (request: FastifyRequest) => request.routeOptions.config.scope === 'public',
      keyGenerator: (request: FastifyRequest) =>
        request.authentication.kind === 'principal'
          ? `token:${request.authentication.principal.id}`
          : `ip:${clientBucket(request)}`,
      errorResponseBuilder: (_request, context) =>
        new AppError(
          'RATE_LIMITED',
          `rate limit exceeded: at most ${context.max} requests per ${windowSeconds} s per token; retry in ${context.after}`,
        ),
    });
    app.addHook('onRequest', app.rateLimit());

    app.addHook('onRequest', async (request) => {
      // No route matched: the not-found handler answers, and it runs nothing.
      if (request.is404) return;
      authorize(request.routeOptions.config.scope, request.authentication, verifier);
    });
  },
  { name: 'access-control' },
);

const PLUGIN_SCOPE = Symbol('outreach.pluginScope');

/**
 * For a plugin that registers routes of its own and takes no route config (Swagger UI, static
 * files): every route registered in `instance` (the context that registers that plugin, and its
 * children) that declares no scope gets `access`. A route that declares one keeps it.
 */
export function scopePluginRoutes(instance: FastifyInstance, access: RouteAccess): void {
  (instance as unknown as Record<symbol, RouteAccess>)[PLUGIN_SCOPE] = access;
}

/** Child contexts inherit from their parent's object, so a context inside a scoped one is scoped too. */
function pluginScopeOf(instance: FastifyInstance): RouteAccess | undefined {
  return (instance as unknown as Record<symbol, RouteAccess | undefined>)[PLUGIN_SCOPE];
}

export interface CredentialRateLimit {
  /**
   * After the request's own credential verified (a signed message, an unsubscribe link): counts in
   * that credential's bucket for this purpose, and throws the route's refusal once it is full.
   * `credential` names the credential (an SNS MessageId, a signature, a send), never a secret.
   */
  verified(request: FastifyRequest, reply: FastifyReply, credential: string): Promise<void>;
  /**
   * After it did not verify: counts in the client address's bucket for this purpose, and throws a 429
   * once it is full (call it before logging the refusal, so a flood is not logged line by line).
   */
  unverified(request: FastifyRequest, reply: FastifyReply): Promise<void>;
}

/**
 * Limits for a `public` route whose caller proves itself inside the request (SNS's and SendGrid's
 * signatures, the HMAC in an unsubscribe link), so the check comes first and the bucket follows from
 * its verdict. A bucket per client address before the check would let anyone who shares that
 * address (everyone, behind an ingress without TRUST_PROXY) use up the budget of valid callers:
 * 6,100 garbage posts in 1.5 s once got a validly signed SNS complaint refused for 20 s, and SNS
 * gives up after a few retries. Checking first costs at most the route's body limit and one
 * signature check per request; what verified is counted per credential (a replay of one signed
 * message uses up only its own bucket), what did not per client address, each per `purpose`.
 */
export function credentialRateLimit(
  app: FastifyInstance,
  options: {
    readonly purpose: string;
    readonly max: number;
    readonly windowMs: number;
    /** The refusal of a verified caller: 429 for a person, 503 for a webhook whose sender retries only that. */
    readonly refuse: (retryInSeconds: number) => AppError;
  },
): CredentialRateLimit {
  // The limiter names a bucket from the request alone, so the verified credential rides along here.
  const credentials = new WeakMap<FastifyRequest, string>();
  const limiter = (bucket: (request: FastifyRequest) => string) =>
    app.createRateLimit({
      max: options.max,
      timeWindow: options.windowMs,
      allowList: () => false,
      keyGenerator: bucket,
    });
  const verifiedLimiter = limiter((request) => `${options.purpose}:verified:${credentials.get(request) ?? ''}`);
  const refusedLimiter = limiter((request) => `${options.purpose}:refused:${clientBucket(request)}`);
  const windowSeconds = Math.round(options.windowMs / 1000);
  const count = async (
    check: ReturnType<typeof limiter>,
    request: FastifyRequest,
    reply: FastifyReply,
    refuse: (retry: number) => AppError,
  ) => {
    const verdict = await check(request);
    if (verdict.isAllowed || !verdict.isExceeded) return;
    reply.header('retry-after', String(verdict.ttlInSeconds));
    throw refuse(verdict.ttlInSeconds);
  };
  return {
    verified: (request, reply, credential) => {
      credentials.set(request, credential);
      return count(verifiedLimiter, request, reply, options.refuse);
    },
    unverified: (request, reply) =>
      count(
        refusedLimiter,
        request,
        reply,
        (retry) =>
          new AppError(
            'RATE_LIMITED',
            `too many refused requests from this client: at most ${options.max} per ${windowSeconds} s; retry in ${retry} s`,
          ),
      ),
  };
}

/**
 * An onRequest hook that limits a `public` route per client address. accessControl's limiter lets
 * every public route through (probes and scrapers must never be throttled); a public route that
 * people or webhooks call (an unsubscribe link, a provider's callback) adds this. Each call makes
 * its own bucket per address, so one kind of caller cannot use up another's. `refuse` builds the
 * error: 429 for a person, 503 for a webhook whose sender retries only server errors.
 */
export function clientRateLimit(
  app: FastifyInstance,
  options: {
    readonly name: string;
    readonly max: number;
    readonly windowMs: number;
    readonly refuse: (retryInSeconds: number) => AppError;
  },
): onRequestAsyncHookHandler {
  const limiter = app.createRateLimit({
    max: options.max,
    timeWindow: options.windowMs,
    allowList: () => false,
    keyGenerator: (request: FastifyRequest) => `${options.name}:${clientBucket(request)}`,
  });
  return async (request, reply) => {
    const verdict = await limiter(request);
    if (verdict.isAllowed || !verdict.isExceeded) return;
    reply.header('retry-after', String(verdict.ttlInSeconds));
    throw options.refuse(verdict.ttlInSeconds);
  };
}
