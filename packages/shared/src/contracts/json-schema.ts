/**
 * HTTP bodies derived from the Avro schemas, so an ingress and its topic share one contract: a field
 * added to an `.avsc` is accepted over HTTP, documented in the OpenAPI and carried into the event
 * without a hand edit. `avroToJsonSchema` gives the JSON Schema a route validates with (and
 * @fastify/swagger publishes); `avroFromJson` turns a body that passed it into the event's fields.
 *
 * The JSON form, for the subset the schemas use:
 *   record              object; no properties beyond the fields; a field with a default, or one that
 *                       may be null, may be left out (the default, or null, stands in for it)
 *   string, boolean     the same
 *   int, long           integer within what the type holds and JSON reads exactly (|n| < 2^53)
 *   float, double       number
 *   uuid (logical)      string, format uuid
 *   timestamp-millis    string, format date-time (an instant a person can read; epoch ms on the topic)
 *   enum                string, one of the symbols
 *   array, map          array, object
 *   union               anyOf, `null` first and as `enum: [null]`: fastify's Ajv coerces types, so
 *                       a string branch listed before it would turn null into "", and a
 *                       `type: "null"` branch would turn "" (and 0, false) into null: an empty
 *                       conversationId or experimentId taken as none over HTTP, where the topic's
 *                       consumer refuses it (issue #31). An enum coerces nothing.
 * Bytes and fixed have no JSON form here and are refused, so a schema that grows one fails loudly.
 */
import type { AvroSchema } from './schema-tools.js';

export type JsonSchema = Record<string, unknown>;

export interface JsonSchemaOptions {
  /** Top-level fields the caller does not send: the envelope the ingress fills in, a field from the path. */
  readonly omit?: readonly string[];
  /** Top-level fields the caller may leave out although the schema requires them (the ingress fills them). */
  readonly optional?: readonly string[];
  /**
   * Bounds the edge adds to the contract, by field path (`contents`, `contents[].variant`,
   * `followUps[].delayMs`). On a field that may be null they go to its non-null branch. A path that
   * names no field throws: a renamed field must not lose its bound without anyone noticing.
   */
  readonly refine?: Readonly<Record<string, JsonSchema>>;
}

/** A union's null branch: null itself, and nothing Ajv's type coercion would make null ("", 0, false). */
const nullOnly = (): JsonSchema => ({ enum: [null] });

const PRIMITIVES = new Set(['null', 'boolean', 'int', 'long', 'float', 'double', 'bytes', 'string']);
const INT = 2 ** 31;

type Named = Map<string, AvroSchema>;

function fullName(node: AvroSchema, namespace: string | undefined): string {
  const name = node.name as string;
  if (name.includes('.')) return name;
  const ns = (node.namespace as string | undefined) ?? namespace;
  return ns ? `${ns}.${name}` : name;
}

/** Every named type (records, enums) by full and short name, so a later reference can be expanded. */
function collectNamed(node: unknown, namespace: string | undefined, into: Named): void {
  if (Array.isArray(node)) {
    for (const branch of node) collectNamed(branch, namespace, into);
    return;
  }
  if (typeof node !== 'object' || node === null) return;
  const schema = node as AvroSchema;
  let ns = namespace;
  if (
    typeof schema.name === 'string' &&
    (schema.type === 'record' || schema.type === 'enum' || schema.type === 'fixed')
  ) {
    const full = fullName(schema, namespace);
    ns = full.includes('.') ? full.slice(0, full.lastIndexOf('.')) : undefined;
    into.set(full, schema);
    into.set(schema.name, schema);
  }
  if (schema.type === 'record') for (const field of schema.fields as AvroSchema[]) collectNamed(field.type, ns, into);
  else if (schema.type === 'array') collectNamed(schema.items, ns, into);
  else if (schema.type === 'map') collectNamed(schema.values, ns, into);
  else if (typeof schema.type === 'object') collectNamed(schema.type, ns, into);
}

function resolve(type: unknown, named: Named): unknown {
  if (typeof type === 'string' && !PRIMITIVES.has(type)) {
    const found = named.get(type);
    if (!found) throw new Error(`unknown Avro type ${type}`);
    return found;
  }
  return type;
}

const branches = (type: unknown): unknown[] => (Array.isArray(type) ? type : [type]);
const isNullable = (type: unknown, named: Named) => branches(type).some((b) => resolve(b, named) === 'null');

interface Walk {
  readonly named: Named;
  readonly refine: ReadonlyMap<string, JsonSchema>;
  readonly used: Set<string>;
}

function convert(type: unknown, path: string, walk: Walk): JsonSchema {
  const node = resolve(type, walk.named);
  if (Array.isArray(node)) {
    // Null first (see the module header); the refinement goes to the other branches.
    const ordered = [...node].sort(
      (a, b) => Number(resolve(b, walk.named) === 'null') - Number(resolve(a, walk.named) === 'null'),
    );
    return {
      anyOf: ordered.map((branch) =>
        resolve(branch, walk.named) === 'null' ? nullOnly() : convert(branch, path, walk),
      ),
    };
  }
  const refined = (schema: JsonSchema): JsonSchema => {
    const extra = walk.refine.get(path);
    if (!extra) return schema;
    walk.used.add(path);
    return { ...schema, ...extra };
  };
  if (typeof node === 'string') {
    switch (node) {
      case 'null':
        return nullOnly();
      case 'boolean':
        return refined({ type: 'boolean' });
      case 'int':
        return refined({ type: 'integer', minimum: -INT, maximum: INT - 1 });
      case 'long':
        return refined({ type: 'integer', minimum: -Number.MAX_SAFE_INTEGER, maximum: Number.MAX_SAFE_INTEGER });
      case 'float':
      case 'double':
        return refined({ type: 'number' });
      case 'string':
        return refined({ type: 'string' });
      default:
        throw new Error(`${path}: Avro ${node} has no JSON form at the HTTP edge`);
    }
  }
  const schema = node as AvroSchema;
  const doc = typeof schema.doc === 'string' ? { description: schema.doc } : {};
  if (schema.logicalType === 'uuid' && schema.type === 'string') return refined({ type: 'string', format: 'uuid' });
  if (schema.logicalType === 'timestamp-millis' && schema.type === 'long')
    return refined({ type: 'string', format: 'date-time' });
  switch (schema.type) {
    case 'record':
      return refined({ ...doc, ...recordSchema(schema, path, walk, new Set(), new Set()) });
    case 'enum':
      return refined({ ...doc, type: 'string', enum: [...(schema.symbols as string[])] });
    case 'array':
      return refined({ type: 'array', items: convert(schema.items, `${path}[]`, walk) });
    case 'map':
      return refined({ type: 'object', additionalProperties: convert(schema.values, `${path}{}`, walk) });
    default:
      // A primitive written as an object (`{"type": "string"}`), logical types this edge does not read included.
      if (typeof schema.type === 'string' && PRIMITIVES.has(schema.type)) return convert(schema.type, path, walk);
      throw new Error(`${path}: Avro ${String(schema.type)} has no JSON form at the HTTP edge`);
  }
}

function recordSchema(
  record: AvroSchema,
  path: string,
  walk: Walk,
  omit: ReadonlySet<string>,
  optional: ReadonlySet<string>,
): JsonSchema {
  const properties: Record<string, JsonSchema> = {};
  const required: string[] = [];
  for (const field of record.fields as AvroSchema[]) {
    const name = field.name as string;
    if (omit.has(name)) continue;
    const fieldPath = path === '' ? name : `${path}.${name}`;
    const converted = convert(field.type, fieldPath, walk);
    const withDefault = 'default' in field && !isTimestamp(field.type, walk.named) ? { default: field.default } : {};
    properties[name] = {
      ...(typeof field.doc === 'string' ? { description: field.doc } : {}),
      ...converted,
      ...withDefault,
    };
    if (!('default' in field) && !isNullable(field.type, walk.named) && !optional.has(name)) required.push(name);
  }
  return { type: 'object', properties, ...(required.length > 0 ? { required } : {}), additionalProperties: false };
}

function isTimestamp(type: unknown, named: Named): boolean {
  return branches(type).some((b) => {
    const node = resolve(b, named);
    return typeof node === 'object' && node !== null && (node as AvroSchema).logicalType === 'timestamp-millis';
  });
}

/** The JSON Schema of an HTTP body that carries the fields of Avro record `schema` (see the module header). */
export function avroToJsonSchema(schema: object, options: JsonSchemaOptions = {}): JsonSchema {
  const record = schema as AvroSchema;
  if (record.type !== 'record') throw new Error('an HTTP body is derived from an Avro record');
  const named: Named = new Map();
  collectNamed(record, undefined, named);
  const walk: Walk = { named, refine: new Map(Object.entries(options.refine ?? {})), used: new Set() };
  const omit = new Set(options.omit ?? []);
  const optional = new Set(options.optional ?? []);
  for (const name of [...omit, ...optional]) {
    if (!(record.fields as AvroSchema[]).some((f) => f.name === name))
      throw new Error(`${record.name as string} has no field ${name}`);
  }
  const body = {
    ...(typeof record.doc === 'string' ? { description: record.doc } : {}),
    ...recordSchema(record, '', walk, omit, optional),
  };
  const unused = [...walk.refine.keys()].filter((path) => !walk.used.has(path));
  if (unused.length > 0) throw new Error(`${record.name as string} has no field at ${unused.join(', ')}`);
  return body;
}

export type JsonConversion<T> =
  { readonly ok: true; readonly value: T } | { readonly ok: false; readonly reason: string };

/**
 * The Avro value of a body that passed avroToJsonSchema's schema: fields left out get their default
 * (null where the field may be null), timestamps become epoch milliseconds. Omitted fields stay out;
 * the caller adds them. A date-time JSON Schema admits but Date cannot hold (a leap second,
 * `23:59:60Z`) is a reason, not a throw.
 */
export function avroFromJson<T>(
  schema: object,
  body: unknown,
  options: { readonly omit?: readonly string[] } = {},
): JsonConversion<T> {
  const record = schema as AvroSchema;
  const named: Named = new Map();
  collectNamed(record, undefined, named);
  try {
    const omit = new Set(options.omit ?? []);
    return { ok: true, value: fromRecord(record, body as Record<string, unknown>, '', named, omit) as T };
  } catch (error) {
    if (error instanceof ConversionError) return { ok: false, reason: error.message };
    throw error;
  }
}

class ConversionError extends Error {}

function fromRecord(
  record: AvroSchema,
  value: Record<string, unknown>,
  path: string,
  named: Named,
  omit: ReadonlySet<string>,
): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const field of record.fields as AvroSchema[]) {
    const name = field.name as string;
    if (omit.has(name)) continue;
    const fieldPath = path === '' ? name : `${path}.${name}`;
    const given = value[name];
    if (given === undefined) {
      if ('default' in field) out[name] = structuredClone(field.default);
      else if (isNullable(field.type, named)) out[name] = null;
      // Left out: the caller fills it (an `optional` field), or the encoder names it.
      continue;
    }
    out[name] = fromValue(field.type, given, fieldPath, named);
  }
  return out;
}

function fromValue(type: unknown, value: unknown, path: string, named: Named): unknown {
  const node = resolve(type, named);
  if (Array.isArray(node)) {
    if (value === null) return null;
    const other = node.filter((b) => resolve(b, named) !== 'null');
    // The schemas' unions are `null` or one type; a wider union is passed through as JSON gave it.
    return other.length === 1 ? fromValue(other[0], value, path, named) : value;
  }
  if (typeof node !== 'object' || node === null) return value;
  const schema = node as AvroSchema;
  if (schema.logicalType === 'timestamp-millis' && typeof value === 'string') {
    const millis = Date.parse(value);
    if (Number.isNaN(millis)) throw new ConversionError(`${path} is not a representable date-time`);
    return millis;
  }
  if (schema.type === 'record') return fromRecord(schema, value as Record<string, unknown>, path, named, new Set());
  if (schema.type === 'array')
    return (value as unknown[]).map((item, i) => fromValue(schema.items, item, `${path}[${i}]`, named));
  if (schema.type === 'map')
    return Object.fromEntries(
      Object.entries(value as Record<string, unknown>).map(([k, v]) => [
        k,
        fromValue(schema.values, v, `${path}.${k}`, named),
      ]),
    );
  return value;
}
