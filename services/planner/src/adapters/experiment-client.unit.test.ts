/**
 * The experiment client against a real local HTTP server answering each status: which answers the
 * consumer retries (and so, past the cap, dead-letters as TRANSIENT_EXHAUSTED), which refuse the
 * request (400) and which are the batch's fault, and that a refused token is retried and reported, not dead-lettered.
 */
import { createServer, type Server, type ServerResponse } from 'node:http';
import { createLogger, createMetricsRegistry, isTransientError, TransientError } from '@outreach/shared';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ExperimentClient, MAX_ANSWER_BYTES } from './experiment-client.js';

let server: Server;
let baseUrl: string;
let status = 200;

beforeAll(async () => {
  server = createServer((request, response) => {
    request.resume();
    request.on('end', () => {
      response.writeHead(status, { 'content-type': 'application/json' });
      response.end(status === 200 ? JSON.stringify({ assignments: [], variants: [] }) : '{"error":"nope"}');
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  baseUrl = `http://127.0.0.1:${(server.address() as { port: number }).port}`;
});
afterAll(() => new Promise((resolve) => server.close(resolve)));

describe('ExperimentClient', () => {
  it.each([401, 403])('retries a %i (a token rotation) as transient, with a metric and an alert line', async (code) => {
    status = code;
    const lines: Array<Record<string, unknown>> = [];
    const logger = createLogger({ name: 'planner-test' }, { write: (line: string) => lines.push(JSON.parse(line)) });
    const metrics = createMetricsRegistry('planner-test', false);
    const client = new ExperimentClient(baseUrl, () => 'old-token', 2_000, { logger, metrics });

    const assign = await client.assign('exp', ['c1']).catch((error: unknown) => error);
    expect(assign).toBeInstanceOf(TransientError);
    expect(isTransientError(assign)).toBe(true);
    expect((assign as TransientError).code).toBe('PEER_UNAUTHORIZED');
    const variants = await client.variants('exp').catch((error: unknown) => error);
    expect(isTransientError(variants)).toBe(true);

    expect(await metrics.getSingleMetricAsString('outreach_planner_peer_auth_failures_total')).toMatch(
      new RegExp(`peer="experiment",status="${code}"[^\\n]* 2`),
    );
    expect(lines.filter((l) => l.alert === 'peer_auth_failed')).toHaveLength(2);
  });

  it('retries 5xx and 429, reads 400 as refused ids, dead-letters other refusals, and 404 as an unknown experiment', async () => {
    const client = new ExperimentClient(baseUrl, () => 't', 2_000);
    for (const code of [500, 503, 429]) {
      status = code;
      expect(isTransientError(await client.assign('exp', ['c1']).catch((e: unknown) => e))).toBe(true);
    }
    // The ids it was given are refused (the ingress tells the publisher): an answer, not a failure.
    status = 400;
    expect(await client.assign('exp', ['c1'])).toEqual({ kind: 'refused' });
    status = 422;
    const refused = await client.assign('exp', ['c1']).catch((e: unknown) => e);
    expect(refused).toBeInstanceOf(Error);
    expect(isTransientError(refused)).toBe(false);
    status = 404;
    expect(await client.assign('exp', ['c1'])).toEqual({ kind: 'unknown_experiment' });
  });
});

/**
 * A broken or hostile experiment service: the planner reads its answers bounded and checked, and any
 * answer it cannot trust is transient (the request waits and retries), never planned from.
 */
describe('ExperimentClient against answers it must not trust', () => {
  let hostile: Server;
  let hostileUrl: string;
  let answer: (response: ServerResponse) => void = () => undefined;

  beforeAll(async () => {
    hostile = createServer((request, response) => {
      request.resume();
      request.on('end', () => answer(response));
    });
    await new Promise<void>((resolve) => hostile.listen(0, '127.0.0.1', resolve));
    hostileUrl = `http://127.0.0.1:${(hostile.address() as { port: number }).port}`;
  });
  afterAll(() => new Promise((resolve) => hostile.close(resolve)));

  const json = (value: unknown) => (response: ServerResponse) => {
    response.writeHead(200, { 'content-type': 'application/json' });
    response.end(JSON.stringify(value));
  };
  const failure = async (call: (client: ExperimentClient) => Promise<unknown>) => {
    const error = await call(new ExperimentClient(hostileUrl, () => 't', 2_000)).then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(isTransientError(error), String(error)).toBe(true);
    return error as TransientError;
  };

  it('accepts the documented shape', async () => {
    answer = json({
      assignments: [
        { candidateKey: 'c1', enrolled: true, variant: 'a' },
        { candidateKey: 'c2', enrolled: false, reason: 'experiment paused' },
      ],
    });
    const client = new ExperimentClient(hostileUrl, () => 't', 2_000);
    expect(await client.assign('exp', ['c1', 'c2'])).toEqual({
      kind: 'decisions',
      byCandidate: new Map([
        ['c1', { enrolled: true, variant: 'a' }],
        ['c2', { enrolled: false, reason: 'experiment paused' }],
      ]),
    });
  });

  it.each([
    ['an enrolled candidate without a variant', { assignments: [{ candidateKey: 'c1', enrolled: true }] }],
    ['a variant that is not a string', { assignments: [{ candidateKey: 'c1', enrolled: true, variant: 7 }] }],
    ['no assignments array', { assignments: 'all of them' }],
    ['null', null],
    ['an array', []],
  ])('refuses %s as transient (PEER_BAD_ANSWER)', async (_, body) => {
    answer = json(body);
    expect((await failure((c) => c.assign('exp', ['c1']))).code).toBe('PEER_BAD_ANSWER');
  });

  it('refuses an experiment whose variants are not of the documented shape', async () => {
    answer = json({ variants: [{ name: 'a' }] });
    expect((await failure((c) => c.variants('exp'))).code).toBe('PEER_BAD_ANSWER');
  });

  it('refuses a body that is not JSON', async () => {
    answer = (response) => {
      response.writeHead(200, { 'content-type': 'application/json' });
      response.end('{"assignments": [');
    };
    expect((await failure((c) => c.assign('exp', ['c1']))).message).toMatch(/not JSON/);
  });

  it('cancels an answer over the limit, declared or streamed without a length, without buffering it', async () => {
    answer = (response) => {
      response.writeHead(200, { 'content-type': 'application/json', 'content-length': String(MAX_ANSWER_BYTES + 1) });
      response.write('{"assignments":[');
      // Never finishes: the client must not wait for (or hold) the rest.
    };
    expect((await failure((c) => c.assign('exp', ['c1']))).message).toMatch(/over \d+ bytes/);
    let written = 0;
    answer = (response) => {
      response.writeHead(200, { 'content-type': 'application/json' });
      const chunk = Buffer.alloc(64 * 1024, 0x20);
      const pump = () => {
        while (written < 2 * MAX_ANSWER_BYTES && response.write(chunk)) written += chunk.length;
        if (written < 2 * MAX_ANSWER_BYTES) response.once('drain', pump);
        else response.end();
      };
      response.on('error', () => undefined);
      pump();
    };
    expect((await failure((c) => c.assign('exp', ['c1']))).message).toMatch(/over \d+ bytes/);
  });

  it('treats a connection reset mid-body as transient', async () => {
    answer = (response) => {
      response.writeHead(200, { 'content-type': 'application/json', 'content-length': '1000' });
      response.write('{"assignments":[');
      setImmediate(() => response.socket?.destroy());
    };
    await failure((c) => c.assign('exp', ['c1']));
  });
});
