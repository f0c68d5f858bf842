/**
 * OpenTelemetry for one service process (`@outreach/shared/telemetry`). Each service's `server.ts`
 * awaits `startTelemetry` before it imports anything else, and imports the rest dynamically after
 * it: the instrumentations patch `pg`, `fastify`, `http` and `fetch` as those load, and Node's ESM
 * loader would load every static import of the entry file before its first line runs. The packages
 * instrumented here are CommonJS (or report through diagnostics channels), which
 * require-in-the-middle patches also when they are imported from ESM, so no `--import` loader hook
 * is needed; the Docker entrypoint imports `server.js`, which does the same. An ESM-only library
 * that needs patching would need `import-in-the-middle`'s hook registered here first.
 *
 * Off unless an exporter is configured, and then nothing of the SDK is even loaded (see
 * `tracingWanted`): the SDK's own default (an OTLP exporter to localhost) would export from every
 * process that never asked for it. Everything else is read by the SDK from the standard `OTEL_*`
 * variables (docs/operations.md, "Tracing"). Only traces: metrics are Prometheus' (`/metrics`) and
 * logs are JSON on stdout.
 */
import { markTracingActive } from './trace.js';

export interface TracingDecision {
  readonly enabled: boolean;
  /** Which variable decided, for the start-up log. */
  readonly reason: string;
}

const listOf = (value: string | undefined): string[] =>
  (value ?? '')
    .split(',')
    .map((s) => s.trim().toLowerCase())
    .filter((s) => s.length > 0);

/**
 * Whether this process exports traces: OTEL_SDK_DISABLED=true or OTEL_TRACES_EXPORTER=none say no;
 * an OTEL_TRACES_EXPORTER, or an OTLP endpoint (OTEL_EXPORTER_OTLP_ENDPOINT or its _TRACES_ form),
 * says yes; nothing set says no.
 */
export function tracingWanted(env: NodeJS.ProcessEnv = process.env): TracingDecision {
  if (/^\s*true\s*$/i.test(env.OTEL_SDK_DISABLED ?? '')) return { enabled: false, reason: 'OTEL_SDK_DISABLED=true' };
  const exporters = listOf(env.OTEL_TRACES_EXPORTER);
  if (exporters.includes('none')) return { enabled: false, reason: 'OTEL_TRACES_EXPORTER=none' };
  if (exporters.length > 0) return { enabled: true, reason: `OTEL_TRACES_EXPORTER=${exporters.join(',')}` };
  for (const name of ['OTEL_EXPORTER_OTLP_TRACES_ENDPOINT', 'OTEL_EXPORTER_OTLP_ENDPOINT'] as const) {
    if (env[name]?.trim()) return { enabled: true, reason: `${name} is set` };
  }
  return { enabled: false, reason: 'no trace exporter configured (OTEL_EXPORTER_OTLP_ENDPOINT)' };
}

/** Health probes and scrapes are not traced: one trace per probe would drown the requests. */
export function isProbePath(url: string | undefined): boolean {
  const path = (url ?? '').split('?', 1)[0] ?? '';
  return path.startsWith('/health/') || path === '/metrics' || path === '/docs' || path.startsWith('/docs/');
}

/**
 * Starts the SDK when `tracingWanted`, with the instrumentations of HTTP (server and client),
 * fetch, PostgreSQL and fastify. `serviceName` is the default `service.name`; OTEL_SERVICE_NAME or
 * a `service.name` in OTEL_RESOURCE_ATTRIBUTES wins over it.
 */
export async function startTelemetry(
  serviceName: string,
  env: NodeJS.ProcessEnv = process.env,
): Promise<TracingDecision> {
  const decision = tracingWanted(env);
  if (!decision.enabled) return decision;
  const [
    { NodeSDK },
    { W3CTraceContextPropagator },
    { HttpInstrumentation },
    { UndiciInstrumentation },
    { PgInstrumentation },
    { FastifyOtelInstrumentation },
    { requestPath },
  ] = await Promise.all([
    import('@opentelemetry/sdk-node'),
    import('@opentelemetry/core'),
    import('@opentelemetry/instrumentation-http'),
    import('@opentelemetry/instrumentation-undici'),
    import('@opentelemetry/instrumentation-pg'),
    import('@fastify/otel'),
    import('../logger.js'),
  ]);
  const named =
    Boolean(env.OTEL_SERVICE_NAME?.trim()) || /(^|,)\s*service\.name\s*=/.test(env.OTEL_RESOURCE_ATTRIBUTES ?? '');
  // Paths can hold an address (/v1/suppressions/:email) and queries always may: spans get what the
  // logs get (logger.ts requestPath), never the raw URL.
  const urlAttributes = (url: string | undefined) => ({
    'url.path': requestPath(url ?? ''),
    ...((url ?? '').includes('?') ? { 'url.query': '[omitted]' } : {}),
  });
  const sdk = new NodeSDK({
    ...(named ? {} : { serviceName }),
    // Traces only; an unset OTEL_METRICS_EXPORTER or OTEL_LOGS_EXPORTER would mean OTLP too.
    metricReaders: [],
    logRecordProcessors: [],
    // W3C trace context only, unless OTEL_PROPAGATORS says otherwise: a caller's `baggage` is not
    // carried to our other services by default.
    ...(env.OTEL_PROPAGATORS?.trim() ? {} : { textMapPropagator: new W3CTraceContextPropagator() }),
    instrumentations: [
      new HttpInstrumentation({
        ignoreIncomingRequestHook: (request) => isProbePath(request.url),
        startIncomingSpanHook: (request) => urlAttributes(request.url),
        // Background calls (a token refresh) do not start traces of their own.
        requireParentforOutgoingSpans: true,
      }),
      new UndiciInstrumentation({ requireParentforSpans: true }),
      // Only queries made for a traced piece of work: the relay's polling and the pool's
      // connections would each start a trace of their own.
      new PgInstrumentation({ requireParentSpan: true, ignoreConnectSpans: true }),
      new FastifyOtelInstrumentation({
        registerOnInitialization: true,
        instrumentHooks: false,
        ignorePaths: (route: { url: string }) => isProbePath(route.url),
        requestHook: (span, request) => span.setAttributes(urlAttributes(request.url)),
      }),
    ],
  });
  sdk.start();
  markTracingActive(() => sdk.shutdown());
  return decision;
}
