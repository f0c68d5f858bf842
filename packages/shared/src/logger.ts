import { pino, type Logger, type LoggerOptions } from 'pino';
import { AT_SIGN, maskAddressLike } from '@outreach/contracts';

export type { Logger } from 'pino';

export interface LoggerConfig {
  readonly name: string;
  readonly level?: string;
}

/** What stands in for an address wherever one is removed from a log line. */
export const ADDRESS_MASK = '[address]';

/**
 * Replaces everything address-shaped in `text` with ADDRESS_MASK (contracts' maskAddressLike, the
 * one definition): the log lines' last pass, and the DLQ writer's on its reason headers.
 */
export function maskAddresses(text: string): string {
  return maskAddressLike(text, ADDRESS_MASK);
}

/**
 * A request as the logs show it: the path without its query string (`/v1/sends/check?email=...`),
 * and every path segment that holds an address (`/v1/suppressions/:email`) masked.
 */
export function requestPath(url: string): string {
  const path = url.split(/[?#]/, 1)[0] ?? '';
  return path
    .split('/')
    .map((segment) => {
      let decoded = segment;
      try {
        decoded = decodeURIComponent(segment);
      } catch {
        // A malformed escape: judge the raw segment.
      }
      return AT_SIGN.test(decoded) ? ADDRESS_MASK : segment;
    })
    .join('/');
}

interface LoggedRequest {
  readonly method?: string;
  readonly url?: string;
  readonly routeOptions?: { readonly url?: string };
  readonly ip?: string;
  readonly socket?: { readonly remotePort?: number };
}

/** Replaces fastify's request serializer, which logs the raw URL. */
function serializeRequest(request: LoggedRequest) {
  return {
    method: request.method,
    url: requestPath(request.url ?? ''),
    route: request.routeOptions?.url,
    remoteAddress: request.ip,
    remotePort: request.socket?.remotePort,
  };
}

/**
 * Fields that carry an address or message content wherever they appear (one level deep), and
 * PostgreSQL's error `detail`, which quotes the row values behind a constraint violation.
 */
const REDACTED_FIELDS = ['email', 'emailNorm', 'address', 'recipient', 'to', 'subject', 'body'];
const REDACT_PATHS = [
  ...REDACTED_FIELDS,
  ...REDACTED_FIELDS.map((field) => `*.${field}`),
  'err.detail',
  '*.err.detail',
  'req.headers.authorization',
  'req.headers.cookie',
  'headers.authorization',
];

/**
 * Fields every log line gets from where it is written: the trace and span ids of the active span
 * while tracing runs (telemetry/trace.ts registers it), so a line and its trace find each other.
 * Nothing while tracing is off.
 */
let lineContext: (() => Record<string, string>) | undefined;

/** Registered by telemetry/trace.ts when tracing starts, removed (undefined) when it stops. */
export function setLogLineContext(provider: (() => Record<string, string>) | undefined): void {
  lineContext = provider;
}

/**
 * JSON logs on stdout, one line per event, with the service name on every line.
 * Correlation ids are added by child loggers (`logger.child({ correlationId })`).
 * No line carries an address: requests are logged by path (query dropped, address segments
 * masked), known fields are redacted, and a last pass masks anything address-shaped that an
 * error message or a reason brought along.
 */
export function createLogger(config: LoggerConfig, destination?: pino.DestinationStream): Logger {
  const options: LoggerOptions = {
    name: config.name,
    level: config.level ?? 'info',
    base: { service: config.name },
    timestamp: pino.stdTimeFunctions.isoTime,
    formatters: { level: (label) => ({ level: label }) },
    serializers: { req: serializeRequest },
    redact: { paths: REDACT_PATHS, censor: '[redacted]' },
    hooks: { streamWrite: maskAddresses },
    mixin: () => lineContext?.() ?? {},
  };
  return destination ? pino(options, destination) : pino(options);
}
