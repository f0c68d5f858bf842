/**
 * Ways an HTTP API peer goes wrong, for the test servers that stand in for providers (the fake
 * Mailgun, the sink's Mailpit API). Each is played on one exchange; `normal` is the honest answer.
 */
import type { IncomingMessage, ServerResponse } from 'node:http';

export type HttpHostility =
  /** Destroy the connection as the request arrives, before reading its body. */
  | { readonly act: 'reset' }
  /** Read the whole request (acting on it), then close without a response. */
  | { readonly act: 'drop' }
  /** Act on the request, answer only after `ms`. */
  | { readonly act: 'stall'; readonly ms: number }
  /** Answer with this status (and body) without acting on the request. */
  | { readonly act: 'status'; readonly status: number; readonly body?: string }
  /** Act on the request, answer 200 with a body that is not JSON. */
  | { readonly act: 'garbage' }
  /** Act on the request, answer 200 with a JSON-looking body of `bytes` bytes, streamed (no length). */
  | { readonly act: 'huge'; readonly bytes: number }
  /** Act on the request, send the status line and part of the body, then close. */
  | { readonly act: 'partial' };

/** Whether the server acts on the request (stores a message) before it misbehaves. */
export function actsOnRequest(hostility: HttpHostility | undefined): boolean {
  return hostility === undefined || !(hostility.act === 'reset' || hostility.act === 'status');
}

/** Reads a request body up to `max` bytes; more is refused with 413 (and undefined). */
export async function readRequestBody(
  req: IncomingMessage,
  res: ServerResponse,
  max: number,
): Promise<Buffer | undefined> {
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of req) {
    const buffer = Buffer.isBuffer(chunk) ? chunk : Buffer.from(chunk as string);
    size += buffer.length;
    if (size > max) {
      res.writeHead(413, { 'content-type': 'application/json', connection: 'close' });
      res.end('{"message":"request too large"}');
      return undefined;
    }
    chunks.push(buffer);
  }
  return Buffer.concat(chunks);
}

export function sendJson(res: ServerResponse, status: number, value: unknown): void {
  const body = JSON.stringify(value);
  res.writeHead(status, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) });
  res.end(body);
}

/**
 * Plays `hostility` instead of (or around) `answer`, the honest response. `reset` and `status` are
 * played before the request is acted on, the rest after; the caller decides that with
 * actsOnRequest and calls this once it has.
 */
export function playHostility(
  req: IncomingMessage,
  res: ServerResponse,
  hostility: HttpHostility,
  answer: () => void,
  timers: Set<NodeJS.Timeout>,
): void {
  switch (hostility.act) {
    case 'reset':
      req.socket.resetAndDestroy();
      return;
    case 'drop':
      req.socket.destroy();
      return;
    case 'stall': {
      const timer = setTimeout(() => {
        timers.delete(timer);
        if (!res.destroyed) answer();
      }, hostility.ms);
      timers.add(timer);
      return;
    }
    case 'status':
      res.writeHead(hostility.status, { 'content-type': 'application/json' });
      res.end(hostility.body ?? '{"message":"scripted failure"}');
      return;
    case 'garbage':
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end('{"id": <not json');
      return;
    case 'huge': {
      res.writeHead(200, { 'content-type': 'application/json' });
      const chunk = Buffer.from(`"${'x'.repeat(16 * 1024 - 3)}",`);
      let left = hostility.bytes;
      res.write('{"items":[');
      const pump = () => {
        while (left > 0 && !res.destroyed) {
          left -= chunk.length;
          if (!res.write(chunk)) {
            res.once('drain', pump);
            return;
          }
        }
        if (!res.destroyed) res.end('""]}');
      };
      res.on('error', () => undefined);
      pump();
      return;
    }
    case 'partial':
      res.writeHead(200, { 'content-type': 'application/json', 'content-length': '1000' });
      res.write('{"id":"<');
      setImmediate(() => req.socket.destroy());
      return;
    default: {
      const never: never = hostility;
      throw new Error(`unknown hostility ${JSON.stringify(never)}`);
    }
  }
}
