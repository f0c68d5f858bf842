/**
 * Property-based fuzzing of the decoder (issue #14, ADR 005) over every schema the codec knows:
 * each current event type, each version in schemas/history, and a probe schema with every Avro type
 * our events do not use (maps, bytes, fixed, enums, floats, zero-byte items, recursion).
 *
 * For every input: the decoder returns an event that is valid for its schema, or a typed
 * DecodeError, never anything else; and each decode stays under 50 ms and 16 MB of heap.
 *
 * Fixed seed, modest runs by default (part of the unit project). A long run:
 *   FUZZ_RUNS=100000 npx vitest run --project unit packages/contracts/src/codec.fuzz.unit.test.ts
 * FUZZ_SEED picks another seed; a failure prints the seed and path that reproduce it.
 */
import avro from 'avsc';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { measureDecode, probeSchema, zigzagVarint } from '@outreach/testkit';
import { DecodeError, EventCodec, eventCodec } from './codec.js';
import { eventTypes, schemaDefinitions, type OutreachEvent } from './events.generated.js';

const SEED = Number(process.env.FUZZ_SEED ?? 14);
const RUNS = Number(process.env.FUZZ_RUNS ?? 100);
/** Properties that decode a message once per byte offset get fewer runs. */
const OFFSET_RUNS = Math.max(5, Math.ceil(RUNS / 20));
const TIMEOUT = process.env.FUZZ_RUNS ? 6 * 60 * 60_000 : 60_000;
const BOUND = { ms: 50, heapBytes: 16 * 1024 * 1024 };

/** A fast-check arbitrary of valid values of an avsc type; recursion and collections stop at depth 4. */
function arbitraryOf(type: avro.Type, depth = 0): fc.Arbitrary<unknown> {
  const deep = depth >= 4;
  const name = type.typeName;
  if (name.startsWith('logical:')) return arbitraryOf((type as avro.types.LogicalType).underlyingType, depth);
  switch (name) {
    case 'null':
      return fc.constant(null);
    case 'boolean':
      return fc.boolean();
    case 'int':
      return fc.integer();
    case 'long':
      // avsc's varint arithmetic is exact only within ±2^52 (beyond, a long does not round-trip).
      return fc.oneof(
        fc.integer({ min: -1000, max: 1000 }),
        fc.bigInt({ min: -(2n ** 52n), max: 2n ** 52n }).map(Number),
      );
    case 'float':
      return fc.float();
    case 'double':
      return fc.double();
    case 'string':
      return fc.oneof(fc.string({ maxLength: 12 }), fc.string({ unit: 'grapheme', maxLength: 4 }));
    case 'bytes':
      return fc.uint8Array({ maxLength: 12 }).map((b) => Buffer.from(b));
    case 'fixed': {
      const size = (type as avro.types.FixedType).size;
      return fc.uint8Array({ minLength: size, maxLength: size }).map((b) => Buffer.from(b));
    }
    case 'enum':
      return fc.constantFrom(...(type as avro.types.EnumType).symbols);
    case 'array':
      return deep
        ? fc.constant([])
        : fc.array(arbitraryOf((type as avro.types.ArrayType).itemsType, depth + 1), { maxLength: 3 });
    case 'map':
      return deep
        ? fc.constant({})
        : fc.dictionary(
            fc.string({ maxLength: 6 }),
            arbitraryOf((type as avro.types.MapType).valuesType as avro.Type, depth + 1),
            { maxKeys: 3, noNullPrototype: true },
          );
    case 'record':
      return fc.record(
        Object.fromEntries(
          (type as avro.types.RecordType).fields.map((f) => [f.name, arbitraryOf(f.type, depth + 1)] as const),
        ),
      );
    case 'union:unwrapped': {
      const branches = (type as avro.types.UnwrappedUnionType).types;
      if (deep && branches.some((b) => b.typeName === 'null')) return fc.constant(null);
      return fc.oneof(...branches.map((b) => arbitraryOf(b, depth + 1)));
    }
    default:
      throw new Error(`no arbitrary for ${name}`);
  }
}

interface Subject {
  readonly label: string;
  /** Encodes with the writer's version (its fingerprint in the header). */
  readonly writer: EventCodec;
  readonly reader: EventCodec;
  /** The current version: what a decoded event must be valid for. */
  readonly readerType: avro.Type;
  readonly type: string;
  readonly messages: fc.Arbitrary<{ event: OutreachEvent; bytes: Buffer }>;
  /** Current versions round-trip exactly; older ones decode to the current shape. */
  readonly roundTrips: boolean;
}

function subject(
  label: string,
  type: string,
  writerSchema: object,
  reader: EventCodec,
  currentSchema: object,
): Subject {
  const writer = new EventCodec({ [type]: { current: writerSchema, history: [] } });
  const writerType = avro.Type.forSchema(writerSchema as avro.Schema);
  return {
    label,
    type,
    writer,
    reader,
    readerType: avro.Type.forSchema(currentSchema as avro.Schema),
    roundTrips: writerSchema === currentSchema,
    messages: arbitraryOf(writerType).map((value) => {
      const event = { ...(value as object), type } as OutreachEvent;
      return { event, bytes: writer.encode(event) };
    }),
  };
}

const probeCodec = new EventCodec({ Probe: { current: probeSchema, history: [] } });
const subjects: Subject[] = [
  ...eventTypes.flatMap((type) => {
    const { current, history } = schemaDefinitions[type];
    return [
      subject(type, type, current, eventCodec, current),
      ...history.map((older, i) => subject(`${type} (history ${i + 1})`, type, older, eventCodec, current)),
    ];
  }),
  subject('Probe (every Avro type)', 'Probe', probeSchema, probeCodec, probeSchema),
];

/** Decodes under the bounds; an event must be valid for the current schema, a failure typed. */
function decodeBounded(s: Subject, bytes: Uint8Array): ReturnType<EventCodec['tryDecode']> {
  const measured = measureDecode(s.reader, bytes, BOUND);
  expect(measured.ms, `decode time (ms) of ${Buffer.from(bytes).toString('hex')}`).toBeLessThan(BOUND.ms);
  expect(measured.heapBytes, `heap growth of ${Buffer.from(bytes).toString('hex')}`).toBeLessThan(BOUND.heapBytes);
  const { result } = measured;
  if (result.ok) {
    const { type, ...fields } = result.event as { type: string };
    expect(type).toBe(s.type);
    expect(s.readerType.isValid(fields), `decoded value valid for ${s.type}`).toBe(true);
  } else {
    expect(result.error).toBeInstanceOf(DecodeError);
  }
  return result;
}

/** Huge and hostile varints to plant: counts and lengths of 2^30, 2^62, negative ones, 10 and 11 bytes. */
const HOSTILE_VARINTS = [
  zigzagVarint(2 ** 30),
  zigzagVarint(-(2 ** 30)),
  zigzagVarint(2n ** 62n),
  zigzagVarint(-(2n ** 63n)),
  zigzagVarint(-1),
  zigzagVarint(70_000),
  Buffer.from([0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01]),
];

const options = (numRuns: number) => ({ seed: SEED, numRuns });

describe.each(subjects.map((s) => [s.label, s] as const))('decoding %s', (_, s) => {
  const header = s.writer
    .encode(
      fc.sample(
        s.messages.map((m) => m.event),
        { seed: SEED, numRuns: 1 },
      )[0] as OutreachEvent,
    )
    .subarray(0, 10);

  it(
    'decodes every valid message',
    () => {
      fc.assert(
        fc.property(s.messages, ({ event, bytes }) => {
          const result = decodeBounded(s, bytes);
          expect(result.ok, result.ok ? '' : result.error.message).toBe(true);
          if (result.ok && s.roundTrips) expect(result.event).toEqual(event);
        }),
        options(RUNS),
      );
    },
    TIMEOUT,
  );

  it(
    'answers random bytes after a valid header with an event or a DecodeError',
    () => {
      fc.assert(
        fc.property(fc.uint8Array({ maxLength: 300 }), (body) => {
          decodeBounded(s, Buffer.concat([header, body]));
        }),
        options(RUNS),
      );
    },
    TIMEOUT,
  );

  it(
    'answers valid messages with bytes overwritten, inserted or deleted',
    () => {
      const edit = fc.record({
        at: fc.nat(),
        kind: fc.constantFrom('overwrite', 'insert', 'delete'),
        bytes: fc.uint8Array({ minLength: 1, maxLength: 4 }),
      });
      fc.assert(
        fc.property(s.messages, fc.array(edit, { minLength: 1, maxLength: 4 }), ({ bytes }, edits) => {
          let mutated = Buffer.from(bytes);
          for (const { at, kind, bytes: b } of edits) {
            // Keep the header: a broken header is the boring NOT_SINGLE_OBJECT / UNKNOWN_FINGERPRINT.
            const i = 10 + (at % Math.max(1, mutated.length - 10));
            const tail = kind === 'overwrite' || kind === 'delete' ? i + b.length : i;
            mutated = Buffer.concat([
              mutated.subarray(0, i),
              kind === 'delete' ? Buffer.alloc(0) : b,
              mutated.subarray(tail),
            ]);
          }
          decodeBounded(s, mutated);
        }),
        options(RUNS),
      );
    },
    TIMEOUT,
  );

  it(
    'refuses a valid message cut at every offset: TRUNCATED in the body, NOT_SINGLE_OBJECT in the header',
    () => {
      fc.assert(
        fc.property(s.messages, ({ bytes }) => {
          for (let cut = 0; cut < bytes.length; cut++) {
            const result = decodeBounded(s, bytes.subarray(0, cut));
            expect(result.ok ? 'ok' : result.error.code, `cut at ${cut} of ${bytes.toString('hex')}`).toBe(
              cut < 10 ? 'NOT_SINGLE_OBJECT' : 'TRUNCATED',
            );
          }
        }),
        options(OFFSET_RUNS),
      );
    },
    TIMEOUT,
  );

  it(
    'refuses huge counts and lengths planted at every offset (every varint among them) in bounded time and memory',
    () => {
      fc.assert(
        fc.property(s.messages, fc.boolean(), ({ bytes }, replace) => {
          for (let at = 10; at < bytes.length; at++) {
            for (const varint of HOSTILE_VARINTS) {
              // Over the byte there (a varint start is a one-byte count or length in most messages), or before it.
              const planted = Buffer.concat([bytes.subarray(0, at), varint, bytes.subarray(replace ? at + 1 : at)]);
              decodeBounded(s, planted);
            }
          }
        }),
        options(OFFSET_RUNS),
      );
    },
    TIMEOUT,
  );
});
