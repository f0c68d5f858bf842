/**
 * The one way this platform reads an outbound fetch's answer: bounded. A body larger than `maxBytes`
 * (declared in Content-Length, or counted while reading) is cancelled, never buffered: a token
 * endpoint, a certificate host, the schema registry or a peer service that answers megabytes must not
 * cost us the memory. Every fetch in the services and the shared layer reads through it (the provider
 * adapters' node:http exchanges count their bodies in `httpCall`, where the phase of a failure matters).
 */
export async function readBoundedBody(response: Response, maxBytes: number): Promise<Buffer | undefined> {
  const declared = Number(response.headers.get('content-length') ?? NaN);
  if (declared > maxBytes) {
    await response.body?.cancel().catch(() => undefined);
    return undefined;
  }
  const reader = response.body?.getReader();
  if (!reader) return Buffer.alloc(0);
  const chunks: Uint8Array[] = [];
  let size = 0;
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    size += value.byteLength;
    if (size > maxBytes) {
      await reader.cancel().catch(() => undefined);
      return undefined;
    }
    chunks.push(value);
  }
  return Buffer.concat(chunks);
}

export type BoundedJson =
  { readonly ok: true; readonly value: unknown } | { readonly ok: false; readonly problem: 'too_large' | 'not_json' };

/** The answer's body as JSON, read through readBoundedBody; an empty body is `undefined`. */
export async function readBoundedJson(response: Response, maxBytes: number): Promise<BoundedJson> {
  const body = await readBoundedBody(response, maxBytes);
  if (body === undefined) return { ok: false, problem: 'too_large' };
  if (body.length === 0) return { ok: true, value: undefined };
  try {
    return { ok: true, value: JSON.parse(body.toString('utf8')) as unknown };
  } catch {
    return { ok: false, problem: 'not_json' };
  }
}

/** The first `maxChars` of an error answer's text, bounded like every other read (for messages). */
export async function boundedText(response: Response, maxChars = 200): Promise<string> {
  const body = await readBoundedBody(response, 64 * 1024).catch(() => undefined);
  return body === undefined ? '' : body.toString('utf8').slice(0, maxChars);
}
