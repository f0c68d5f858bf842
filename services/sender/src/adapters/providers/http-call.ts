/**
 * One bounded HTTP exchange for provider adapters (Mailgun's send, Mailpit's and Mailgun's
 * searches), on node:http rather than fetch because a send's verdict depends on something fetch
 * hides: whether the request body had left us when the exchange failed.
 *
 * - phase `request`: until the whole request has been handed to the socket ('finish'). A failure
 *   here means the server cannot hold the complete request: nothing was sent.
 * - phase `response`: from then on. The server may have acted on the request; a failure without a
 *   status is unknowable.
 *
 * Bounds: one deadline for the exchange (`timeoutMs`; past it, a `response`-phase exchange may keep
 * listening for `lateWithinMs` more and settle `late`), and a cap on the response body
 * (`maxResponseBytes`, checked against Content-Length and while reading).
 */
import http from 'node:http';
import https from 'node:https';

export type HttpPhase = 'request' | 'response';

export type HttpOutcome =
  | { readonly kind: 'response'; readonly status: number; readonly body: Buffer }
  /** The status arrived, the body exceeded the cap (the status is still the server's verdict). */
  | { readonly kind: 'too_large'; readonly status: number }
  /** `status`, when present: the status line arrived, then the body failed. */
  | { readonly kind: 'failed'; readonly phase: HttpPhase; readonly code: string; readonly status?: number }
  | {
      readonly kind: 'timeout';
      readonly phase: HttpPhase;
      readonly status?: number;
      /** Settles with what the server says within `lateWithinMs` after the timeout. */
      readonly late?: Promise<HttpOutcome>;
    };

export interface HttpCall {
  readonly method: 'GET' | 'POST';
  readonly url: URL;
  readonly headers?: Readonly<Record<string, string>>;
  readonly body?: Buffer;
  readonly timeoutMs: number;
  readonly maxResponseBytes: number;
  /** With a body handed over, keep listening this long past the timeout for a late verdict. */
  readonly lateWithinMs?: number;
  readonly signal?: AbortSignal;
  readonly agent?: http.Agent;
}

export function errorCode(error: unknown): string {
  const code = (error as { code?: unknown } | null)?.code;
  return typeof code === 'string' && /^[A-Z_0-9]{2,40}$/.test(code) ? code : 'error';
}

export function httpCall(call: HttpCall): Promise<HttpOutcome> {
  const transport = call.url.protocol === 'https:' ? https : http;
  let phase: HttpPhase = 'request';
  let settleLate: ((outcome: HttpOutcome) => void) | undefined;
  let timedOut = false;
  let status: number | undefined;
  const withStatus = () => (status === undefined ? {} : { status });

  return new Promise<HttpOutcome>((resolve) => {
    let done = false;
    const timers: NodeJS.Timeout[] = [];
    const finish = (outcome: HttpOutcome) => {
      if (done) return;
      done = true;
      for (const timer of timers) clearTimeout(timer);
      call.signal?.removeEventListener('abort', onAbort);
      if (settleLate) settleLate(outcome);
      else resolve(outcome);
    };

    const request = transport.request(call.url, {
      method: call.method,
      headers: {
        accept: 'application/json',
        ...(call.body ? { 'content-length': String(call.body.length) } : {}),
        ...call.headers,
      },
      ...(call.agent ? { agent: call.agent } : {}),
    });
    const onAbort = () => {
      request.destroy();
      finish({ kind: 'failed', phase, code: 'ABORTED', ...withStatus() });
    };

    request.on('finish', () => {
      phase = 'response';
    });
    request.on('error', (error) => finish({ kind: 'failed', phase, code: errorCode(error), ...withStatus() }));
    request.on('response', (response) => {
      const code = response.statusCode ?? 0;
      status = code;
      const declared = Number(response.headers['content-length']);
      if (Number.isFinite(declared) && declared > call.maxResponseBytes) {
        request.destroy();
        finish({ kind: 'too_large', status: code });
        return;
      }
      const chunks: Buffer[] = [];
      let size = 0;
      response.on('data', (chunk: Buffer) => {
        size += chunk.length;
        if (size > call.maxResponseBytes) {
          request.destroy();
          finish({ kind: 'too_large', status: code });
          return;
        }
        chunks.push(chunk);
      });
      response.on('end', () => finish({ kind: 'response', status: code, body: Buffer.concat(chunks) }));
      // A body cut short after the status line: the status was said; what followed is lost.
      response.on('error', (error) =>
        finish({ kind: 'failed', phase: 'response', code: errorCode(error), status: code }),
      );
      response.on('aborted', () => finish({ kind: 'failed', phase: 'response', code: 'ECONNRESET', status: code }));
    });

    if (call.signal?.aborted) {
      onAbort();
      return;
    }
    call.signal?.addEventListener('abort', onAbort, { once: true });

    timers.push(
      setTimeout(() => {
        if (done || timedOut) return;
        timedOut = true;
        const late = call.lateWithinMs ?? 0;
        if (phase === 'response' && late > 0) {
          // Our caller gets its answer now; the exchange goes on for a late verdict.
          const lateOutcome = new Promise<HttpOutcome>((resolveLate) => {
            settleLate = resolveLate;
          });
          resolve({ kind: 'timeout', phase, late: lateOutcome, ...withStatus() });
          timers.push(
            setTimeout(() => {
              request.destroy();
              finish({ kind: 'timeout', phase, ...withStatus() });
            }, late),
          );
          return;
        }
        request.destroy();
        finish({ kind: 'timeout', phase, ...withStatus() });
      }, call.timeoutMs),
    );

    request.end(call.body);
  });
}

/** Parses JSON that must be an object; anything else (garbage, an array, a number) is undefined. */
export function parseJsonObject(body: Buffer): Record<string, unknown> | undefined {
  try {
    const value: unknown = JSON.parse(body.toString('utf8'));
    return typeof value === 'object' && value !== null && !Array.isArray(value)
      ? (value as Record<string, unknown>)
      : undefined;
  } catch {
    return undefined;
  }
}
