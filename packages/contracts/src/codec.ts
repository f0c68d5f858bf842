/**
 * Avro single-object encoding (https://avro.apache.org/docs/current/specification/#single-object-encoding):
 * C3 01, the writer schema's 8-byte little-endian CRC-64-AVRO fingerprint, then the Avro binary body.
 * Any Avro library given our schema files can decode these bytes; no registry is involved.
 *
 * Or the Confluent wire format (ADR 011), on the topics data teams read: a zero byte, the 4-byte
 * big-endian id a schema registry gave the writer schema, the Avro binary body. The codec never
 * calls the registry itself: ids are bound at start (`bindSchemaId`, `learnSchema`; registry/binding.ts),
 * an id first seen in flight is learned by the consumer before it decodes (or the message is
 * dead-lettered as UNKNOWN_SCHEMA_ID), so encoding and decoding stay synchronous and local.
 *
 * Decoding looks the fingerprint up among every known version of every event type, then resolves
 * the writer's version to the current one, so one topic carries several event types and older
 * writers stay readable. Before avsc reads a body, a guard walks it over the writer's schema and
 * refuses any length or count the bytes cannot hold (avro-guard.ts, ADR 005): decoding a message
 * costs time and memory in proportion to its size, never to what it claims.
 */
import avro from 'avsc';
import { AvroBodyGuard, defaultDecodeLimits, type DecodeLimits } from './avro-guard.js';
import { DecodeError } from './decode-error.js';
import { schemaDefinitions, type EventType, type OutreachEvent } from './events.generated.js';
import { fingerprintBytes } from './fingerprint.js';
import { canonicalForm, schemaFingerprint, type AvroSchema } from './canonical.js';

export { DecodeError, type DecodeErrorCode } from './decode-error.js';
export { defaultDecodeLimits, type DecodeLimits } from './avro-guard.js';

const MARKER = Buffer.from([0xc3, 0x01]);
const HEADER_LENGTH = MARKER.length + 8;
/** Confluent wire format: magic byte 0, then the schema id as a 4-byte big-endian integer. */
const CONFLUENT_MAGIC = 0;
const CONFLUENT_HEADER_LENGTH = 5;

/** The schema id of a Confluent-framed message, or undefined for anything else. */
export function confluentSchemaId(bytes: Uint8Array): number | undefined {
  if (bytes.length < CONFLUENT_HEADER_LENGTH || bytes[0] !== CONFLUENT_MAGIC) return undefined;
  return Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength).readUInt32BE(1);
}

export class EncodeError extends Error {
  override readonly name = 'EncodeError';
  constructor(
    readonly eventType: string,
    readonly paths: readonly string[],
  ) {
    super(`invalid ${eventType}: ${paths.join(', ') || 'not a record'}`);
  }
}

interface ReaderEntry {
  readonly type: EventType;
  readonly writer: avro.Type;
  /** Present when the writer is an older version: resolves its data to the current reader. */
  readonly resolver?: avro.Resolver;
  readonly reader: avro.Type;
  /** Checks the body against the writer's schema before avsc allocates anything for it. */
  readonly guard: AvroBodyGuard;
}

export class EventCodec {
  private readonly writers = new Map<EventType, { type: avro.Type; header: Buffer; fingerprint: bigint }>();
  private readonly readers = new Map<bigint, ReaderEntry>();
  /** Registry ids (Confluent framing) of the writer schemas we can read, current and older and newer. */
  private readonly readersById = new Map<number, ReaderEntry>();
  /** Event types encoded in the Confluent wire format, with the registry id of their current schema. */
  private readonly writerIds = new Map<EventType, Buffer>();
  private readonly currentByFullName = new Map<string, EventType>();
  readonly limits: DecodeLimits;

  /** `limits` bound what one message may make the decoder do; see DecodeLimits for the defaults. */
  constructor(
    definitions: Readonly<Record<string, { current: object; history: readonly object[] }>>,
    limits: Partial<DecodeLimits> = {},
  ) {
    this.limits = { ...defaultDecodeLimits, ...limits };
    for (const [name, definition] of Object.entries(definitions)) {
      const type = name as EventType;
      const reader = avro.Type.forSchema(definition.current as avro.Schema);
      const fingerprint = schemaFingerprint(definition.current as AvroSchema);
      this.currentByFullName.set(fullNameOf(definition.current), type);
      this.writers.set(type, {
        type: reader,
        fingerprint,
        header: Buffer.concat([MARKER, fingerprintBytes(fingerprint)]),
      });
      this.readers.set(fingerprint, { type, writer: reader, reader, guard: AvroBodyGuard.forType(reader) });
      for (const older of definition.history) {
        const writer = avro.Type.forSchema(older as avro.Schema);
        const olderFingerprint = schemaFingerprint(older as AvroSchema);
        if (olderFingerprint === fingerprint) continue;
        this.readers.set(olderFingerprint, {
          type,
          writer,
          reader,
          resolver: reader.createResolver(writer),
          guard: AvroBodyGuard.forType(writer),
        });
      }
    }
  }

  /** The canonical form and fingerprint a consumer in another language needs to decode `type`. */
  describe(type: EventType): { canonicalForm: string; fingerprint: bigint } {
    const writer = this.writers.get(type);
    if (!writer) throw new Error(`unknown event type ${type}`);
    return { canonicalForm: canonicalForm(writer.type.schema() as AvroSchema), fingerprint: writer.fingerprint };
  }

  /**
   * Encodes `type` in the Confluent wire format from now on, with `id` as its current schema's
   * registry id; undefined returns it to single-object encoding. Also makes `id` decodable.
   */
  bindSchemaId(type: EventType, id: number | undefined): void {
    if (id === undefined) {
      this.writerIds.delete(type);
      return;
    }
    const writer = this.writers.get(type);
    if (!writer) throw new Error(`unknown event type ${type}`);
    this.learnSchema(id, writer.type.schema() as object);
    const header = Buffer.alloc(CONFLUENT_HEADER_LENGTH);
    header.writeUInt8(CONFLUENT_MAGIC, 0);
    header.writeUInt32BE(id, 1);
    this.writerIds.set(type, header);
  }

  /**
   * Makes registry id `id` decodable: `schema` is the writer schema the registry holds for it (one
   * of ours, older or newer than this build's, or another team's writer of the same record). Its
   * full name chooses the event type; its data is resolved to our current schema. Throws when the
   * name is none of ours or our schema cannot read it: such an id stays unknown.
   */
  learnSchema(id: number, schema: object | string): EventType {
    const parsed = (typeof schema === 'string' ? JSON.parse(schema) : schema) as object;
    const type = this.currentByFullName.get(fullNameOf(parsed));
    if (type === undefined) throw new Error(`schema id ${id} is ${fullNameOf(parsed)}, not one of our event types`);
    const reader = (this.writers.get(type) as { type: avro.Type }).type;
    const writer = avro.Type.forSchema(parsed as avro.Schema);
    const same = canonicalForm(parsed as AvroSchema) === canonicalForm(reader.schema() as AvroSchema);
    this.readersById.set(id, {
      type,
      writer: same ? reader : writer,
      reader,
      ...(same ? {} : { resolver: reader.createResolver(writer) }),
      guard: AvroBodyGuard.forType(same ? reader : writer),
    });
    return type;
  }

  /** Whether `id` can be decoded now. */
  knowsSchemaId(id: number): boolean {
    return this.readersById.has(id);
  }

  /** The Confluent-framed ids among `values` that this codec cannot decode yet (for the consumer to learn). */
  unknownSchemaIds(values: Iterable<Uint8Array | null | undefined>): number[] {
    const unknown = new Set<number>();
    for (const value of values) {
      const id = value ? confluentSchemaId(value) : undefined;
      if (id !== undefined && !this.readersById.has(id)) unknown.add(id);
    }
    return [...unknown];
  }

  /** Forgets every registry binding (tests; a codec that goes back to single-object only). */
  clearSchemaIds(): void {
    this.writerIds.clear();
    this.readersById.clear();
  }

  encode(event: OutreachEvent): Buffer {
    const writer = this.writers.get(event.type);
    if (!writer) throw new EncodeError(String(event.type), ['type']);
    const { type: _type, ...fields } = event;
    const paths: string[] = [];
    if (!writer.type.isValid(fields, { errorHook: (path) => paths.push(path.join('.') || '(root)') })) {
      throw new EncodeError(event.type, paths);
    }
    return Buffer.concat([this.writerIds.get(event.type) ?? writer.header, writer.type.toBuffer(fields)]);
  }

  /** Throws DecodeError for anything that is not a complete, valid event. */
  decode(bytes: Uint8Array): OutreachEvent {
    const buffer = Buffer.isBuffer(bytes) ? bytes : Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength);
    if (buffer.length > this.limits.maxBytes) {
      throw new DecodeError(
        'TOO_LARGE',
        `message of ${buffer.length} bytes is larger than the decoder's maximum of ${this.limits.maxBytes}`,
      );
    }
    const { entry, headerLength } = this.entryOf(buffer);
    entry.guard.check(buffer, headerLength, this.limits, `${entry.type} body`);
    const body = buffer.subarray(headerLength);
    let value: Record<string, unknown>;
    try {
      value = entry.resolver
        ? (entry.reader.fromBuffer(body, entry.resolver) as Record<string, unknown>)
        : (entry.reader.fromBuffer(body) as Record<string, unknown>);
    } catch (error) {
      const message = error instanceof Error ? error.message : String(error);
      throw new DecodeError(
        /truncated/.test(message) ? 'TRUNCATED' : 'INVALID_BODY',
        `${entry.type} body could not be decoded: ${message}`,
      );
    }
    return { type: entry.type, ...value } as OutreachEvent;
  }

  private entryOf(buffer: Buffer): { entry: ReaderEntry; headerLength: number } {
    if (buffer.length >= CONFLUENT_HEADER_LENGTH && buffer[0] === CONFLUENT_MAGIC) {
      const id = buffer.readUInt32BE(1);
      const entry = this.readersById.get(id);
      if (!entry) throw new DecodeError('UNKNOWN_SCHEMA_ID', `schema id ${id} is unknown to this consumer`);
      return { entry, headerLength: CONFLUENT_HEADER_LENGTH };
    }
    if (buffer.length < HEADER_LENGTH || buffer[0] !== MARKER[0] || buffer[1] !== MARKER[1]) {
      throw new DecodeError(
        'NOT_SINGLE_OBJECT',
        buffer.length < HEADER_LENGTH && buffer[0] !== CONFLUENT_MAGIC
          ? `message of ${buffer.length} bytes is shorter than the ${HEADER_LENGTH}-byte single-object header`
          : 'message starts with neither the Avro single-object marker C3 01 nor the Confluent magic byte 0 and a schema id',
      );
    }
    const fingerprint = buffer.readBigUInt64LE(MARKER.length);
    const entry = this.readers.get(fingerprint);
    if (!entry) {
      throw new DecodeError(
        'UNKNOWN_FINGERPRINT',
        `no known schema has fingerprint ${fingerprint.toString(16).padStart(16, '0')}`,
      );
    }
    return { entry, headerLength: HEADER_LENGTH };
  }

  /**
   * The event type the bytes were written as, read from their framing alone (the registry id or the
   * fingerprint: the first 5 or 10 bytes), without decoding the body; undefined when the framing
   * names no schema this codec knows (decode then says why). A consumer that handles a few types
   * skips the others with this, unread: the type comes from the writer schema, never from a header.
   */
  typeOf(bytes: Uint8Array): EventType | undefined {
    try {
      return this.entryOf(Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength)).entry.type;
    } catch {
      return undefined;
    }
  }

  /** Like decode, but as a value: `{ ok: false, error }` instead of a throw. */
  tryDecode(bytes: Uint8Array): { ok: true; event: OutreachEvent } | { ok: false; error: DecodeError } {
    try {
      return { ok: true, event: this.decode(bytes) };
    } catch (error) {
      if (error instanceof DecodeError) return { ok: false, error };
      return {
        ok: false,
        error: new DecodeError('INVALID_BODY', error instanceof Error ? error.message : String(error)),
      };
    }
  }
}

/** `namespace.name` of a record schema (our schemas always give both). */
function fullNameOf(schema: object): string {
  const { name, namespace } = schema as { name?: string; namespace?: string };
  if (typeof name !== 'string') return '(no name)';
  return name.includes('.') || !namespace ? name : `${namespace}.${name}`;
}

/** The codec over every contract in schemas/. */
export const eventCodec = new EventCodec(schemaDefinitions);
