/**
 * Avro single-object encoding (https://avro.apache.org/docs/current/specification/#single-object-encoding):
 * C3 01, the writer schema's 8-byte little-endian CRC-64-AVRO fingerprint, then the Avro binary body.
 * Any Avro library given our schema files can decode these bytes; no registry is involved.
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
import { canonicalForm, schemaFingerprint, type AvroSchema } from './schema-tools.js';

export { DecodeError, type DecodeErrorCode } from './decode-error.js';
export { defaultDecodeLimits, type DecodeLimits } from './avro-guard.js';

const MARKER = Buffer.from([0xc3, 0x01]);
const HEADER_LENGTH = MARKER.length + 8;

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

  encode(event: OutreachEvent): Buffer {
    const writer = this.writers.get(event.type);
    if (!writer) throw new EncodeError(String(event.type), ['type']);
    const { type: _type, ...fields } = event;
    const paths: string[] = [];
    if (!writer.type.isValid(fields, { errorHook: (path) => paths.push(path.join('.') || '(root)') })) {
      throw new EncodeError(event.type, paths);
    }
    return Buffer.concat([writer.header, writer.type.toBuffer(fields)]);
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
    if (buffer.length < HEADER_LENGTH || buffer[0] !== MARKER[0] || buffer[1] !== MARKER[1]) {
      throw new DecodeError(
        'NOT_SINGLE_OBJECT',
        buffer.length < HEADER_LENGTH
          ? `message of ${buffer.length} bytes is shorter than the ${HEADER_LENGTH}-byte single-object header`
          : 'message does not start with the Avro single-object marker C3 01',
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
    entry.guard.check(buffer, HEADER_LENGTH, this.limits, `${entry.type} body`);
    const body = buffer.subarray(HEADER_LENGTH);
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

/** The codec over every contract in schemas/. */
export const eventCodec = new EventCodec(schemaDefinitions);
