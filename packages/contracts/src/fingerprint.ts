/**
 * CRC-64-AVRO, the 64-bit Rabin fingerprint the Avro specification uses for single-object
 * encoding. avsc 5.7 cannot compute it (`fingerprint('crc64')` throws), so it lives here; the unit
 * test checks it against the Avro project's published vectors (share/test/data/schema-tests.txt).
 */
const EMPTY = 0xc15d213aa4d7a795n;
const MASK = 0xffffffffffffffffn;

const TABLE: readonly bigint[] = Array.from({ length: 256 }, (_, i) => {
  let fp = BigInt(i);
  for (let j = 0; j < 8; j++) fp = (fp >> 1n) ^ (EMPTY & -(fp & 1n) & MASK);
  return fp;
});

/** The fingerprint as an unsigned 64-bit integer. */
export function crc64Avro(data: Uint8Array | string): bigint {
  const bytes = typeof data === 'string' ? new TextEncoder().encode(data) : data;
  let fp = EMPTY;
  for (const byte of bytes) fp = (fp >> 8n) ^ (TABLE[Number((fp ^ BigInt(byte)) & 0xffn)] as bigint);
  return fp;
}

/** The 8 little-endian bytes that follow the C3 01 marker in a single-object encoded message. */
export function fingerprintBytes(fingerprint: bigint): Buffer {
  const buffer = Buffer.alloc(8);
  buffer.writeBigUInt64LE(fingerprint);
  return buffer;
}
