/**
 * The Confluent wire format in the codec (ADR 011), without a registry: ids are bound by hand, as
 * registry/binding.ts binds them at start. The registry itself is exercised in registry.int.test.ts.
 */
import avro from 'avsc';
import { describe, expect, it } from 'vitest';
import { eventBombs } from '@outreach/testkit';
import { confluentSchemaId, EventCodec } from './codec.js';
import { eventTypes, schemaDefinitions, type OutreachEvent } from './events.generated.js';

function randomEvent(type: (typeof eventTypes)[number]): OutreachEvent {
  const avroType = avro.Type.forSchema(schemaDefinitions[type].current as avro.Schema);
  return { type, ...(avroType.random() as object) } as OutreachEvent;
}

const confluent = (id: number, body: Buffer) => {
  const header = Buffer.alloc(5);
  header.writeUInt32BE(id, 1);
  return Buffer.concat([header, body]);
};

describe('EventCodec, Confluent wire format', () => {
  it('writes magic 0, the 4-byte big-endian id and the Avro body for a bound type, and reads it back', () => {
    const codec = new EventCodec(schemaDefinitions);
    codec.bindSchemaId('SendRecorded', 0x01020304);
    const event = randomEvent('SendRecorded');
    const bytes = codec.encode(event);
    expect([...bytes.subarray(0, 5)]).toEqual([0, 1, 2, 3, 4]);
    expect(confluentSchemaId(bytes)).toBe(0x01020304);
    const body = avro.Type.forSchema(schemaDefinitions.SendRecorded.current as avro.Schema).toBuffer(event);
    expect(bytes.subarray(5).equals(body)).toBe(true);
    expect(codec.decode(bytes)).toEqual(event);
    // Types not bound keep single-object encoding; both formats decode side by side.
    const other = randomEvent('SendRequested');
    const single = codec.encode(other);
    expect([...single.subarray(0, 2)]).toEqual([0xc3, 0x01]);
    expect(codec.decode(single)).toEqual(other);
  });

  it('refuses an id it does not know with UNKNOWN_SCHEMA_ID, and lists it for the consumer to learn', () => {
    const codec = new EventCodec(schemaDefinitions);
    const writer = new EventCodec(schemaDefinitions);
    writer.bindSchemaId('StepCompleted', 77);
    const bytes = writer.encode(randomEvent('StepCompleted'));
    const result = codec.tryDecode(bytes);
    expect(result.ok).toBe(false);
    expect(!result.ok && result.error.code).toBe('UNKNOWN_SCHEMA_ID');
    expect(codec.unknownSchemaIds([bytes, bytes, null, Buffer.from([0xc3, 0x01])])).toEqual([77]);
    codec.learnSchema(77, JSON.stringify(schemaDefinitions.StepCompleted.current));
    expect(codec.unknownSchemaIds([bytes])).toEqual([]);
    expect(codec.tryDecode(bytes).ok).toBe(true);
  });

  it('resolves a learned older writer to the current reader, as for fingerprints', () => {
    const codec = new EventCodec(schemaDefinitions);
    const [v1] = schemaDefinitions.SendRecorded.history as object[];
    const v1Type = avro.Type.forSchema(v1 as avro.Schema);
    const value = v1Type.random() as object;
    const older = new EventCodec({ SendRecorded: { current: v1 as object, history: [] } });
    expect(codec.learnSchema(5, v1 as object)).toBe('SendRecorded');
    const viaId = codec.decode(confluent(5, v1Type.toBuffer(value)));
    const viaFingerprint = codec.decode(older.encode({ type: 'SendRecorded', ...value } as OutreachEvent));
    expect(viaId).toEqual(viaFingerprint);
  });

  it('refuses to learn a schema that is none of our event types', () => {
    const codec = new EventCodec(schemaDefinitions);
    expect(() => codec.learnSchema(9, { type: 'record', name: 'Other', namespace: 'elsewhere', fields: [] })).toThrow(
      /elsewhere.Other, not one of our event types/,
    );
    expect(codec.knowsSchemaId(9)).toBe(false);
  });

  it('keeps the body guard: every bomb behind a Confluent header gets the same typed refusal', () => {
    const codec = new EventCodec(schemaDefinitions);
    for (const type of eventTypes) codec.bindSchemaId(type, 1000 + eventTypes.indexOf(type));
    for (const bomb of eventBombs()) {
      const reframed = confluent(1000 + eventTypes.indexOf(bomb.type), bomb.bytes.subarray(10));
      const result = codec.tryDecode(reframed);
      expect(result.ok, bomb.name).toBe(false);
      expect(!result.ok && result.error.code, bomb.name).toBe(bomb.code);
    }
  });

  it('goes back to single-object when unbound', () => {
    const codec = new EventCodec(schemaDefinitions);
    codec.bindSchemaId('VariantAssigned', 3);
    codec.bindSchemaId('VariantAssigned', undefined);
    expect(codec.encode(randomEvent('VariantAssigned'))[0]).toBe(0xc3);
    codec.clearSchemaIds();
    expect(codec.knowsSchemaId(3)).toBe(false);
  });
});
