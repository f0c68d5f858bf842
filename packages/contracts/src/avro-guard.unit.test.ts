/**
 * The decoder's bounds, case by case (issue #14, ADR 005): every shape of lying length or count is
 * refused with its typed code before avsc allocates, in bounded time and memory. The property-based
 * run over every schema is codec.fuzz.unit.test.ts.
 */
import avro from 'avsc';
import { describe, expect, it } from 'vitest';
import {
  eventBombs,
  fieldsBefore,
  headerOf,
  measureDecode,
  probeRecord,
  probeSchema,
  probeValue,
  zigzagVarint,
} from '@outreach/testkit';
import { EventCodec, eventCodec, type DecodeErrorCode } from './codec.js';
import { fingerprintBytes } from './fingerprint.js';
import { schemaDefinitions, type OutreachEvent } from './events.generated.js';
import { schemaFingerprint, type AvroSchema } from './canonical.js';

const BOUND = { ms: 50, heapBytes: 16 * 1024 * 1024 };
const MiB = 1024 * 1024;

const probe = probeSchema;

const probeHeader = Buffer.concat([
  Buffer.from([0xc3, 0x01]),
  fingerprintBytes(schemaFingerprint(probe as AvroSchema)),
]);
const v = zigzagVarint;
const probeType = avro.Type.forSchema(probe as avro.Schema);
/** The Probe body up to (not including) `field`, with probeValue's values. */
function probeBefore(field: string): Buffer {
  const at = probe.fields.findIndex((f) => f.name === field);
  const prefix = avro.Type.forSchema({
    ...probe,
    name: 'ProbePrefix',
    fields: probe.fields.slice(0, at),
  } as avro.Schema);
  return prefix.toBuffer(probeValue);
}
/** The Probe body after `field`: every later field with probeValue's values. */
function probeAfter(field: string): Buffer {
  const at = probe.fields.findIndex((f) => f.name === field);
  const full = probeType.toBuffer(probeValue);
  const upTo = avro.Type.forSchema({
    ...probe,
    name: 'ProbeUpTo',
    fields: probe.fields.slice(0, at + 1),
  } as avro.Schema);
  return full.subarray(upTo.toBuffer(probeValue).length);
}
const probeMessage = (field: string, ...replacement: Buffer[]) =>
  Buffer.concat([probeHeader, probeBefore(field), ...replacement, probeAfter(field)]);

function outcome(codec: EventCodec, bytes: Uint8Array): DecodeErrorCode | 'ok' {
  const measured = measureDecode(codec, bytes, BOUND);
  expect(measured.ms, 'decode time (ms)').toBeLessThan(BOUND.ms);
  expect(measured.heapBytes, 'heap growth (bytes)').toBeLessThan(BOUND.heapBytes);
  return measured.result.ok ? 'ok' : measured.result.error.code;
}

describe('the bombs of issue #14 against the real schemas', () => {
  it.each(eventBombs().map((b) => [b.name, b] as const))(
    'refuses %s with its code, in bounded time and memory',
    (_, bomb) => {
      expect(bomb.bytes.length).toBeLessThan(128);
      expect(outcome(eventCodec, bomb.bytes)).toBe(bomb.code);
      const result = eventCodec.tryDecode(bomb.bytes);
      expect(result.ok ? '' : result.error.message).toMatch(/^\w+ body: \S+: /);
    },
  );

  it('names the field, the claim and the offset in the reason', () => {
    const [arrayBomb] = eventBombs();
    const result = eventCodec.tryDecode(arrayBomb?.bytes as Buffer);
    expect(result.ok).toBe(false);
    expect(result.ok ? '' : result.error.message).toMatch(
      /^OutreachRequested body: contents: a block of 1073741824 array items needs at least 3221225472 bytes, \d+ left \(at byte \d+\)$/,
    );
  });

  it('would have allocated without the guard: avsc alone grows the heap past the bound on a 2^20 claim', () => {
    // The measurement is what the other cases rely on, so show it catches the defect: the same bomb,
    // read by avsc directly, builds a million items (2^30 would kill this worker).
    const [arrayBomb] = eventBombs(2 ** 20);
    const reader = avro.Type.forSchema(schemaDefinitions.OutreachRequested.current as avro.Schema);
    const body = (arrayBomb?.bytes as Buffer).subarray(10);
    let kept: unknown;
    const before = process.memoryUsage().heapUsed;
    try {
      kept = reader.fromBuffer(body);
    } catch {
      // avsc notices the overrun only after building every item ("truncated buffer").
    }
    const grown = process.memoryUsage().heapUsed - before;
    expect(grown).toBeGreaterThan(BOUND.heapBytes);
    expect(kept).toBeUndefined();
    expect(outcome(eventCodec, arrayBomb?.bytes as Buffer)).toBe('INVALID_LENGTH');
  });
});

describe('every length and count, on a schema with every Avro type', () => {
  const codec = new EventCodec({ Probe: { current: probe, history: [] } });
  const probeEvent = { type: 'Probe', ...probeValue } as unknown as OutreachEvent;

  it('decodes the untouched probe (the cases below change one thing each)', () => {
    expect(codec.decode(codec.encode(probeEvent))).toEqual(probeEvent);
    expect(
      probeMessage(
        'labels',
        (probeType as avro.types.RecordType).field('labels').type.toBuffer(probeValue.labels) as Buffer,
      ),
    ).toEqual(codec.encode(probeEvent));
  });

  const cases: Array<[string, Buffer, DecodeErrorCode]> = [
    ['map claiming 2^30 entries', probeMessage('labels', v(2 ** 30)), 'INVALID_LENGTH'],
    [
      'map block of -2^30 entries in 4 bytes',
      probeMessage('labels', v(-(2 ** 30)), v(4), Buffer.alloc(4), v(0)),
      'INVALID_LENGTH',
    ],
    ['map key claiming 2^30 bytes', probeMessage('labels', v(1), v(2 ** 30)), 'INVALID_LENGTH'],
    [
      'map value (array) claiming 2^30 items',
      probeMessage('labels', v(1), v(1), Buffer.from('k'), v(2 ** 30)),
      'INVALID_LENGTH',
    ],
    ['bytes claiming 2^30 bytes', probeMessage('blob', v(2 ** 30)), 'INVALID_LENGTH'],
    ['bytes of negative length', probeMessage('blob', v(-1)), 'INVALID_LENGTH'],
    ['array of nulls claiming 2^30 items in one byte', probeMessage('nothings', v(2 ** 30), v(0)), 'LIMIT_EXCEEDED'],
    ['array of empty records claiming 2^30 items', probeMessage('empties', v(2 ** 30), v(0)), 'LIMIT_EXCEEDED'],
    [
      'nulls within the cap per block, past it across blocks',
      probeMessage('nothings', v(40_000), v(40_000), v(0)),
      'LIMIT_EXCEEDED',
    ],
    [
      'arrays of nulls nested: 60,000 inner arrays of 60,000',
      probeMessage('matrix', v(2), v(60_000), v(0), v(60_000), v(0), v(0)),
      'LIMIT_EXCEEDED',
    ],
    ['negative block whose byte size lies', probeMessage('nothings', v(-2), v(3), v(0)), 'INVALID_BODY'],
    ['block byte size of 2^40', probeMessage('nothings', v(-2), v(2 ** 40)), 'INVALID_LENGTH'],
    ['block byte size past the end, within the size limit', probeMessage('nothings', v(-2), v(5_000)), 'TRUNCATED'],
    ['string length past the end, within the size limit', probeMessage('labels', v(1), v(200)), 'TRUNCATED'],
    ['union index out of range', probeMessage('list', v(2)), 'INVALID_BODY'],
    ['negative union index', probeMessage('list', v(-1)), 'INVALID_BODY'],
    ['enum index out of range', probeMessage('color', v(3)), 'INVALID_BODY'],
    ['int varint of 6 bytes', probeMessage('count', Buffer.from([0x80, 0x80, 0x80, 0x80, 0x80, 0x00])), 'INVALID_BODY'],
    ['int varint beyond 32 bits', probeMessage('count', Buffer.from([0xff, 0xff, 0xff, 0xff, 0x1f])), 'INVALID_BODY'],
    ['long varint of 11 bytes', probeMessage('total', Buffer.alloc(10, 0x80), Buffer.from([0])), 'INVALID_BODY'],
    ['long varint beyond 64 bits', probeMessage('total', Buffer.alloc(9, 0xff), Buffer.from([0x02])), 'INVALID_BODY'],
    [
      'count varint running off the end',
      Buffer.concat([probeHeader, probeBefore('labels'), Buffer.from([0x80, 0x80])]),
      'TRUNCATED',
    ],
    ['fixed cut short', Buffer.concat([probeHeader, probeBefore('id'), Buffer.from('ab')]), 'TRUNCATED'],
    ['double cut short', Buffer.concat([probeHeader, probeBefore('score'), Buffer.alloc(5)]), 'TRUNCATED'],
    ['trailing bytes', Buffer.concat([codec.encode(probeEvent), Buffer.from([0])]), 'INVALID_BODY'],
  ];
  it.each(cases)('%s → %s', (_, bytes, code) => {
    expect(outcome(codec, bytes)).toBe(code);
  });

  it('accepts the largest counts that do fit: 40,000 nulls, a byte size that matches, 16 KiB strings', () => {
    expect(outcome(codec, probeMessage('nothings', v(40_000), v(0)))).toBe('ok');
    expect(outcome(codec, probeMessage('nothings', v(-2), v(0), v(0)))).toBe('ok');
    const long = 'x'.repeat(16_384);
    expect(
      outcome(codec, codec.encode({ ...probeEvent, labels: { k: [long, long] } } as unknown as OutreachEvent)),
    ).toBe('ok');
  });

  it('bounds recursion: a list nested past maxDepth is refused, a shallower one decodes', () => {
    // Written by hand: avsc itself overflows the stack encoding a list this deep.
    const list = (n: number) =>
      Buffer.concat([
        probeHeader,
        probeBefore('list'),
        ...Array.from({ length: n }, (_, i) => Buffer.concat([v(1), v(i)])),
        v(0),
      ]);
    const shallow = new EventCodec({ Probe: { current: probe, history: [] } }, { maxDepth: 10 });
    // The root record is depth 1, each cell one more.
    expect(outcome(shallow, list(9))).toBe('ok');
    expect(outcome(shallow, list(10))).toBe('LIMIT_EXCEEDED');
    // The default depth (64) against 100,000 cells in 300 KB: refused without a stack overflow.
    expect(outcome(codec, list(100_000))).toBe('LIMIT_EXCEEDED');
    expect(outcome(codec, list(63))).toBe('ok');
  });

  it('takes its limits as parameters: maxBytes, maxItems', () => {
    const bytes = codec.encode(probeEvent);
    expect(outcome(new EventCodec({ Probe: { current: probe, history: [] } }, { maxBytes: bytes.length }), bytes)).toBe(
      'ok',
    );
    expect(
      outcome(new EventCodec({ Probe: { current: probe, history: [] } }, { maxBytes: bytes.length - 1 }), bytes),
    ).toBe('TOO_LARGE');
    expect(outcome(new EventCodec({ Probe: { current: probe, history: [] } }, { maxItems: 9 }), bytes)).toBe('ok');
    expect(outcome(new EventCodec({ Probe: { current: probe, history: [] } }, { maxItems: 8 }), bytes)).toBe(
      'LIMIT_EXCEEDED',
    );
  });
});

describe('our schemas', () => {
  /** Records, arrays and maps nested in one another, or Infinity for a recursive schema. */
  function nesting(type: avro.Type, onPath = new Set<avro.Type>()): number {
    if (onPath.has(type)) return Infinity;
    const inner = (children: avro.Type[], own: number) => {
      onPath.add(type);
      const deepest = Math.max(0, ...children.map((c) => nesting(c, onPath)));
      onPath.delete(type);
      return own + deepest;
    };
    if (type instanceof avro.types.RecordType)
      return inner(
        type.fields.map((f) => f.type),
        1,
      );
    if (type instanceof avro.types.ArrayType) return inner([type.itemsType], 1);
    if (type instanceof avro.types.MapType) return inner([type.valuesType as avro.Type], 1);
    if (type instanceof avro.types.UnwrappedUnionType) return inner(type.types, 0);
    return 0;
  }

  it('are none of them recursive, and nest far less deep than maxDepth', () => {
    const depths = Object.entries(schemaDefinitions).flatMap(([name, d]) =>
      [d.current, ...d.history].map((schema) => [name, nesting(avro.Type.forSchema(schema as avro.Schema))] as const),
    );
    expect(Math.max(...depths.map(([, depth]) => depth))).toBe(5); // OutreachRequested.followUps[].contents[]
    expect(nesting(avro.Type.forSchema(probe as avro.Schema))).toBe(Infinity);
    expect(eventCodec.limits.maxDepth).toBeGreaterThan(5 * 4);
  });
});

describe('message size', () => {
  it('refuses a message over 1 MiB (the default) before reading its header, and reads one of exactly 1 MiB', () => {
    expect(eventCodec.limits.maxBytes).toBe(MiB);
    const over = Buffer.alloc(MiB + 1, 0xc3);
    expect(outcome(eventCodec, over)).toBe('TOO_LARGE');
    const event = {
      type: 'StepCompleted',
      eventId: 'e',
      occurredAt: 1,
      producer: 'p',
      correlationId: 'c',
      causationId: null,
      conversationId: 'conv',
      campaignId: 'camp',
      candidateKey: 'k',
      stepId: '',
    } as OutreachEvent;
    const base = eventCodec.encode(event).length;
    // stepId's length varint grows from 1 to 3 bytes when the string grows to ~1 MiB.
    const exact = eventCodec.encode({ ...event, stepId: 'x'.repeat(MiB - base - 2) } as OutreachEvent);
    expect(exact.length).toBe(MiB);
    expect(outcome(eventCodec, exact)).toBe('ok');
  });
});

describe('older writers (the resolver path)', () => {
  const v1 = probeRecord([
    { name: 'eventId', type: 'string' },
    { name: 'tags', type: { type: 'array', items: 'string' } },
    { name: 'count', type: 'int' },
  ]);
  // v2 dropped `tags`: avsc's resolver skips it, by the block byte size when a block has one.
  const v2 = { ...v1, fields: [v1.fields[0], v1.fields[2]] };
  const reader = new EventCodec({ Probe: { current: v2, history: [v1] } });
  const header = Buffer.concat([Buffer.from([0xc3, 0x01]), fingerprintBytes(schemaFingerprint(v1 as AvroSchema))]);
  const id = Buffer.concat([v(1), Buffer.from('e')]);

  it('reads a skipped field written in sized blocks', () => {
    const bytes = Buffer.concat([header, id, v(-1), v(2), v(1), Buffer.from('t'), v(0), v(7)]);
    expect(reader.decode(bytes)).toEqual({ type: 'Probe', eventId: 'e', count: 7 });
  });

  it('refuses a skipped block whose byte size lies, so the resolver never reads unchecked bytes', () => {
    // Size 3 would have avsc skip the item and the closing 0, and read `count` as the next block.
    const lying = Buffer.concat([header, id, v(-1), v(3), v(1), Buffer.from('t'), v(0), v(7)]);
    expect(outcome(reader, lying)).toBe('INVALID_BODY');
    // Size 0 cannot hold the block's one item at all.
    const impossible = Buffer.concat([header, id, v(-1), v(0), v(1), Buffer.from('t'), v(0), v(7)]);
    expect(outcome(reader, impossible)).toBe('INVALID_LENGTH');
  });

  it('refuses a bomb in an older version of a real schema', () => {
    const [older] = schemaDefinitions.OutreachRequested.history as [object];
    const event = {
      ...(avro.Type.forSchema(older as avro.Schema).random() as object),
      type: 'OutreachRequested',
    } as OutreachEvent;
    const bomb = Buffer.concat([
      Buffer.from([0xc3, 0x01]),
      fingerprintBytes(schemaFingerprint(older as AvroSchema)),
      fieldsBefore(event, 'contents', older),
      v(2 ** 30),
      Buffer.alloc(8),
    ]);
    expect(bomb.subarray(0, 10).equals(headerOf('OutreachRequested'))).toBe(false);
    expect(outcome(eventCodec, bomb)).toBe('INVALID_LENGTH');
  });
});
