/**
 * A fetch response's body read up to `maxBytes`: an answer larger than that is cancelled, never
 * buffered (a token endpoint, a certificate host or an API that answers megabytes must not cost us
 * the memory). `undefined` when it was over the limit; a failure while reading is thrown as is.
 */
export async function readBoundedBody(response: Response, maxBytes: number): Promise<Buffer | undefined> {
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
