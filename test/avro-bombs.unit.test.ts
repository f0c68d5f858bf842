/**
 * Attacks on promise 2: bomb shapes against the guard, with codecs over attack schemas (nested
 * containers, unions, enums, fixed, a history writer the reader drops fields of) and the real one.
 * Promise: every input is decoded or refused with a DecodeError, in bounded time and heap.
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import {
  DecodeError,
  EventCodec,
  eventCodec,
  fingerprintBytes,
  schemaFingerprint,
  type AvroSchema,
} from '@outreach/contracts';
import { measureDecode, zigzagVarint as v } from '@outreach/testkit';

const BOUND = { ms: 50, heapBytes: 16 * 1024 * 1024 };

const nested = {
  type: 'record',
  name: 'Nest',
  fields: [
    { name: 'id', type: 'string' },
    {
      name: 'rows',
      type: {
        type: 'array',
        items: {
          type: 'record',
          name: 'Row',
          fields: [
            { name: 'tags', type: { type: 'map', values: { type: 'array', items: 'null' } } },
            { name: 'kind', type: { type: 'enum', name: 'Kind', symbols: ['A', 'B'] } },
            { name: 'fp', type: { type: 'fixed', name: 'Fp', size: 4 } },
            { name: 'u', type: ['null', { type: 'array', items: 'long' }, { type: 'map', values: 'bytes' }] },
          ],
        },
      },
    },
  ],
};
/** The older writer has a field the reader dropped: avsc skips it by its block byte sizes. */
const older = {
  type: 'record',
  name: 'Evolved',
  fields: [
    { name: 'dropped', type: { type: 'array', items: 'string' } },
    { name: 'kept', type: 'int' },
  ],
};
const current = { type: 'record', name: 'Evolved', fields: [{ name: 'kept', type: 'int' }] };
const bytesOnly = { type: 'record', name: 'Blob', fields: [{ name: 'b', type: 'bytes' }] };

const defs = {
  Nest: { current: nested, history: [] },
  Evolved: { current, history: [older] },
  Blob: { current: bytesOnly, history: [] },
};
const codec = new EventCodec(defs as never, { maxBytes: 4096, maxItems: 1000 });
const header = (schema: object) =>
  Buffer.concat([Buffer.from([0xc3, 0x01]), fingerprintBytes(schemaFingerprint(schema as AvroSchema))]);
const str = (s: string) => Buffer.concat([v(s.length), Buffer.from(s)]);

function refused(bytes: Buffer, c: EventCodec = codec) {
  const m = measureDecode(c, bytes, BOUND);
  expect(m.ms).toBeLessThan(BOUND.ms);
  expect(m.heapBytes).toBeLessThan(BOUND.heapBytes);
  expect(m.result.ok, 'a bomb decoded').toBe(false);
  if (!m.result.ok) expect(m.result.error).toBeInstanceOf(DecodeError);
  return m.result.ok ? undefined : m.result.error.code;
}

describe('bomb shapes against the guard', () => {
  const row = (tags: Buffer, u: Buffer) => Buffer.concat([tags, v(0), Buffer.from([1, 2, 3, 4]), u]);
  const good = Buffer.concat([header(nested), str('x'), v(1), row(v(0), v(0)), v(0)]);

  it('a well-formed nested value decodes (control)', () => {
    expect(codec.tryDecode(good).ok).toBe(true);
  });

  const bombs: Array<[string, Buffer]> = [
    ['2^30 rows', Buffer.concat([header(nested), str('x'), v(2 ** 30)])],
    ['map of 2^30 in a row', Buffer.concat([header(nested), str('x'), v(1), v(2 ** 30)])],
    [
      'array of null in a map in an array: 2^30 zero-byte items',
      Buffer.concat([header(nested), str('x'), v(1), v(1), str('k'), v(2 ** 30)]),
    ],
    [
      'items spread over many blocks, past maxItems in sum',
      Buffer.concat([header(nested), str('x'), v(1), v(1), str('k'), ...Array.from({ length: 20 }, () => v(100))]),
    ],
    [
      'negative block count, size lies big',
      Buffer.concat([header(nested), str('x'), v(-1), v(4000), row(v(0), v(0)), v(0)]),
    ],
    [
      'negative block count, size lies small',
      Buffer.concat([header(nested), str('x'), v(-1), v(1), row(v(0), v(0)), v(0)]),
    ],
    [
      'negative block count, size negative',
      Buffer.concat([header(nested), str('x'), v(-1), v(-5), row(v(0), v(0)), v(0)]),
    ],
    [
      'block count -2^63',
      Buffer.concat([
        header(nested),
        str('x'),
        Buffer.from([0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01]),
      ]),
    ],
    [
      '11-byte varint count',
      Buffer.concat([
        header(nested),
        str('x'),
        Buffer.from([0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x00]),
      ]),
    ],
    [
      'enum index 2 of 2',
      Buffer.concat([header(nested), str('x'), v(1), v(0), v(2), Buffer.from([1, 2, 3, 4]), v(0), v(0)]),
    ],
    [
      'enum index -1',
      Buffer.concat([header(nested), str('x'), v(1), v(0), v(-1), Buffer.from([1, 2, 3, 4]), v(0), v(0)]),
    ],
    ['union index 3 of 3', Buffer.concat([header(nested), str('x'), v(1), row(v(0), v(3)), v(0)])],
    [
      'union → array of 2^40 longs',
      Buffer.concat([header(nested), str('x'), v(1), row(v(0), Buffer.concat([v(1), v(2 ** 40)])), v(0)]),
    ],
    [
      'union → map of bytes with a 2^31 value',
      Buffer.concat([
        header(nested),
        str('x'),
        v(1),
        row(v(0), Buffer.concat([v(2), v(1), str('k'), v(2 ** 31)])),
        v(0),
      ]),
    ],
    ['fixed cut short', Buffer.concat([header(nested), str('x'), v(1), v(0), v(0), Buffer.from([1, 2])])],
    ['string length 2^62', Buffer.concat([header(nested), v(2 ** 62)])],
    ['trailing byte after a valid value', Buffer.concat([good, Buffer.from([0])])],
  ];
  for (const [name, bytes] of bombs) {
    it(`refuses: ${name}`, () => {
      expect(refused(bytes)).toBeDefined();
    });
  }

  it('every truncation of a valid nested value is refused, never decoded to defaults', () => {
    for (let cut = 10; cut < good.length; cut++) expect(refused(good.subarray(0, cut))).toBeDefined();
  });
});

describe('a history writer resolved to the current reader', () => {
  const h = header(older);
  it('control: the dropped field in a sized block is skipped', () => {
    const items = Buffer.concat([str('ab'), str('cd')]);
    const bytes = Buffer.concat([h, v(-2), v(items.length), items, v(0), v(7)]);
    const r = codec.tryDecode(bytes);
    expect(r.ok && (r.event as unknown as { kept: number }).kept).toBe(7);
  });
  it('a dropped field whose block size lies, pointing the skip at the next field', () => {
    const items = Buffer.concat([str('ab'), str('cd')]);
    // The true size is 6; a size of 5 would have avsc skip into `kept` and read garbage as an int.
    expect(refused(Buffer.concat([h, v(-2), v(items.length - 1), items, v(0), v(7)]))).toBeDefined();
  });
  it('a dropped field with a sized block of 2^30 items in 6 bytes', () => {
    const items = Buffer.concat([str('ab'), str('cd')]);
    expect(refused(Buffer.concat([h, v(-(2 ** 30)), v(items.length), items, v(0), v(7)]))).toBeDefined();
  });
});

describe('the byte limit', () => {
  const h = header(bytesOnly);
  const of = (total: number) => {
    // header 10 + length varint (2 bytes for 128..8191) + payload
    const payload = total - h.length - 2;
    return Buffer.concat([h, v(payload), Buffer.alloc(payload, 0x61)]);
  };
  it('a message of exactly maxBytes decodes', () => {
    const bytes = of(4096);
    expect(bytes.length).toBe(4096);
    expect(codec.tryDecode(bytes).ok).toBe(true);
  });
  it('one byte past maxBytes is TOO_LARGE', () => {
    const bytes = of(4097);
    expect(bytes.length).toBe(4097);
    expect(refused(bytes)).toBe('TOO_LARGE');
  });
});

describe('random bodies behind every known fingerprint (real schemas, history included)', () => {
  const dir = join(import.meta.dirname, '..', 'schemas');
  const files = [
    ...readdirSync(dir)
      .filter((f) => f.endsWith('.avsc'))
      .map((f) => join(dir, f)),
    ...readdirSync(join(dir, 'history')).map((f) => join(dir, 'history', f)),
  ];
  const headers = files.map((f) => header(JSON.parse(readFileSync(f, 'utf8')) as object));
  it('decode or DecodeError, bounded, never another error', () => {
    fc.assert(
      fc.property(fc.integer({ min: 0, max: headers.length - 1 }), fc.uint8Array({ maxLength: 300 }), (i, body) => {
        const bytes = Buffer.concat([headers[i] as Buffer, Buffer.from(body)]);
        const m = measureDecode(eventCodec, bytes, BOUND);
        expect(m.ms).toBeLessThan(BOUND.ms);
        if (!m.result.ok) expect(m.result.error).toBeInstanceOf(DecodeError);
        // Direct decode must throw only DecodeError (the consumer uses tryDecode; other callers decode).
        try {
          eventCodec.decode(bytes);
        } catch (error) {
          expect(error).toBeInstanceOf(DecodeError);
        }
      }),
      { numRuns: 3000 },
    );
  });
});
