import { afterEach, describe, expect, it, vi } from 'vitest';
import { Counter } from 'prom-client';
import { createLogger } from '../logger.js';
import { COLLECT_TIMEOUT_MS, createMetricsRegistry, gauge, sharedRead } from '../metrics.js';
import { buildHttpApp } from '../service/http.js';
import { buildInfo } from './build-info.js';
import { httpLabels, UNMATCHED_ROUTE } from './http.js';

const logger = createLogger({ name: 'metrics-test', level: 'silent' });

afterEach(() => {
  vi.useRealTimers();
});

describe('the service registry', () => {
  it('refuses a metric that is not declared in the catalogue, naming where to declare it', () => {
    const registry = createMetricsRegistry('guard-test', false);
    expect(() => new Counter({ name: 'sends_total', help: 'undeclared', registers: [registry] })).toThrow(
      /sends_total is not declared in packages\/shared\/src\/metrics\/catalog\.ts/,
    );
    // Prefix and suffix spellings of a declared name are other names.
    expect(() => new Counter({ name: 'outreach_sender_sends', help: 'x', registers: [registry] })).toThrow();
    expect(() => new Counter({ name: 'sender_sends_total', help: 'x', registers: [registry] })).toThrow();
  });

  it('puts `service` on every series, and serves build info and the standard Node.js and process metrics', async () => {
    const registry = createMetricsRegistry('sender', {
      build: { version: '1.2.3', commit: 'abc1234', node_version: 'v24.0.0' },
    });
    const text = await registry.metrics();
    expect(text).toMatch(
      /^outreach_build_info\{version="1\.2\.3",commit="abc1234",node_version="v24\.0\.0",service="sender"\} 1$/m,
    );
    expect(text).toMatch(/^process_cpu_seconds_total\{service="sender"\} /m);
    const series = text.split('\n').filter((line) => line !== '' && !line.startsWith('#'));
    expect(series.length).toBeGreaterThan(10);
    for (const line of series) expect(line, line).toMatch(/\{[^}]*service="sender"[^}]*\} /);
    for (const { name } of registry.getMetricsAsArray()) expect(name).toMatch(/^(outreach|process|nodejs)_/);
  });
});

describe('build info', () => {
  it('names the platform version, a commit only when it is a hex object name, and the Node.js version', () => {
    const info = buildInfo({ OUTREACH_COMMIT: 'ABCDEF0123456789' });
    expect(info).toEqual({
      version: expect.stringMatching(/^\d+\.\d+\.\d+/),
      commit: 'abcdef0123456789',
      node_version: process.version,
    });
    expect(buildInfo({}).commit).toBe('unknown');
    for (const crafted of ['main', '"} 1\nfake_metric 1', 'a'.repeat(200), 'abc12']) {
      expect(buildInfo({ OUTREACH_COMMIT: crafted }).commit).toBe('unknown');
    }
  });
});

describe('gauges read at scrape time', () => {
  it('a read that fails keeps the previous value and is counted; the scrape still answers', async () => {
    const registry = createMetricsRegistry('gauge-test', false);
    let fail = false;
    gauge(registry, 'outreach_sender_ambiguous_sends', (g) => {
      if (fail) throw new Error('connection refused');
      g.set(4);
    });
    expect(await registry.metrics()).toMatch(/^outreach_sender_ambiguous_sends\{service="gauge-test"\} 4$/m);
    fail = true;
    expect(await registry.metrics()).toMatch(/^outreach_sender_ambiguous_sends\{service="gauge-test"\} 4$/m);
    expect(await registry.getSingleMetricAsString('outreach_metric_collect_failures_total')).toMatch(
      /^outreach_metric_collect_failures_total\{metric="outreach_sender_ambiguous_sends",service="gauge-test"\} 1$/m,
    );
  });

  it('a read that hangs gives up after COLLECT_TIMEOUT_MS', async () => {
    vi.useFakeTimers();
    const registry = createMetricsRegistry('gauge-test', false);
    gauge(registry, 'outreach_liveness_oldest_obligation_age_seconds', () => new Promise<void>(() => undefined));
    const scrape = registry.metrics();
    await vi.advanceTimersByTimeAsync(COLLECT_TIMEOUT_MS);
    expect(await scrape).toMatch(/^outreach_liveness_oldest_obligation_age_seconds\{service="gauge-test"\} 0$/m);
    expect(await registry.getSingleMetricAsString('outreach_metric_collect_failures_total')).toMatch(/ 1$/m);
  });

  it('sharedRead runs one query for the gauges of one scrape, and a new one for the next scrape', async () => {
    let queries = 0;
    const read = sharedRead(async () => ++queries);
    expect(await Promise.all([read(), read(), read()])).toEqual([1, 1, 1]);
    expect(await read()).toBe(2);
  });

  it('sharedRead with a ttl caches, and never caches a failure', async () => {
    let now = 0;
    let queries = 0;
    let fail = true;
    const read = sharedRead(
      async () => {
        queries++;
        if (fail) throw new Error('down');
        return queries;
      },
      5_000,
      () => now,
    );
    await expect(read()).rejects.toThrow('down');
    fail = false;
    expect(await read()).toBe(2);
    now = 4_999;
    expect(await read()).toBe(2);
    now = 5_000;
    expect(await read()).toBe(3);
  });
});

describe('HTTP request metrics', () => {
  it('labels by route template, never by URL', () => {
    const labels = httpLabels({ method: 'GET', routeOptions: { url: '/v1/sends/:sendId' } }, { statusCode: 404 });
    expect(labels).toEqual({ route: '/v1/sends/:sendId', method: 'GET', status_class: '4xx' });
    expect(httpLabels({ method: 'BREW', routeOptions: {} }, { statusCode: 999 })).toEqual({
      route: UNMATCHED_ROUTE,
      method: 'OTHER',
      status_class: 'other',
    });
  });

  it('counts and times requests of a real app; crafted URLs, ids and methods make no new series', async () => {
    const app = await buildHttpApp({ name: 'http-metrics', logger });
    app.get('/v1/things/:id', { config: { scope: 'public' } }, async (request) => ({
      id: (request.params as { id: string }).id,
    }));
    app.get('/v1/boom', { config: { scope: 'public' } }, async () => {
      throw new Error('boom');
    });
    try {
      for (let i = 0; i < 50; i++) {
        expect((await app.inject({ url: `/v1/things/candidate-${i}@example.com` })).statusCode).toBe(200);
        expect((await app.inject({ url: `/nope/${i}/${'x'.repeat(i)}?q=${i}` })).statusCode).toBe(404);
      }
      expect((await app.inject({ url: '/v1/boom' })).statusCode).toBe(500);
      await app.inject({ method: 'PROPFIND' as 'GET', url: '/v1/things/1' });
      const text = (await app.inject({ url: '/metrics' })).body;
      const requests = text.split('\n').filter((line) => line.startsWith('outreach_http_requests_total{'));
      expect(requests).toContain(
        'outreach_http_requests_total{route="/v1/things/:id",method="GET",status_class="2xx",service="http-metrics"} 50',
      );
      expect(requests).toContain(
        `outreach_http_requests_total{route="${UNMATCHED_ROUTE}",method="GET",status_class="4xx",service="http-metrics"} 50`,
      );
      expect(requests).toContain(
        'outreach_http_requests_total{route="/v1/boom",method="GET",status_class="5xx",service="http-metrics"} 1',
      );
      expect(text).not.toMatch(/example\.com|candidate-|\/nope/);
      // Every series: one route template or unmatched, one known method or OTHER.
      for (const line of requests) expect(line).toMatch(/route="(\/v1\/things\/:id|\/v1\/boom|unmatched)"/);
      expect(requests).toContain(
        `outreach_http_requests_total{route="${UNMATCHED_ROUTE}",method="OTHER",status_class="4xx",service="http-metrics"} 1`,
      );
      expect(requests).toHaveLength(4);
      const timed = text.split('\n').filter((line) => line.startsWith('outreach_http_request_duration_seconds_count{'));
      expect(timed).toContain(
        'outreach_http_request_duration_seconds_count{service="http-metrics",route="/v1/things/:id",method="GET",status_class="2xx"} 50',
      );
    } finally {
      await app.close();
    }
  });
});
