import { mkdtempSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import avro from 'avsc';
import { describe, expect, it } from 'vitest';
import { DecodeError, EventCodec, eventCodec } from './codec.js';
import { eventTypes, schemaDefinitions, type OutreachEvent } from './events.generated.js';
import { crc64Avro } from './fingerprint.js';
import { checkCompatibility, generateTypeScript, loadSchemaSet } from '@outreach/shared';
import { canonicalForm, schemaFingerprint } from '@outreach/contracts';
import { probeRecord } from '@outreach/testkit';

const schemasDir = join(import.meta.dirname, '..', '..', '..', 'schemas');

/** A valid random instance of each event type, from the schema itself. */
function randomEvent(type: (typeof eventTypes)[number]): OutreachEvent {
  const avroType = avro.Type.forSchema(schemaDefinitions[type].current as avro.Schema);
  return { type, ...(avroType.random() as object) } as OutreachEvent;
}

describe('CRC-64-AVRO', () => {
  // The Avro project's published vectors (share/test/data/schema-tests.txt), signed 64-bit.
  const vectors: Array<[string, bigint]> = [
    ['"null"', 7195948357588979594n],
    ['"boolean"', -6970731678124411036n],
    ['"int"', 8247732601305521295n],
    ['"long"', -3434872931120570953n],
    ['"float"', 5583340709985441680n],
    ['"string"', -8142146995180207161n],
    ['{"name":"foo","type":"fixed","size":15}', 1756455273707447556n],
    ['{"name":"foo","type":"record","fields":[{"name":"f1","type":"boolean"}]}', 7843277075252814651n],
    ['["int","boolean"]', 5392556393470105090n],
    ['{"name":"foo","type":"record","fields":[]}', -4824392279771201922n],
    [
      '{"name":"PigValue","type":"record","fields":[{"name":"value","type":["null","int","long","PigValue"]}]}',
      -1759257747318642341n,
    ],
  ];
  it.each(vectors)('fingerprints %s as the Avro spec does', (canonical, expected) => {
    expect(BigInt.asIntN(64, crc64Avro(canonical))).toBe(expected);
  });

  it('fingerprints the Parsing Canonical Form, not the source text', () => {
    const schema = { type: 'fixed', size: 15, name: 'foo', doc: 'ignored', namespace: '' };
    expect(canonicalForm(schema)).toBe('{"name":"foo","type":"fixed","size":15}');
    expect(BigInt.asIntN(64, schemaFingerprint(schema))).toBe(1756455273707447556n);
  });
});

describe('contracts in schemas/', () => {
  const set = loadSchemaSet(schemasDir);

  it('has one schema per event type of the topic table, each with the envelope fields', () => {
    expect(set.current.map((f) => f.name).sort()).toEqual(
      [
        'AddressSuppressed',
        'ConversationClosed',
        'ConversationRecovered',
        'ConversationStalled',
        'ConversationStarted',
        'MessageReceived',
        'NextStepScheduled',
        'OutreachRejected',
        'OutreachRequested',
        'SendRecorded',
        'SendRequested',
        'SequencePlanned',
        'StepCancelled',
        'StepCompleted',
        'VariantAssigned',
        'VariantContaminated',
      ].sort(),
    );
    for (const file of set.current) {
      const names = (file.schema.fields as Array<{ name: string }>).map((f) => f.name);
      expect(names.slice(0, 5), file.name).toEqual([
        'eventId',
        'occurredAt',
        'producer',
        'correlationId',
        'causationId',
      ]);
      expect(file.schema.namespace).toBe('outreach.events');
      expect(typeof file.schema.doc).toBe('string');
    }
  });

  it('matches the generated TypeScript exactly (run `npm run schemas:gen` after changing a schema)', () => {
    const generated = readFileSync(join(import.meta.dirname, 'events.generated.ts'), 'utf8');
    expect(generated).toBe(generateTypeScript(set));
  });

  it('keeps the address out of every topic meant for data teams', () => {
    const pii = /^(email|emailNorm|body|subject)$/;
    for (const file of set.current.filter((f) => !['SendRequested', 'OutreachRequested'].includes(f.name))) {
      const names = (file.schema.fields as Array<{ name: string }>).map((f) => f.name);
      expect(
        names.filter((n) => pii.test(n)),
        file.name,
      ).toEqual([]);
    }
  });
});

describe('eventCodec', () => {
  it.each(eventTypes)('round-trips %s through single-object encoding', (type) => {
    for (let i = 0; i < 25; i++) {
      const event = randomEvent(type);
      const bytes = eventCodec.encode(event);
      expect(bytes.subarray(0, 2)).toEqual(Buffer.from([0xc3, 0x01]));
      expect(bytes.readBigUInt64LE(2)).toBe(eventCodec.describe(type).fingerprint);
      expect(eventCodec.decode(bytes)).toEqual(event);
    }
  });

  it('refuses to encode an event that does not match its schema, naming the fields', () => {
    const event = {
      ...randomEvent('SendRecorded'),
      outcome: 'delivered-maybe',
      campaignId: 42,
    } as unknown as OutreachEvent;
    expect(() => eventCodec.encode(event)).toThrowError(
      /invalid SendRecorded: .*campaignId.*outcome|outcome.*campaignId/,
    );
  });

  it('gives typed errors for bytes that are not an event', () => {
    const valid = eventCodec.encode(randomEvent('StepCompleted'));
    const code = (bytes: Uint8Array) => {
      const result = eventCodec.tryDecode(bytes);
      return result.ok ? 'ok' : result.error.code;
    };
    expect(code(Buffer.from('{"json":true}'))).toBe('NOT_SINGLE_OBJECT');
    expect(code(Buffer.alloc(3))).toBe('NOT_SINGLE_OBJECT');
    expect(code(Buffer.concat([Buffer.from([0xc3, 0x01]), Buffer.alloc(8, 7), valid.subarray(10)]))).toBe(
      'UNKNOWN_FINGERPRINT',
    );
    expect(code(valid.subarray(0, valid.length - 3))).toBe('TRUNCATED');
    expect(code(Buffer.concat([valid, Buffer.from([1, 2, 3])]))).toBe('INVALID_BODY');
    expect(() => eventCodec.decode(valid.subarray(0, 12))).toThrow(DecodeError);
  });

  it('never throws anything but DecodeError on random bytes', () => {
    const header = eventCodec.encode(randomEvent('SendRequested')).subarray(0, 10);
    for (let i = 0; i < 5_000; i++) {
      const random = Buffer.from(Array.from({ length: (i % 64) + 1 }, () => Math.floor(Math.random() * 256)));
      for (const bytes of [random, Buffer.concat([header, random])]) {
        const result = eventCodec.tryDecode(bytes);
        if (!result.ok) expect(result.error).toBeInstanceOf(DecodeError);
      }
    }
  });
});

describe('schema evolution', () => {
  it('reads OutreachRequested written with v1 (history) as the current version, with defaults', () => {
    const [v1] = loadSchemaSet(join(import.meta.dirname, '..', '..', '..', 'schemas')).history.filter(
      (h) => h.name === 'OutreachRequested',
    );
    const oldWriter = new EventCodec({ OutreachRequested: { current: v1?.schema as object, history: [] } });
    const old = {
      type: 'OutreachRequested',
      ...(avro.Type.forSchema(v1?.schema as avro.Schema).random() as object),
    } as OutreachEvent;
    expect(eventCodec.decode(oldWriter.encode(old))).toEqual({ ...old, conversationId: null, followUps: [] });
  });

  const v1 = probeRecord([
    { name: 'eventId', type: 'string' },
    { name: 'count', type: 'int' },
  ]);
  const v2 = { ...v1, fields: [...v1.fields, { name: 'label', type: ['null', 'string'], default: null }] };
  const v3 = { ...v1, fields: [...v1.fields, { name: 'required', type: 'string' }] };

  it('decodes a message written with v1 using the v2 codec (fingerprint of v1, resolved to v2)', () => {
    const writer = new EventCodec({ Probe: { current: v1, history: [] } });
    const reader = new EventCodec({ Probe: { current: v2, history: [v1] } });
    const bytes = writer.encode({ type: 'Probe', eventId: 'e1', count: 3 } as unknown as OutreachEvent);
    expect(reader.decode(bytes)).toEqual({ type: 'Probe', eventId: 'e1', count: 3, label: null });
  });

  function schemaDir(current: object, history: object[]): string {
    const dir = mkdtempSync(join(tmpdir(), 'schemas-'));
    writeFileSync(join(dir, 'Probe.avsc'), JSON.stringify(current));
    mkdirSync(join(dir, 'history'));
    history.forEach((schema, i) => writeFileSync(join(dir, 'history', `Probe.v${i + 1}.avsc`), JSON.stringify(schema)));
    return dir;
  }

  it('accepts a compatible change and reports an incompatible one', () => {
    expect(checkCompatibility(loadSchemaSet(schemaDir(v2, [v1])))).toEqual([]);
    const problems = checkCompatibility(loadSchemaSet(schemaDir(v3, [v1])));
    expect(problems).toHaveLength(1);
    expect(problems[0]).toMatchObject({ schema: 'Probe', against: 'Probe.v1.avsc' });
  });
});

describe('typeOf: the written type from the framing alone', () => {
  it('names the type of every event, current and older schemas alike, without reading the body', () => {
    for (const type of eventTypes) {
      const bytes = eventCodec.encode(randomEvent(type));
      expect(eventCodec.typeOf(bytes)).toBe(type);
      // The body is not read: a truncated body still names its type (decode refuses it).
      expect(eventCodec.typeOf(bytes.subarray(0, 10))).toBe(type);
      expect(eventCodec.tryDecode(bytes.subarray(0, 10)).ok).toBe(false);
    }
  });

  it('names nothing for bytes whose framing names no known schema', () => {
    for (const bytes of [
      Buffer.alloc(0),
      Buffer.from([0xc3, 0x01, 1, 2, 3]),
      Buffer.from([0xc3, 0x01, 0, 0, 0, 0, 0, 0, 0, 0, 9]),
      Buffer.from([0, 0, 0, 0x7f, 0xff, 1]),
      Buffer.from('{"type":"SendRecorded"}'),
    ]) {
      expect(eventCodec.typeOf(bytes)).toBeUndefined();
    }
  });
});
