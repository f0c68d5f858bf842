/**
 * The readiness probe against a flood (docs/attacks.md, "Readiness probes"), on a real listening
 * process whose checks reach the real PostgreSQL (through a TCP proxy the test can take down) and
 * Kafka: 3,000 concurrent GETs once answered 2,894 × 503 and grew the process by 500 MB, because
 * each GET ran `SELECT 1` and a `describeCluster`. Now every answer is the cached result.
 */
import http from 'node:http';
import { join } from 'node:path';
import { freePort, startProcess, tcpProxy, type RunningProcess, type TcpProxy } from '@outreach/testkit';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { waitFor } from '../wait.js';

const root = join(import.meta.dirname, '..', '..', '..', '..');
const entry = join(import.meta.dirname, '..', '..', 'test', 'fixtures', 'health-service.ts');
const databaseUrl = new URL(inject('databaseUrl'));
const REFRESH_MS = 1_000;

let proxy: TcpProxy;
let service: RunningProcess;
let port: number;

/** One GET over a connection of its own, as 3,000 separate clients would send it. */
function get(path: string): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    const request = http.get({ host: '127.0.0.1', port, path, agent: false }, (response) => {
      let body = '';
      response.setEncoding('utf8');
      response.on('data', (chunk: string) => (body += chunk));
      response.on('end', () => resolve({ status: response.statusCode ?? 0, body }));
    });
    request.on('error', reject);
  });
}

const checkRuns = async () => JSON.parse((await get('/test/check-runs')).body) as Record<string, number>;
const residentBytes = async () =>
  Number(/^process_resident_memory_bytes\{[^}]*\} (\d+)/m.exec((await get('/metrics')).body)?.[1] ?? NaN);

beforeAll(async () => {
  proxy = await tcpProxy(Number(databaseUrl.port || 5432), databaseUrl.hostname);
  const viaProxy = new URL(databaseUrl);
  viaProxy.port = String(proxy.port);
  port = await freePort();
  service = startProcess(
    entry,
    {
      PATH: process.env.PATH,
      DATABASE_URL: viaProxy.toString(),
      KAFKA_BROKERS: inject('kafkaBrokers'),
      HTTP_PORT: String(port),
      READINESS_REFRESH_MS: String(REFRESH_MS),
    },
    [],
    [
      // What Node gives itself in a pod with a 384 Mi limit; on a large test machine V8 would grow the
      // heap lazily instead of collecting, and the resident size would say nothing.
      '--max-old-space-size=128',
      '--conditions=source',
      '--import',
      join(root, 'node_modules', 'tsx', 'dist', 'loader.mjs'),
    ],
  );
  await waitFor(async () => (await get('/health/ready').catch(() => undefined))?.status === 200, {
    timeoutMs: 60_000,
    description: `the fixture ready (stderr: ${service.stderrLines.join('\n')})`,
  });
});

afterAll(async () => {
  await service?.stop('SIGKILL');
  await proxy?.close();
});

describe('/health/ready under a flood', () => {
  it('3 × 3,000 concurrent GETs: every answer 200, each check run at most once per refresh, memory flat', async () => {
    const before = await checkRuns();
    const started = Date.now();
    const rss: number[] = [await residentBytes()];
    const statuses = new Map<number, number>();
    let first: string | undefined;
    for (let flood = 0; flood < 3; flood++) {
      const answers = await Promise.all(Array.from({ length: 3_000 }, () => get('/health/ready')));
      for (const { status } of answers) statuses.set(status, (statuses.get(status) ?? 0) + 1);
      first ??= answers[0]?.body;
      rss.push(await residentBytes());
    }
    const elapsed = Date.now() - started;
    expect(Object.fromEntries(statuses)).toEqual({ 200: 9_000 });
    expect(JSON.parse(first ?? '')).toEqual({
      status: 'ready',
      service: 'health-flood',
      checks: { postgres: 'ok', kafka: 'ok' },
    });

    const after = await checkRuns();
    const allowed = Math.ceil(elapsed / REFRESH_MS) + 1;
    for (const check of ['postgres', 'kafka']) {
      expect((after[check] ?? 0) - (before[check] ?? 0), `${check} runs in ${elapsed} ms`).toBeLessThanOrEqual(allowed);
    }
    // Within the smallest pod limit (384 Mi; 126 → 704 MB before), and the last flood adds next to
    // nothing: what 3,000 connections cost is garbage collected, not kept.
    const mib = rss.map((bytes) => Math.round(bytes / 2 ** 20));
    expect(Math.max(...mib), `RSS per flood (MiB): ${mib.join(', ')}`).toBeLessThan(384);
    expect((mib[3] ?? 0) - (mib[2] ?? 0), `RSS per flood (MiB): ${mib.join(', ')}`).toBeLessThan(24);
  });

  it('turns 503 with a code within one refresh of PostgreSQL going away, with no error text, and back', async () => {
    proxy.refuse();
    const downAt = Date.now();
    const down = await waitFor(
      async () => {
        const answer = await get('/health/ready');
        return answer.status === 503 ? answer : undefined;
      },
      { timeoutMs: 10_000, intervalMs: 50, description: 'readiness to fail' },
    );
    // One refresh, plus the check's own time to fail (a reset connection fails at once).
    expect(Date.now() - downAt).toBeLessThan(REFRESH_MS + 1_000);
    expect(JSON.parse(down.body)).toEqual({
      status: 'not_ready',
      service: 'health-flood',
      checks: { postgres: 'unavailable', kafka: 'ok' },
    });
    expect(down.body).not.toMatch(/ECONN|127\.0\.0\.1|:\d{2,5}|terminat|timeout/i);
    // The flood while it is down is as cheap: every answer the cached 503.
    const answers = await Promise.all(Array.from({ length: 1_000 }, () => get('/health/ready')));
    expect(new Set(answers.map((a) => a.status))).toEqual(new Set([503]));

    proxy.restore();
    await waitFor(async () => (await get('/health/ready')).status === 200, {
      timeoutMs: 10_000,
      description: 'readiness back once PostgreSQL answers',
    });
  });
});
