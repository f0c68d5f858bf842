/**
 * An OTLP/HTTP trace receiver for tests: `POST /v1/traces` with OTLP/JSON (the exporters' `http/json`
 * protocol, gzip or not), the spans kept in arrival order, flattened with their service's name.
 * Protobuf is answered 415: set OTEL_EXPORTER_OTLP_PROTOCOL=http/json on the processes under test.
 */
import { createServer, type IncomingMessage, type Server } from 'node:http';
import { gunzipSync } from 'node:zlib';

export type ReceivedSpanKind = 'internal' | 'server' | 'client' | 'producer' | 'consumer' | 'unspecified';

export interface ReceivedSpan {
  readonly service: string;
  readonly scope: string;
  readonly traceId: string;
  readonly spanId: string;
  /** Empty for a root span. */
  readonly parentSpanId: string;
  readonly name: string;
  readonly kind: ReceivedSpanKind;
  readonly startNs: bigint;
  readonly endNs: bigint;
  readonly attributes: Readonly<Record<string, string | number | boolean>>;
  /** 'error' when the span's status code is ERROR. */
  readonly status: 'unset' | 'ok' | 'error';
  readonly statusMessage: string;
}

interface OtlpValue {
  stringValue?: string;
  intValue?: string | number;
  doubleValue?: number;
  boolValue?: boolean;
}
interface OtlpAttribute {
  key: string;
  value?: OtlpValue;
}
interface OtlpSpan {
  traceId: string;
  spanId: string;
  parentSpanId?: string;
  name: string;
  kind?: number;
  startTimeUnixNano: string | number;
  endTimeUnixNano: string | number;
  attributes?: OtlpAttribute[];
  status?: { code?: number; message?: string };
}
interface OtlpRequest {
  resourceSpans?: Array<{
    resource?: { attributes?: OtlpAttribute[] };
    scopeSpans?: Array<{ scope?: { name?: string }; spans?: OtlpSpan[] }>;
  }>;
}

const KINDS: ReceivedSpanKind[] = ['unspecified', 'internal', 'server', 'client', 'producer', 'consumer'];
const MAX_BODY_BYTES = 16 * 1024 * 1024;

function valueOf(value: OtlpValue | undefined): string | number | boolean {
  if (!value) return '';
  if (value.stringValue !== undefined) return value.stringValue;
  if (value.intValue !== undefined) return Number(value.intValue);
  if (value.doubleValue !== undefined) return value.doubleValue;
  if (value.boolValue !== undefined) return value.boolValue;
  return JSON.stringify(value);
}

const attributesOf = (list: OtlpAttribute[] | undefined) =>
  Object.fromEntries((list ?? []).map((a) => [a.key, valueOf(a.value)]));

/** Flattens one OTLP/JSON export request. */
export function otlpJsonSpans(body: OtlpRequest): ReceivedSpan[] {
  const spans: ReceivedSpan[] = [];
  for (const resourceSpans of body.resourceSpans ?? []) {
    const service = String(attributesOf(resourceSpans.resource?.attributes)['service.name'] ?? '');
    for (const scopeSpans of resourceSpans.scopeSpans ?? []) {
      for (const span of scopeSpans.spans ?? []) {
        spans.push({
          service,
          scope: scopeSpans.scope?.name ?? '',
          traceId: span.traceId,
          spanId: span.spanId,
          parentSpanId: span.parentSpanId ?? '',
          name: span.name,
          kind: KINDS[span.kind ?? 0] ?? 'unspecified',
          startNs: BigInt(span.startTimeUnixNano),
          endNs: BigInt(span.endTimeUnixNano),
          attributes: attributesOf(span.attributes),
          status: span.status?.code === 2 ? 'error' : span.status?.code === 1 ? 'ok' : 'unset',
          statusMessage: span.status?.message ?? '',
        });
      }
    }
  }
  return spans;
}

async function bodyOf(request: IncomingMessage): Promise<Buffer> {
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of request as AsyncIterable<Buffer>) {
    size += chunk.length;
    if (size > MAX_BODY_BYTES) throw new Error('export request too large');
    chunks.push(chunk);
  }
  const raw = Buffer.concat(chunks);
  return request.headers['content-encoding'] === 'gzip' ? gunzipSync(raw) : raw;
}

export class OtlpReceiver {
  readonly spans: ReceivedSpan[] = [];
  /** Export requests this receiver could not read (wrong protocol, bad JSON), with the reason. */
  readonly refused: string[] = [];
  private server: Server | undefined;
  port = 0;

  async start(): Promise<this> {
    this.server = createServer((request, response) => {
      void this.receive(request).then(
        (status) => {
          response.writeHead(status, { 'content-type': 'application/json' });
          response.end(status === 200 ? '{}' : '{"error":"unsupported"}');
        },
        (error: unknown) => {
          this.refused.push(String(error));
          response.writeHead(400).end();
        },
      );
    });
    await new Promise<void>((resolve) => this.server?.listen(0, '127.0.0.1', resolve));
    const address = this.server.address();
    this.port = typeof address === 'object' && address ? address.port : 0;
    return this;
  }

  /** The base URL for OTEL_EXPORTER_OTLP_ENDPOINT (the exporters add `/v1/traces`). */
  get endpoint(): string {
    return `http://127.0.0.1:${this.port}`;
  }

  private async receive(request: IncomingMessage): Promise<number> {
    if (request.method !== 'POST' || request.url !== '/v1/traces') {
      request.resume();
      return 404;
    }
    if (!String(request.headers['content-type']).startsWith('application/json')) {
      this.refused.push(`content-type ${request.headers['content-type']}`);
      request.resume();
      return 415;
    }
    this.spans.push(...otlpJsonSpans(JSON.parse((await bodyOf(request)).toString('utf8')) as OtlpRequest));
    return 200;
  }

  /** The spans of one trace, in the order they arrived. */
  trace(traceId: string): ReceivedSpan[] {
    return this.spans.filter((s) => s.traceId === traceId);
  }

  async stop(): Promise<void> {
    const server = this.server;
    if (!server) return;
    const closed = new Promise<void>((resolve) => server.close(() => resolve()));
    // Exporters keep their connections alive: close them, or `close` waits for their idle timeout.
    server.closeAllConnections();
    await closed;
  }
}
