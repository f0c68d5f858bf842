/**
 * The experiment client against a real local HTTP server answering each status: which answers the
 * consumer retries (and so, past the cap, dead-letters as TRANSIENT_EXHAUSTED), which refuse the
 * request (400) and which are the batch's fault, and that a refused token is retried and reported, not dead-lettered.
 */
import { createServer, type Server } from 'node:http';
import { createLogger, createMetricsRegistry, isTransientError, TransientError } from '@outreach/shared';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ExperimentClient } from './experiment-client.js';

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
