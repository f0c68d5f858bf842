/**
 * What every service's route test (test/routes.int.test.ts) sets up the same way: the service
 * started once for the file with the route tests' scoped tokens, the routes every service's shell
 * registers, a bearer header, the two tests of its routes' scopes, and the fuzz run's verdict.
 */
import { join } from 'node:path';
import type { TProperties } from '@sinclair/typebox';
import type { FastifyInstance } from 'fastify';
import { afterAll, beforeAll, expect, it } from 'vitest';
import type { RegisteredRoute, Scope } from '@outreach/shared';
import {
  DOCS_SCOPES,
  fuzzRoutes,
  probeRouteGuards,
  ROUTE_TEST_ALL_SCOPES,
  ROUTE_TEST_ENV,
  ROUTE_TEST_TOKENS,
  scopeTable,
  type FuzzOptions,
} from './http-attacks.js';
import type { ServiceUnderTest } from './service-env.js';

/** The routes of every service's shell (docs, health, metrics), as scopeTable lists them: public. */
export const SHELL_SCOPES: Readonly<Record<string, 'public'>> = {
  ...DOCS_SCOPES,
  'GET /health/live': 'public',
  'GET /health/ready': 'public',
  'GET /metrics': 'public',
};

/** The service whose own test/ folder is `testDir` (its tests' import.meta.dirname): its src/server.ts is the process entry. */
export function ownService<P extends TProperties>(
  testDir: string,
  service: Omit<ServiceUnderTest<P>, 'entry'>,
): ServiceUnderTest<P> {
  return { ...service, entry: join(testDir, '..', 'src', 'server.ts') };
}

/** The Authorization header carrying `token`. */
export const bearer = (token: string): { authorization: string } => ({ authorization: `Bearer ${token}` });

/** A service's test environment as routesUnderTest needs it (serviceTestEnv's, or a service's own harness). */
export interface StartsApp {
  startApp(overrides?: Record<string, string>): Promise<FastifyInstance>;
  cleanup(): Promise<void>;
}

export interface AppUnderTest<T extends StartsApp> {
  /** The service's test environment. */
  readonly t: T;
  /** Its app, started in-process and ready. */
  readonly app: FastifyInstance;
}

/**
 * One service for a whole test file: `start` (given ROUTE_TEST_ENV, the route tests' scoped tokens,
 * under `env`) and its app in-process before the file's tests, cleaned up after them. `env` may be
 * computed (a free port); `t` and `app` are read inside tests and hooks, once beforeAll has run.
 */
export function routesUnderTest<T extends StartsApp>(
  start: (env: Record<string, string>) => Promise<T>,
  env: () => Record<string, string> | Promise<Record<string, string>> = () => ({}),
): AppUnderTest<T> {
  let t: T | undefined;
  let app: FastifyInstance | undefined;
  beforeAll(async () => {
    t = await start({ ...ROUTE_TEST_ENV, ...(await env()) });
    app = await t.startApp();
  });
  afterAll(() => t?.cleanup());
  const started = <V>(value: V | undefined): V => {
    if (value === undefined)
      throw new Error('routesUnderTest: the service is not started (read t and app in tests; did beforeAll fail?)');
    return value;
  };
  return {
    get t() {
      return started(t);
    },
    get app() {
      return started(app);
    },
  };
}

/**
 * The tests of the routes' scopes every service passes alike: every route declares the scope `scopes`
 * gives it (`why` says the rule; the shell's routes are public), and every /v1 route refuses a request
 * without a token whatever its path's spelling, and a token of the wrong scope (probeRouteGuards).
 */
export function routeScopeTests(
  svc: AppUnderTest<StartsApp>,
  why: string,
  scopes: Readonly<Record<string, Scope | 'public'>>,
): void {
  it(`declares a scope on every route: ${why}`, () => {
    expect(scopeTable(svc.app)).toEqual({ ...SHELL_SCOPES, ...scopes });
  });

  it('refuses every /v1 route without a token whatever the spelling, and with the wrong scope', async () => {
    expect(await probeRouteGuards(svc.app, { tokens: ROUTE_TEST_TOKENS })).toEqual([]);
  });
}

/**
 * The route tests' fuzz run (fuzzRoutes) with a token holding every scope: no violation (no 5xx, every
 * 4xx with a reason), and more than ten answers of each kind `pastValidation` names: the fuzzer got
 * past validation too, or it tested only the validator.
 */
export async function expectFuzzSurvived(
  app: FastifyInstance,
  options: Omit<FuzzOptions, 'headers' | 'onAnswer'> & {
    readonly pastValidation: Readonly<Record<string, (route: RegisteredRoute, status: number) => boolean>>;
  },
): Promise<void> {
  const { pastValidation, ...fuzz } = options;
  const passed = new Map(Object.keys(pastValidation).map((name) => [name, 0]));
  const violations = await fuzzRoutes(app, {
    ...fuzz,
    headers: bearer(ROUTE_TEST_ALL_SCOPES),
    onAnswer: (route, status) => {
      for (const [name, past] of Object.entries(pastValidation))
        if (past(route, status)) passed.set(name, (passed.get(name) ?? 0) + 1);
    },
  });
  expect(violations).toEqual([]);
  for (const [name, count] of passed) expect(count, name).toBeGreaterThan(10);
}
