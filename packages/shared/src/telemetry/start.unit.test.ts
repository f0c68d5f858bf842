import { spawnSync } from 'node:child_process';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { describe, expect, it } from 'vitest';
import { isProbePath, tracingWanted } from './start.js';

const root = join(import.meta.dirname, '..', '..', '..', '..');

describe('tracingWanted', () => {
  it.each([
    [{}, false, 'no trace exporter configured (OTEL_EXPORTER_OTLP_ENDPOINT)'],
    [{ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://collector:4318' }, true, 'OTEL_EXPORTER_OTLP_ENDPOINT is set'],
    [
      { OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: 'http://c:4318/v1/traces' },
      true,
      'OTEL_EXPORTER_OTLP_TRACES_ENDPOINT is set',
    ],
    [{ OTEL_EXPORTER_OTLP_ENDPOINT: '  ' }, false, 'no trace exporter configured (OTEL_EXPORTER_OTLP_ENDPOINT)'],
    [{ OTEL_TRACES_EXPORTER: 'otlp' }, true, 'OTEL_TRACES_EXPORTER=otlp'],
    [{ OTEL_TRACES_EXPORTER: 'console' }, true, 'OTEL_TRACES_EXPORTER=console'],
    [
      { OTEL_TRACES_EXPORTER: 'none', OTEL_EXPORTER_OTLP_ENDPOINT: 'http://c:4318' },
      false,
      'OTEL_TRACES_EXPORTER=none',
    ],
    [{ OTEL_TRACES_EXPORTER: 'otlp,None' }, false, 'OTEL_TRACES_EXPORTER=none'],
    [{ OTEL_SDK_DISABLED: 'true', OTEL_EXPORTER_OTLP_ENDPOINT: 'http://c:4318' }, false, 'OTEL_SDK_DISABLED=true'],
    [{ OTEL_SDK_DISABLED: ' TRUE ', OTEL_TRACES_EXPORTER: 'otlp' }, false, 'OTEL_SDK_DISABLED=true'],
    [
      { OTEL_SDK_DISABLED: 'false', OTEL_EXPORTER_OTLP_ENDPOINT: 'http://c:4318' },
      true,
      'OTEL_EXPORTER_OTLP_ENDPOINT is set',
    ],
  ] as Array<[NodeJS.ProcessEnv, boolean, string]>)('%j: %s', (env, enabled, reason) => {
    expect(tracingWanted(env)).toEqual({ enabled, reason });
  });
});

describe('isProbePath', () => {
  it.each([
    ['/health/live', true],
    ['/health/ready?x=1', true],
    ['/metrics', true],
    ['/docs/json', true],
    ['/v1/outreach-requests', false],
    ['/metricsx', false],
    ['/v1/health/live', false],
  ])('%s: %s', (path, probe) => {
    expect(isProbePath(path)).toBe(probe);
  });
});

/**
 * A fresh process (the SDK registers process-wide globals): what `startTelemetry` leaves behind, and
 * how many modules of the SDK, the exporters and the instrumentations it loaded.
 */
function probe(env: Record<string, string>) {
  const url = (file: string) => pathToFileURL(join(import.meta.dirname, file)).href;
  const script = `
    import { registerHooks } from 'node:module';
    const loaded = [];
    registerHooks({ load(url, context, next) { loaded.push(url); return next(url, context); } });
    const { startTelemetry } = await import(${JSON.stringify(url('start.ts'))});
    const { tracingActive, shutdownTracing } = await import(${JSON.stringify(url('trace.ts'))});
    const { trace } = await import('@opentelemetry/api');
    const decision = await startTelemetry('probe');
    const span = trace.getTracer('probe').startSpan('work');
    const sdk = loaded.filter((u) => /@opentelemetry\\/(sdk-|instrumentation|exporter)|@fastify\\/otel/.test(u));
    console.log(JSON.stringify({ enabled: decision.enabled, active: tracingActive(), recording: span.isRecording(), sdkModules: sdk.length }));
    span.end();
    await shutdownTracing();`;
  const result = spawnSync(
    process.execPath,
    [
      '--conditions=source',
      '--import',
      join(root, 'node_modules', 'tsx', 'dist', 'loader.mjs'),
      '--input-type=module',
      '-e',
      script,
    ],
    { cwd: root, env: { PATH: process.env.PATH, ...env }, encoding: 'utf8', timeout: 60_000 },
  );
  expect(result.stderr).toBe('');
  return JSON.parse(result.stdout.trim().split('\n').at(-1) ?? '{}') as {
    enabled: boolean;
    active: boolean;
    recording: boolean;
    sdkModules: number;
  };
}

describe('startTelemetry', () => {
  it('off by default: no SDK started, none of its modules even loaded, spans are no-ops', { timeout: 30_000 }, () => {
    expect(probe({})).toEqual({ enabled: false, active: false, recording: false, sdkModules: 0 });
  });

  it('off with OTEL_SDK_DISABLED=true, whatever else is set', { timeout: 30_000 }, () => {
    expect(probe({ OTEL_SDK_DISABLED: 'true', OTEL_TRACES_EXPORTER: 'console' })).toEqual({
      enabled: false,
      active: false,
      recording: false,
      sdkModules: 0,
    });
  });

  it('on once an exporter is configured: the SDK records spans', { timeout: 30_000 }, () => {
    // Nothing listens there: the export at shutdown gives up after its (short) timeout.
    const on = probe({ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://127.0.0.1:9', OTEL_EXPORTER_OTLP_TIMEOUT: '200' });
    expect(on).toMatchObject({ enabled: true, active: true, recording: true });
    expect(on.sdkModules).toBeGreaterThan(0);
  });
});
