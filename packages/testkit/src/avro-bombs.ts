/**
 * Hand-built Avro messages that claim far more than they carry (issue #14): the decoder must refuse
 * each one with a typed DecodeError before allocating for the claim. Shared by the codec's unit
 * fuzzing and the consumer and planner integration tests, so all of them throw the same bombs.
 */
import { performance } from 'node:perf_hooks';
import { getHeapStatistics } from 'node:v8';
import avro from 'avsc';
import { eventCodec, type EventCodec } from '@outreach/contracts';
import type { DecodeErrorCode } from '@outreach/contracts';
import { schemaDefinitions, type EventType, type OutreachEvent } from '@outreach/contracts';
import { fingerprintBytes } from '@outreach/contracts';

export interface AvroBomb {
  readonly name: string;
  readonly type: EventType;
  readonly bytes: Buffer;
  /** What the decoder must answer. */
  readonly code: DecodeErrorCode;
}

/** A zig-zag varint as Avro writes an int or long (exact up to 64 bits). */
export function zigzagVarint(value: number | bigint): Buffer {
  const n = BigInt(value);
  let unsigned = BigInt.asUintN(64, (n << 1n) ^ (n >> 63n));
  const out: number[] = [];
  do {
    const low = Number(unsigned & 0x7fn);
    unsigned >>= 7n;
    out.push(unsigned > 0n ? low | 0x80 : low);
  } while (unsigned > 0n);
  return Buffer.from(out);
}

/** The single-object header (C3 01 + fingerprint) of the current version of `type`. */
export function headerOf(type: EventType): Buffer {
  return Buffer.concat([Buffer.from([0xc3, 0x01]), fingerprintBytes(eventCodec.describe(type).fingerprint)]);
}

/** The Avro encoding of the fields of `event` that come before `field` in its schema (by default the current one). */
export function fieldsBefore(
  event: OutreachEvent,
  field: string,
  writerSchema: object = schemaDefinitions[event.type].current,
): Buffer {
  const schema = writerSchema as { name: string; namespace: string; fields: unknown[] };
  const at = (schema.fields as Array<{ name: string }>).findIndex((f) => f.name === field);
  if (at < 0) throw new Error(`${event.type} has no field ${field}`);
  const prefix = avro.Type.forSchema({
    ...schema,
    name: `${schema.name}Prefix`,
    fields: schema.fields.slice(0, at),
  } as avro.Schema);
  return prefix.toBuffer(event);
}

function outreachRequested(): OutreachEvent {
  return {
    type: 'OutreachRequested',
    eventId: '00000000-0000-4000-8000-000000000014',
    occurredAt: 1_700_000_000_000,
    producer: 'bomb',
    correlationId: 'c',
    causationId: null,
    requestId: 'r',
    campaignId: 'camp',
    candidateId: 'cand',
    email: 'a@example.com',
    step: 'intro',
    experimentId: null,
    contents: [],
    sendAt: null,
    conversationId: null,
    followUps: [],
  };
}

function variantContaminated(): OutreachEvent {
  return {
    type: 'VariantContaminated',
    eventId: '00000000-0000-4000-8000-000000000014',
    occurredAt: 1_700_000_000_000,
    producer: 'bomb',
    correlationId: 'c',
    causationId: null,
    experimentId: 'exp',
    candidateKey: 'cand',
    assignedVariant: 'A',
    exposedVariants: [],
    detectedAt: 1_700_000_000_000,
  };
}

function stepCompleted(): OutreachEvent {
  return {
    type: 'StepCompleted',
    eventId: '00000000-0000-4000-8000-000000000014',
    occurredAt: 1_700_000_000_000,
    producer: 'bomb',
    correlationId: 'c',
    causationId: null,
    conversationId: 'conv',
    campaignId: 'camp',
    candidateKey: 'cand',
    stepId: 's',
  };
}

/**
 * One bomb of each shape our schemas allow, each claiming `claim` items or bytes (default 2^30, the
 * issue's message) in about 100 bytes. The tail bytes only make avsc's unguarded read go on: it
 * reads items past the end of the buffer as empty values without complaint.
 */
export function eventBombs(claim = 2 ** 30): AvroBomb[] {
  const tail = Buffer.alloc(8);
  const request = outreachRequested();
  const bomb = (name: string, event: OutreachEvent, field: string, ...rest: Buffer[]): AvroBomb => ({
    name,
    type: event.type,
    bytes: Buffer.concat([headerOf(event.type), fieldsBefore(event, field), ...rest]),
    code: 'INVALID_LENGTH',
  });
  return [
    bomb('array: contents claims 2^30 items', request, 'contents', zigzagVarint(claim), tail),
    bomb(
      'negative block: contents claims 2^30 items in a 6-byte block',
      request,
      'contents',
      zigzagVarint(-claim),
      zigzagVarint(6),
      Buffer.alloc(6),
      Buffer.from([0]),
    ),
    bomb(
      'nested array: followUps[0].contents claims 2^30 items',
      request,
      'contents',
      zigzagVarint(0), // contents: []
      zigzagVarint(0), // sendAt: null
      zigzagVarint(0), // conversationId: null
      zigzagVarint(1), // followUps: one item
      zigzagVarint(1),
      Buffer.from('s'), // step
      zigzagVarint(0), // delayMs
      zigzagVarint(claim),
      tail,
    ),
    bomb('string: email claims 2^30 bytes', request, 'email', zigzagVarint(claim), tail),
    bomb('64-bit count: contents claims 2^62 items', request, 'contents', zigzagVarint(2n ** 62n), tail),
    bomb(
      'array of strings: exposedVariants claims 2^30 items',
      variantContaminated(),
      'exposedVariants',
      zigzagVarint(claim),
      tail,
    ),
    bomb('string: stepId claims 2^30 bytes', stepCompleted(), 'stepId', zigzagVarint(claim), tail),
    {
      ...bomb('varint of 11 bytes for a count', request, 'contents', Buffer.alloc(10, 0xff), Buffer.from([1]), tail),
      code: 'INVALID_BODY',
    },
  ];
}

export interface MeasuredDecode {
  readonly result: ReturnType<EventCodec['tryDecode']>;
  /** Wall time of the decode, ms. */
  readonly ms: number;
  /** Growth of V8's used heap across the decode, bytes (garbage included: what it allocated). */
  readonly heapBytes: number;
}

/**
 * Decodes once and measures it. A shared 2-core machine can pause any call (GC, another process), so
 * when a decode exceeds `bound`, it is measured again up to twice and the smallest figures count: a
 * decode that really allocates or loops exceeds the bound every time.
 */
export function measureDecode(
  codec: EventCodec,
  bytes: Uint8Array,
  bound: { readonly ms: number; readonly heapBytes: number },
): MeasuredDecode {
  let best: MeasuredDecode | undefined;
  for (let attempt = 0; attempt < 3; attempt++) {
    const heapBefore = getHeapStatistics().used_heap_size;
    const started = performance.now();
    const result = codec.tryDecode(bytes);
    const ms = performance.now() - started;
    const heapBytes = getHeapStatistics().used_heap_size - heapBefore;
    best = best
      ? { result, ms: Math.min(best.ms, ms), heapBytes: Math.min(best.heapBytes, heapBytes) }
      : { result, ms, heapBytes };
    if (best.ms <= bound.ms && best.heapBytes <= bound.heapBytes) break;
  }
  return best as MeasuredDecode;
}

/** A record schema named Probe, in the tests' namespace, with these fields. */
export function probeRecord<Fields extends object[]>(fields: Fields) {
  return { type: 'record', name: 'Probe', namespace: 'outreach.test', fields };
}

/**
 * A schema with every Avro type our event schemas do not use, and the shapes that make a guard hard:
 * items of zero bytes (null, an empty record), arrays of arrays, a map, recursion.
 */
export const probeSchema = probeRecord([
  { name: 'flag', type: 'boolean' },
  { name: 'count', type: 'int' },
  { name: 'total', type: 'long' },
  { name: 'ratio', type: 'float' },
  { name: 'score', type: 'double' },
  { name: 'blob', type: 'bytes' },
  { name: 'id', type: { type: 'fixed', name: 'Id4', size: 4 } },
  { name: 'color', type: { type: 'enum', name: 'Color', symbols: ['RED', 'GREEN', 'BLUE'] } },
  { name: 'labels', type: { type: 'map', values: { type: 'array', items: 'string' } } },
  { name: 'nothings', type: { type: 'array', items: 'null' } },
  { name: 'empties', type: { type: 'array', items: { type: 'record', name: 'Empty', fields: [] } } },
  { name: 'matrix', type: { type: 'array', items: { type: 'array', items: 'null' } } },
  {
    name: 'list',
    type: [
      'null',
      {
        type: 'record',
        name: 'Cell',
        fields: [
          { name: 'value', type: 'int' },
          { name: 'next', type: ['null', 'Cell'] },
        ],
      },
    ],
  },
]);

/** A valid Probe value; its arrays and maps hold 9 items and entries in all. */
export const probeValue = {
  flag: true,
  count: -3,
  total: 1_700_000_000_000,
  ratio: 0.5,
  score: 2.25,
  blob: Buffer.from('blob'),
  id: Buffer.from('abcd'),
  color: 'GREEN',
  labels: { a: ['x', 'y'] },
  nothings: [null, null],
  empties: [{}],
  matrix: [[null], []],
  list: { value: 1, next: { value: 2, next: null } },
};
