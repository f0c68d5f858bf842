/**
 * Attacks on a service's HTTP surface, derived from the routes it registered (app.registeredRoutes),
 * so a route added tomorrow is attacked tomorrow without anyone writing a line:
 *
 * - probeRouteGuards: every spelling of every protected path (docs/attacks.md, "Path spellings"), without
 *   a token, through inject and through a raw socket; other scopes' tokens; the right token.
 * - fuzzRoutes: requests built from each route's own TypeBox schema (valid values mixed with nasty
 *   ones at every position), raw garbage bodies, wrong content types, huge numbers, deep JSON.
 *
 * Each returns the violations it found, so one assertion reports all of them:
 * `expect(await probeRouteGuards(app, tokens)).toEqual([])`.
 */
import net from 'node:net';
import fc from 'fast-check';
import type { FastifyInstance } from 'fastify';
import type { RegisteredRoute, Scope } from '@outreach/shared';
import { MAX_BODY_BYTES } from '@outreach/shared';

/** One token per scope and one holding them all, for a service under attack (ROUTE_TEST_ENV). */
export const ROUTE_TEST_TOKENS = {
  publish: 'route-test-publish',
  operate: 'route-test-operate',
  read: 'route-test-read',
  dsn: 'route-test-dsn',
  erase: 'route-test-erase',
} as const satisfies Record<Scope, string>;
export const ROUTE_TEST_ALL_SCOPES = 'route-test-all-scopes';
export const ROUTE_TEST_ENV: Readonly<Record<string, string>> = {
  API_TOKENS_PUBLISH: `${ROUTE_TEST_TOKENS.publish},${ROUTE_TEST_ALL_SCOPES}`,
  API_TOKENS_OPERATE: `${ROUTE_TEST_TOKENS.operate},${ROUTE_TEST_ALL_SCOPES}`,
  API_TOKENS_READ: `${ROUTE_TEST_TOKENS.read},${ROUTE_TEST_ALL_SCOPES}`,
  API_TOKENS_DSN: `${ROUTE_TEST_TOKENS.dsn},${ROUTE_TEST_ALL_SCOPES}`,
  API_TOKENS_ERASE: `${ROUTE_TEST_TOKENS.erase},${ROUTE_TEST_ALL_SCOPES}`,
  // The fuzzer is one very busy client; the limit has its own test.
  RATE_LIMIT_MAX: '100000000',
};

/** The API docs every service serves (service/docs.ts), as scopeTable lists them: public. */
export const DOCS_SCOPES: Readonly<Record<string, 'public'>> = {
  'GET /docs': 'public',
  'GET /docs/static/index.html': 'public',
  'GET /docs/static/swagger-initializer.js': 'public',
  'GET /docs/json': 'public',
  'GET /docs/yaml': 'public',
  'GET /docs/static/*': 'public',
};

/** `METHOD /pattern` → scope, for every route but the automatic HEADs: what a test pins down. */
export function scopeTable(app: FastifyInstance): Record<string, string> {
  return Object.fromEntries(
    app.registeredRoutes.filter((r) => r.method !== 'HEAD').map((r) => [`${r.method} ${r.url}`, r.scope]),
  );
}

export interface Violation {
  readonly request: string;
  readonly status: number;
  readonly problem: string;
  readonly body: string;
}

interface Answer {
  readonly status: number;
  readonly body: string;
}

type JsonSchema = Readonly<Record<string, unknown>>;

const prop = (schema: unknown, key: string): unknown =>
  typeof schema === 'object' && schema !== null ? (schema as JsonSchema)[key] : undefined;

/** The routes a token is needed for. HEAD routes are listed too: fastify adds one per GET. */
export function protectedRoutes(app: FastifyInstance): RegisteredRoute[] {
  return app.registeredRoutes.filter((r) => r.scope !== 'public');
}

function exampleParam(schema: unknown): string {
  if (prop(schema, 'format') === 'uuid') return '00000000-0000-4000-8000-000000000001';
  if (String(prop(schema, 'pattern') ?? '').includes('@')) return 'probe@example.com';
  return 'probe-1';
}

/** The route's pattern with every parameter filled by a value its schema accepts, percent-encoded. */
export function examplePath(route: RegisteredRoute): string {
  const params = prop(route.schema?.params, 'properties');
  return route.url.replace(/:([A-Za-z0-9_]+)/g, (_match, name: string) =>
    encodeURIComponent(exampleParam(prop(params, name))),
  );
}

export interface Spelling {
  readonly label: string;
  readonly method: string;
  readonly target: string;
  /** The router maps this spelling to the route itself (so it must answer exactly 401 without a token). */
  readonly reaches: boolean;
  /** Only a raw socket can send it (the inject client would normalize or refuse it). */
  readonly rawOnly?: boolean;
}

const hex = (char: string, upper: boolean) => {
  const code = char.charCodeAt(0).toString(16).padStart(2, '0');
  return `%${upper ? code.toUpperCase() : code}`;
};

/** Percent-encodes the characters `pick` selects, leaving existing escapes alone. */
function encodeWhere(path: string, pick: (char: string, index: number) => boolean, upper = false): string {
  let index = 0;
  return path.replace(/%[0-9A-Fa-f]{2}|[^/]/g, (token) =>
    token.length === 1 && pick(token, index++) ? hex(token, upper) : token,
  );
}

/** Every way of writing `path` that docs/attacks.md lists, labelled with whether it reaches the route. */
export function pathSpellings(method: string, path: string): Spelling[] {
  const [, first = '', ...rest] = path.split('/');
  const tail = rest.join('/');
  const alnum = (c: string) => /[A-Za-z0-9]/.test(c);
  const spellings: Spelling[] = [
    { label: 'canonical', method, target: path, reaches: true },
    {
      label: 'first letter percent-encoded',
      method,
      target: encodeWhere(path, (c, i) => i === 0 && alnum(c)),
      reaches: true,
    },
    { label: 'letters and digits percent-encoded', method, target: encodeWhere(path, alnum), reaches: true },
    { label: 'upper-case escapes', method, target: encodeWhere(path, alnum, true), reaches: true },
    { label: 'digits percent-encoded', method, target: encodeWhere(path, (c) => /[0-9]/.test(c)), reaches: true },
    { label: 'with a query string', method, target: `${path}?probe=1`, reaches: true },
    { label: 'absolute-form', method, target: `http://localhost${path}`, reaches: true },
    { label: 'dot-dot segment', method, target: `/${first}/../${first}/${tail}`, reaches: false },
    { label: 'dot segment', method, target: `/${first}/./${tail}`, reaches: false },
    { label: 'encoded dot-dot', method, target: `/${first}/%2e%2e/${first}/${tail}`, reaches: false },
    { label: 'leading double slash', method, target: `/${path}`, reaches: false },
    { label: 'inner double slash', method, target: `/${first}//${tail}`, reaches: false },
    { label: 'upper-case prefix', method, target: `/${first.toUpperCase()}/${tail}`, reaches: false },
    { label: 'upper-case path', method, target: path.toUpperCase(), reaches: false },
    { label: 'trailing slash', method, target: `${path}/`, reaches: false },
    { label: 'encoded slash', method, target: `/${first}%2f${tail}`, reaches: false },
    { label: 'backslash', method, target: `/${first}\\${tail}`, reaches: false, rawOnly: true },
    { label: 'unknown method', method: 'PROPFIND', target: path, reaches: false },
    { label: 'OPTIONS', method: 'OPTIONS', target: path, reaches: false },
    { label: 'TRACE', method: 'TRACE', target: path, reaches: false, rawOnly: true },
    { label: 'made-up method', method: 'FOO', target: path, reaches: false, rawOnly: true },
    { label: 'lower-case method', method: method.toLowerCase(), target: path, reaches: false, rawOnly: true },
  ];
  return spellings;
}

async function ensureListening(app: FastifyInstance): Promise<number> {
  if (!app.server.listening) await app.listen({ host: '127.0.0.1', port: 0 });
  const address = app.server.address();
  if (address === null || typeof address === 'string') throw new Error('the app listens on no TCP port');
  return address.port;
}

function dechunk(body: string): string {
  let out = '';
  let rest = body;
  for (;;) {
    const end = rest.indexOf('\r\n');
    if (end < 0) return out;
    const size = Number.parseInt(rest.slice(0, end), 16);
    if (!(size > 0)) return out;
    out += rest.slice(end + 2, end + 2 + size);
    rest = rest.slice(end + 2 + size + 2);
  }
}

/** One HTTP/1.1 request written byte for byte: absolute-form targets, dot segments and odd methods intact. */
export function rawRequest(
  port: number,
  method: string,
  target: string,
  headers: Readonly<Record<string, string>> = {},
): Promise<Answer> {
  return new Promise((resolve, reject) => {
    const socket = net.connect(port, '127.0.0.1');
    const chunks: Buffer[] = [];
    socket.setTimeout(10_000, () => socket.destroy(new Error(`no answer to ${method} ${target}`)));
    socket.on('data', (chunk) => chunks.push(chunk));
    socket.on('error', reject);
    socket.on('close', () => {
      const text = Buffer.concat(chunks).toString('utf8');
      const split = text.indexOf('\r\n\r\n');
      const head = split < 0 ? text : text.slice(0, split);
      const body = split < 0 ? '' : text.slice(split + 4);
      resolve({
        status: Number(/^HTTP\/1\.[01] (\d{3})/.exec(head)?.[1] ?? 0),
        body: /\r\ntransfer-encoding: *chunked/i.test(head) ? dechunk(body) : body,
      });
    });
    const lines = [
      `${method} ${target} HTTP/1.1`,
      'Host: localhost',
      'Connection: close',
      'Content-Length: 0',
      ...Object.entries(headers).map(([name, value]) => `${name}: ${value}`),
    ];
    // write, not end: a half-closed socket makes the server drop a response it is still working on.
    socket.write(`${lines.join('\r\n')}\r\n\r\n`);
  });
}

function reasonProblem(method: string, answer: Answer): string | undefined {
  if (method === 'HEAD' || answer.status < 400) return undefined;
  try {
    const body = JSON.parse(answer.body) as { error?: unknown; message?: unknown };
    if (typeof body.message === 'string' && body.message.trim() !== '' && typeof body.error === 'string')
      return undefined;
  } catch {
    // not JSON: reported below
  }
  return `a ${answer.status} without a reason ({ error, message })`;
}

/** Statuses that prove a spelling did not reach a handler: refused, malformed, or no such route. */
const NOT_REACHED = new Set([400, 401, 404, 405, 414]);

export interface GuardProbeOptions {
  /** For each scope, a token that holds that scope and no other. */
  readonly tokens: Readonly<Record<Scope, string>>;
}

/**
 * Without a token, every spelling of every protected route answers 401 (when the router maps it to
 * the route) or a 4xx that runs no handler; with another scope's token, 403; with the right token,
 * neither (so the spellings really did reach the route).
 */
export async function probeRouteGuards(app: FastifyInstance, options: GuardProbeOptions): Promise<Violation[]> {
  const port = await ensureListening(app);
  const violations: Violation[] = [];
  const record = (request: string, answer: Answer, problem: string) =>
    violations.push({ request, status: answer.status, problem, body: answer.body.slice(0, 300) });

  for (const route of protectedRoutes(app)) {
    const scope = route.scope as Scope;
    const path = examplePath(route);
    for (const spelling of pathSpellings(route.method, path)) {
      const answers: Array<[string, Answer]> = [];
      if (!spelling.rawOnly) {
        const response = await app.inject({ method: spelling.method as 'GET', url: spelling.target });
        answers.push(['inject', { status: response.statusCode, body: response.body }]);
      }
      answers.push(['raw', await rawRequest(port, spelling.method, spelling.target)]);
      for (const [via, answer] of answers) {
        const request = `${route.method} ${route.url} as ${spelling.label} (${via}): ${spelling.method} ${spelling.target}`;
        if (spelling.reaches && answer.status !== 401) record(request, answer, 'expected 401 without a token');
        else if (!NOT_REACHED.has(answer.status)) record(request, answer, 'a spelling without a token got through');
        const problem = reasonProblem(spelling.method, answer);
        if (problem) record(request, answer, problem);
      }
    }

    for (const other of Object.keys(options.tokens) as Scope[]) {
      const token = options.tokens[other];
      const authorization = { authorization: `Bearer ${token}` };
      const canonical = await app.inject({ method: route.method as 'GET', url: path, headers: authorization });
      const answer = { status: canonical.statusCode, body: canonical.body };
      const request = `${route.method} ${route.url} with a ${other} token`;
      if (other !== scope) {
        if (answer.status !== 403) record(request, answer, `expected 403 (the route needs ${scope})`);
        continue;
      }
      // The right token: every reaching spelling gets past authorization (5xx are fuzzRoutes' business).
      for (const spelling of pathSpellings(route.method, path).filter((s) => s.reaches)) {
        const viaRaw = await rawRequest(port, spelling.method, spelling.target, authorization);
        const label = `${request} as ${spelling.label}: ${spelling.target}`;
        if (viaRaw.status === 401 || viaRaw.status === 403 || viaRaw.status === 0)
          record(label, viaRaw, 'the right token did not get past authorization');
      }
    }
  }
  return violations;
}

// ----------------------------------------------------------------------------------------- fuzzing

/** A number written as-is into the JSON text (1e400, 2^64, 1 followed by 400 zeros). */
class RawNumber {
  constructor(readonly text: string) {}
}

function toJson(value: unknown): string {
  const text = JSON.stringify(value, (_key, v: unknown) => (v instanceof RawNumber ? `\u0001${v.text}\u0001` : v));
  return (text ?? 'null').replace(/"\\u0001([^"\\]*)\\u0001"/g, '$1');
}

const LONE_SURROGATE = /[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/g;
const wellFormed = (s: string) => s.replace(LONE_SURROGATE, '\ufffd');

function asText(value: unknown): string {
  if (typeof value === 'string') return value;
  if (value instanceof RawNumber) return value.text;
  if (value === null || value === undefined) return '';
  if (typeof value === 'object') return toJson(value);
  return String(value);
}

const rawNumbers = fc
  .constantFrom(
    '1e400',
    '-1e400',
    '9007199254740993',
    '18446744073709551616',
    '9223372036854775808',
    `1${'0'.repeat(400)}`,
    '1.0',
    '-0',
    '0.5',
    '1E2',
    '4.9e-324',
  )
  .map((text) => new RawNumber(text));

/** Values that belong nowhere: wrong types, huge and odd numbers, NUL, surrogates, long strings, nesting. */
const nasty: fc.Arbitrary<unknown> = fc.oneof(
  fc.constantFrom<unknown>(
    null,
    true,
    false,
    0,
    -1,
    1.5,
    2 ** 31,
    2 ** 53 + 2,
    2 ** 63,
    Number.MAX_SAFE_INTEGER,
    -Number.MAX_SAFE_INTEGER,
    1e308,
    '',
    ' ',
    '\u0000',
    'a\u0000b',
    '\r\n',
    'a\r\nBcc: x@example.com',
    '\u200b',
    '😀',
    '\ud800',
    'NaN',
    '-1',
    '1e400',
    '99999999999999999999',
    '__proto__',
    '../../etc/passwd',
    "'; DROP TABLE sends; --",
    '%00',
    [],
    {},
    [[[[]]]],
    { constructor: { prototype: { polluted: true } } },
  ),
  rawNumbers,
  fc.string({ unit: 'binary', maxLength: 40 }),
  fc.string({ unit: 'grapheme-ascii', minLength: 250, maxLength: 5_000 }),
  fc.integer({ min: 1, max: 64 }).map((depth) => JSON.parse(`${'['.repeat(depth)}${']'.repeat(depth)}`) as unknown),
  fc.jsonValue({ maxDepth: 3 }),
);

/** A deliverable address of exactly `length` characters (70 to 254): a 64-character local part, labels of up to 63. */
function longAddress(length: number): string {
  let rest = length - 65 - 3; // after 'local@': labels with their dots, then 'com'
  const labels: string[] = [];
  while (rest > 0) {
    let label = Math.min(63, rest - 1);
    if (rest - (label + 1) === 1) label -= 1; // never leave room for a lone dot
    labels.push('d'.repeat(label));
    rest -= label + 1;
  }
  return `${'a'.repeat(64)}@${[...labels, 'com'].join('.')}`;
}

function stringArbitrary(schema: JsonSchema): fc.Arbitrary<string> {
  const minLength = (schema.minLength as number | undefined) ?? 0;
  const maxLength = schema.maxLength as number | undefined;
  const cap = Math.min(maxLength ?? 300, 300);
  const edges: string[] = [];
  if (schema.format === 'uuid') return fc.oneof(fc.uuid(), fc.constant('00000000-0000-0000-0000-000000000000'));
  if (schema.format === 'date-time') {
    return fc.oneof(
      fc
        .date({ min: new Date('0001-01-01T00:00:00Z'), max: new Date('9999-12-31T23:59:59Z'), noInvalidDate: true })
        .map((d) => d.toISOString()),
      fc.constantFrom(
        '2024-12-31T23:59:60Z',
        '2016-12-31T23:59:60+00:00',
        '9999-12-31T23:59:59.999-23:59',
        '0000-01-01T00:00:00Z',
        '2024-02-29T12:00:00+14:00',
        '2023-02-29T12:00:00Z',
      ),
    );
  }
  if (typeof schema.pattern === 'string') {
    const pattern = new RegExp(schema.pattern);
    if (schema.pattern.includes('@')) edges.push('probe@example.com', longAddress(Math.min(maxLength ?? 254, 254)));
    const fits = (s: string) => s.length >= minLength && (maxLength === undefined || s.length <= maxLength);
    const matching = fc.stringMatching(pattern, { size: 'small' }).filter(fits);
    // A pattern that wants an address mostly gets real ones, so the handler's success path runs too.
    if (schema.pattern.includes('@'))
      return fc.oneof(matching, fc.emailAddress().filter(fits), fc.constantFrom(...edges));
    return edges.length > 0 ? fc.oneof(matching, fc.constantFrom(...edges)) : matching;
  }
  if (maxLength !== undefined && maxLength <= 200_000) edges.push('x'.repeat(maxLength), 'é'.repeat(maxLength));
  if (minLength > 0) edges.push('x'.repeat(minLength));
  const strings = fc.oneof(
    fc.string({ minLength: Math.min(minLength, cap), maxLength: cap, unit: 'grapheme' }),
    fc.string({ minLength: Math.min(minLength, cap), maxLength: cap, unit: 'binary' }),
    fc.string({ minLength: Math.min(minLength, cap), maxLength: cap, unit: 'grapheme-ascii' }),
  );
  return edges.length > 0 ? fc.oneof({ arbitrary: strings, weight: 4 }, fc.constantFrom(...edges)) : strings;
}

function numberArbitrary(schema: JsonSchema, integer: boolean): fc.Arbitrary<number> {
  const lowest = (schema.minimum as number | undefined) ?? -Number.MAX_SAFE_INTEGER;
  const highest = (schema.maximum as number | undefined) ?? Number.MAX_SAFE_INTEGER;
  const edges = [lowest, highest, lowest - 1, highest + 1, 0];
  const inside = integer
    ? fc
        .bigInt({
          min: BigInt(Math.ceil(Math.max(lowest, -Number.MAX_SAFE_INTEGER))),
          max: BigInt(Math.floor(Math.min(highest, Number.MAX_SAFE_INTEGER))),
        })
        .map(Number)
    : fc.double({ min: lowest, max: highest, noNaN: true, noDefaultInfinity: true });
  return fc.oneof({ arbitrary: inside, weight: 3 }, fc.constantFrom(...edges));
}

/**
 * Values for a JSON schema (TypeBox emits JSON Schema): mostly what it accepts, with a nasty value
 * at any position now and then, and an unknown property now and then.
 */
export function schemaArbitrary(schema: unknown, nastiness = 8): fc.Arbitrary<unknown> {
  const node = (s: unknown): fc.Arbitrary<unknown> =>
    fc.oneof({ arbitrary: valid(s), weight: nastiness }, { arbitrary: nasty, weight: 1 });
  const valid = (s: unknown): fc.Arbitrary<unknown> => {
    const sch = (typeof s === 'object' && s !== null ? s : {}) as JsonSchema;
    if (Array.isArray(sch.anyOf)) return fc.oneof(...(sch.anyOf as unknown[]).map(valid));
    if (Array.isArray(sch.oneOf)) return fc.oneof(...(sch.oneOf as unknown[]).map(valid));
    if ('const' in sch) return fc.constant(sch.const);
    if (Array.isArray(sch.enum)) return fc.constantFrom(...(sch.enum as unknown[]));
    switch (sch.type) {
      case 'string':
        return stringArbitrary(sch);
      case 'integer':
        return numberArbitrary(sch, true);
      case 'number':
        return numberArbitrary(sch, false);
      case 'boolean':
        return fc.boolean();
      case 'null':
        return fc.constant(null);
      case 'array': {
        const minLength = (sch.minItems as number | undefined) ?? 0;
        const maxItems = sch.maxItems as number | undefined;
        const some = fc.array(node(sch.items), {
          minLength,
          maxLength: Math.max(minLength, Math.min(maxItems ?? 4, 4)),
        });
        if (maxItems === undefined || maxItems > 60) return some;
        const edge = fc.array(valid(sch.items), { minLength: maxItems + 1, maxLength: maxItems + 1 });
        return fc.oneof({ arbitrary: some, weight: 6 }, edge);
      }
      case 'object': {
        const properties = (sch.properties ?? {}) as Record<string, unknown>;
        const required = (sch.required as string[] | undefined) ?? [];
        // A field named like an address mostly gets real addresses, so requests get past the domain's checks.
        const field = (key: string, child: unknown) =>
          /email/i.test(key) && prop(child, 'type') === 'string'
            ? fc.oneof({ arbitrary: fc.emailAddress(), weight: 3 }, node(child))
            : node(child);
        const record = fc.record(
          Object.fromEntries(Object.entries(properties).map(([key, child]) => [key, field(key, child)])),
          { requiredKeys: required.filter((k) => k in properties) },
        );
        return fc.oneof(
          { arbitrary: record, weight: 8 },
          record.map((r) => ({ ...r, unexpected: 1 })),
        );
      }
      default:
        return fc.jsonValue({ maxDepth: 2 });
    }
  };
  return node(schema);
}

interface FuzzRequest {
  readonly params: Readonly<Record<string, unknown>>;
  readonly query: string;
  readonly body: { readonly payload: string | Buffer | undefined; readonly contentType: string | undefined };
}

/** A valid request for one route, which the fuzzer mutates: the way past the domain's own checks. */
export interface FuzzExample {
  readonly params?: Readonly<Record<string, string>>;
  readonly query?: Readonly<Record<string, unknown>>;
  readonly body?: unknown;
}

type Path = ReadonlyArray<string | number>;
const REMOVE = Symbol('remove');

function pathsOf(value: unknown): Path[] {
  const out: Path[] = [];
  const stack: Array<[Path, unknown]> = [[[], value]];
  while (stack.length > 0) {
    const [path, node] = stack.pop() as [Path, unknown];
    if (path.length > 0) out.push(path);
    if (typeof node === 'object' && node !== null)
      for (const [key, child] of Object.entries(node))
        stack.push([[...path, Array.isArray(node) ? Number(key) : key], child]);
  }
  return out;
}

function withValueAt(value: unknown, path: Path, replacement: unknown): unknown {
  const copy = structuredClone(value) as Record<string | number, unknown>;
  let parent: Record<string | number, unknown> = copy;
  for (const key of path.slice(0, -1)) {
    const next = parent[key];
    if (typeof next !== 'object' || next === null) return copy;
    parent = next as Record<string | number, unknown>;
  }
  const last = path.at(-1) as string | number;
  if (replacement === REMOVE) {
    if (Array.isArray(parent)) parent.splice(Number(last), 1);
    else delete parent[last];
  } else parent[last] = replacement;
  return copy;
}

/** An example as it is, or with up to three of its values replaced by nasty ones or removed. */
function mutations<T>(example: T): fc.Arbitrary<T> {
  const paths = pathsOf(example);
  if (paths.length === 0) return fc.constant(example);
  const mutated = fc
    .tuple(
      fc.subarray(paths, { minLength: 1, maxLength: Math.min(3, paths.length) }),
      fc.array(fc.oneof({ arbitrary: nasty, weight: 5 }, fc.constant(REMOVE)), { minLength: 3, maxLength: 3 }),
    )
    .map(
      ([chosen, values]) => chosen.reduce<unknown>((acc, path, i) => withValueAt(acc, path, values[i]), example) as T,
    );
  return fc.oneof(fc.constant(example), { arbitrary: mutated, weight: 4 });
}

function fuzzRequestArbitrary(route: RegisteredRoute, examples: readonly FuzzExample[]): fc.Arbitrary<FuzzRequest> {
  const fromExamples = <T>(pick: (e: FuzzExample) => T | undefined): Array<fc.Arbitrary<T>> =>
    examples.flatMap((e) => {
      const part = pick(e);
      return part === undefined ? [] : [mutations(part)];
    });
  const names = [...route.url.matchAll(/:([A-Za-z0-9_]+)/g)].map((m) => m[1] as string);
  const paramSchemas = prop(route.schema?.params, 'properties');
  const derivedParams = fc.record(
    Object.fromEntries(
      names.map((name) => [
        name,
        fc.oneof(
          { arbitrary: schemaArbitrary(prop(paramSchemas, name) ?? { type: 'string' }), weight: 6 },
          fc.string({ unit: 'binary', minLength: 1, maxLength: 5_000 }),
        ),
      ]),
    ),
  );
  const exampleParams = fromExamples((e) => e.params);
  const params = exampleParams.length > 0 ? fc.oneof(derivedParams, ...exampleParams) : derivedParams;
  const querySchema = route.schema?.querystring;
  const query = fc.oneof(
    { arbitrary: querySchema ? schemaArbitrary(querySchema).map(queryString) : fc.constant(''), weight: 6 },
    fc.dictionary(fc.string({ maxLength: 10 }), fc.string({ unit: 'binary', maxLength: 30 })).map(queryString),
    fc.string({ unit: 'binary', maxLength: 60 }).map((s) => encodeURI(wellFormed(s))),
    fc.constantFrom('limit=1e400&limit=2', 'a=%zz', '__proto__[x]=1', 'status[]=sent&status[]=held', '&&==&'),
    ...fromExamples((e) => e.query).map((a) => ({ arbitrary: a.map(queryString), weight: 6 })),
  );
  const bodySchema = route.schema?.body;
  const json = (text: string) => ({ payload: text, contentType: 'application/json' });
  const body = fc.oneof(
    {
      arbitrary: bodySchema ? schemaArbitrary(bodySchema).map((v) => json(toJson(v))) : fc.constant(json('{}')),
      weight: 10,
    },
    fc.constant({ payload: undefined, contentType: undefined }),
    fc.jsonValue({ maxDepth: 4 }).map((v) => json(toJson(v))),
    fc.string({ unit: 'binary', maxLength: 200 }).map(json),
    fc
      .uint8Array({ maxLength: 200 })
      .map((bytes) => ({ payload: Buffer.from(bytes), contentType: 'application/json' })),
    fc.integer({ min: 1_000, max: 100_000 }).map((depth) => json(`${'['.repeat(depth)}${']'.repeat(depth)}`)),
    fc.integer({ min: 1_000, max: 50_000 }).map((depth) => json(`${'{"a":'.repeat(depth)}1${'}'.repeat(depth)}`)),
    fc
      .tuple(
        fc.constantFrom(
          'text/plain',
          'application/x-www-form-urlencoded',
          'multipart/form-data; boundary=x',
          'application/xml',
          'application/json; charset=utf-16',
          'application/jsonx',
          'application/octet-stream',
          '',
          'application/json, text/plain',
        ),
        fc.string({ maxLength: 100 }),
      )
      .map(([contentType, payload]) => ({ payload, contentType })),
    rawNumbers.map((n) => json(n.text)),
    ...fromExamples((e) => e.body).map((a) => ({ arbitrary: a.map((v) => json(toJson(v))), weight: 10 })),
  );
  return fc.record({ params, query, body });
}

function queryString(value: unknown): string {
  if (typeof value !== 'object' || value === null || Array.isArray(value))
    return `q=${encodeURIComponent(wellFormed(asText(value)))}`;
  const search = new URLSearchParams();
  for (const [key, v] of Object.entries(value)) {
    if (Array.isArray(v)) for (const item of v) search.append(key, wellFormed(asText(item)));
    else search.append(key, wellFormed(asText(v)));
  }
  return search.toString();
}

function urlOf(route: RegisteredRoute, request: FuzzRequest): string {
  const path = route.url.replace(/:([A-Za-z0-9_]+)/g, (_m, name: string) =>
    encodeURIComponent(wellFormed(asText(request.params[name]))),
  );
  return request.query === '' ? path : `${path}?${request.query}`;
}

export interface FuzzOptions {
  /** Headers on every request: a token holding every scope, so requests reach the handlers. */
  readonly headers: Readonly<Record<string, string>>;
  readonly numRuns?: number;
  readonly seed?: number;
  /** Routes left out (for example a route that would send real email). */
  readonly skip?: (route: RegisteredRoute) => boolean;
  /** Valid requests per route (`METHOD /pattern`), mutated by the fuzzer to reach past the domain's checks. */
  readonly examples?: Readonly<Record<string, readonly FuzzExample[]>>;
  /** Sees every answer: for a test that checks the fuzzer got past validation often enough. */
  readonly onAnswer?: (route: RegisteredRoute, status: number) => void;
}

/**
 * Requests derived from each route's schema, and garbage, through `inject`: no answer may be a 5xx,
 * and every 4xx carries `{ error, message }`. Each failing route is reported once, shrunk by
 * fast-check to a small request, with the seed to replay it.
 */
export async function fuzzRoutes(app: FastifyInstance, options: FuzzOptions): Promise<Violation[]> {
  const violations: Violation[] = [];
  const routes = app.registeredRoutes.filter((r) => r.method !== 'HEAD' && !(options.skip?.(r) ?? false));
  for (const key of Object.keys(options.examples ?? {})) {
    if (!routes.some((r) => `${r.method} ${r.url}` === key))
      violations.push({ request: key, status: 0, problem: 'an example for a route that does not exist', body: '' });
  }
  const sendTo = async (
    route: RegisteredRoute,
    url: string,
    payload: string | Buffer | undefined,
    contentType: string | undefined,
  ) => {
    const response = await app.inject({
      method: route.method as 'GET',
      url,
      headers: { ...options.headers, ...(contentType !== undefined ? { 'content-type': contentType } : {}) },
      ...(payload !== undefined ? { payload } : {}),
    });
    options.onAnswer?.(route, response.statusCode);
    return { status: response.statusCode, body: response.body };
  };
  // Every route's examples run first, before any fuzzing: they must pass (or the mutations around
  // them test only the validator), and fuzzing one route (a PATCH that pauses the example's
  // experiment) must not change what another route's example meets.
  for (const route of routes) {
    const examples = options.examples?.[`${route.method} ${route.url}`] ?? [];
    for (const example of examples) {
      const request: FuzzRequest = {
        params: example.params ?? {},
        query: example.query ? queryString(example.query) : '',
        body:
          example.body === undefined
            ? { payload: undefined, contentType: undefined }
            : { payload: toJson(example.body), contentType: 'application/json' },
      };
      const answer = await sendTo(route, urlOf(route, request), request.body.payload, request.body.contentType);
      if (answer.status >= 400)
        violations.push({
          request: `${route.method} ${urlOf(route, request)}: an example`,
          ...answer,
          problem: 'the example itself was refused',
          body: answer.body.slice(0, 300),
        });
    }
  }
  for (const route of routes) {
    const examples = options.examples?.[`${route.method} ${route.url}`] ?? [];
    const send = (url: string, payload: string | Buffer | undefined, contentType: string | undefined) =>
      sendTo(route, url, payload, contentType);
    const problemOf = (answer: Answer) =>
      answer.status >= 500 || answer.status === 0 ? `a ${answer.status}` : reasonProblem(route.method, answer);

    // Fixed cases first: a body one byte over the limit, and empty or scalar JSON.
    const base = examplePath(route);
    const oversize = JSON.stringify({ filler: 'x'.repeat(MAX_BODY_BYTES) });
    for (const [label, payload] of [
      ['body over the limit', oversize],
      ['empty JSON body', ''],
      ['null', 'null'],
      ['a string', '"x"'],
      ['a BOM', '\ufeff{}'],
    ] as const) {
      const answer = await send(base, payload, 'application/json');
      const problem = problemOf(answer);
      if (problem)
        violations.push({
          request: `${route.method} ${route.url}: ${label}`,
          ...answer,
          problem,
          body: answer.body.slice(0, 300),
        });
      if (
        label === 'body over the limit' &&
        ['POST', 'PUT', 'PATCH', 'DELETE'].includes(route.method) &&
        answer.status !== 413
      )
        violations.push({
          request: `${route.method} ${route.url}: ${label}`,
          ...answer,
          problem: 'expected 413',
          body: answer.body.slice(0, 300),
        });
    }

    let last: { request: string; answer: Answer; problem: string } | undefined;
    const result = await fc.check(
      fc.asyncProperty(fuzzRequestArbitrary(route, examples), async (request) => {
        const url = urlOf(route, request);
        const answer = await send(url, request.body.payload, request.body.contentType);
        const problem = problemOf(answer);
        if (!problem) return true;
        const shown = typeof request.body.payload === 'string' ? request.body.payload.slice(0, 300) : '<bytes>';
        last = {
          request: `${route.method} ${url.slice(0, 300)} [${request.body.contentType ?? '-'}] ${shown}`,
          answer,
          problem,
        };
        return false;
      }),
      // A fixed seed by default: `npm test` is repeatable; pass another seed to explore.
      { numRuns: options.numRuns ?? 100, seed: options.seed ?? 20_261_129 },
    );
    if (result.failed) {
      const failure = last ?? {
        request: String(result.counterexample),
        answer: { status: 0, body: '' },
        problem: String(result.errorInstance),
      };
      violations.push({
        request: `${route.url}: ${failure.request} (seed ${result.seed}, path ${result.counterexamplePath ?? ''})`,
        status: failure.answer.status,
        problem: failure.problem,
        body: failure.answer.body.slice(0, 300),
      });
    }
  }
  return violations;
}

export interface SlowClientsResult {
  /** Milliseconds from the start until the server closed each connection that it closed. */
  readonly closedAfterMs: readonly number[];
  /** Connections still open when the attack gave up (then closed by us). */
  readonly stillOpen: number;
  /** The status of each answer the server sent before closing (408 for a request timeout), 0 for none. */
  readonly statuses: readonly number[];
}

/**
 * `count` connections that each write `head` (a request line and headers, with or without the
 * blank line that ends them) and then one more byte every `trickleMs`, never finishing: a slow-body
 * attack, or slowloris when the head is unfinished. Resolves once the server has closed every one,
 * or after `giveUpMs` (closing what is left).
 */
export async function slowClients(
  port: number,
  options: { readonly count: number; readonly head: string; readonly trickleMs: number; readonly giveUpMs: number },
): Promise<SlowClientsResult> {
  const started = Date.now();
  const sockets: net.Socket[] = [];
  let gaveUp = false;
  const closes = Array.from(
    { length: options.count },
    () =>
      new Promise<{ at: number; status: number } | undefined>((resolve) => {
        const socket = net.connect(port, '127.0.0.1');
        sockets.push(socket);
        let answer = '';
        const drip = setInterval(() => {
          if (socket.writable) socket.write(options.head.endsWith('\r\n\r\n') ? 'a' : 'X-Slow: a\r\n');
        }, options.trickleMs);
        socket.on('connect', () => socket.write(options.head));
        socket.on('data', (chunk) => {
          answer += chunk.toString('latin1');
        });
        socket.on('error', () => undefined);
        socket.on('close', () => {
          clearInterval(drip);
          const status = Number(/^HTTP\/1\.[01] (\d{3})/.exec(answer)?.[1] ?? 0);
          resolve(gaveUp ? undefined : { at: Date.now() - started, status });
        });
      }),
  );
  const giveUp = setTimeout(() => {
    gaveUp = true;
    for (const socket of sockets) socket.destroy();
  }, options.giveUpMs);
  const outcomes = await Promise.all(closes);
  clearTimeout(giveUp);
  const closed = outcomes.filter((o): o is { at: number; status: number } => o !== undefined);
  return {
    closedAfterMs: closed.map((o) => o.at),
    stillOpen: outcomes.length - closed.length,
    statuses: closed.map((o) => o.status),
  };
}
