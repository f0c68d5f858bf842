/**
 * A validating pass over an Avro binary body, guided by the writer's schema, that runs before avsc
 * reads it (ADR 005).
 *
 * Why it exists: avsc 5.7 trusts the counts it reads. For an array block it calls `new Array(n)` and
 * reads n items, and only once the whole value is read does it check that the buffer had the bytes;
 * items read past the end come out as empty values, without an error. A ~90-byte OutreachRequested
 * whose `contents` block claims 2^30 items builds a billion objects and kills the process, and since
 * its offset is never committed, every replica that picks the partition up next (issue #14).
 *
 * The pass allocates nothing per value: it reads varints and moves an offset. Before anything that
 * avsc would allocate for, it checks the claim against the bytes left:
 * - a string, bytes or fixed length must fit in the bytes left;
 * - an array or map block of n items must fit at its items' smallest encoding (n × minimum size) in
 *   the bytes left, or in its own declared byte size; items that encode in zero bytes (null, an empty
 *   record) are bounded only by the next rule;
 * - one message holds at most `maxItems` array items and map entries, at every depth together;
 * - records, arrays and maps nest at most `maxDepth` deep (only a recursive schema can get near it);
 * - a varint is at most 5 bytes for an int, enum or union index and 10 for a long, length or count;
 * - a negative block's byte size must equal what its items take: avsc's resolver skips a dropped
 *   field by that size, so a lying size would have it read bytes this pass never checked.
 * A body this pass accepts makes avsc create at most (its bytes + maxItems) values.
 */
import type avro from 'avsc';
import { DecodeError, type DecodeErrorCode } from './decode-error.js';

export interface DecodeLimits {
  /** Largest message, header included. The brokers' max.message.bytes default is 1 MiB (+12 bytes of batch). */
  readonly maxBytes: number;
  /** Array items plus map entries in one message, at every depth together. */
  readonly maxItems: number;
  /** Records, arrays and maps nested in one another. Our deepest schema nests 5 deep. */
  readonly maxDepth: number;
}

export const defaultDecodeLimits: DecodeLimits = Object.freeze({
  maxBytes: 1_048_576,
  // The HTTP ingress caps a request at 20 contents and 20 follow-ups of 20 contents each (~420 items).
  maxItems: 65_536,
  maxDepth: 64,
});

type Primitive = 'null' | 'boolean' | 'int' | 'long' | 'float' | 'double' | 'string' | 'bytes';

type Node =
  | { readonly kind: Primitive }
  | { readonly kind: 'fixed'; readonly size: number }
  | { readonly kind: 'enum'; readonly symbols: number }
  | ArrayNode
  | MapNode
  | RecordNode
  | UnionNode;

interface ArrayNode {
  readonly kind: 'array';
  items: Node;
  /** Fewest bytes one item can take. */
  itemMin: number;
}
interface MapNode {
  readonly kind: 'map';
  values: Node;
  /** Fewest bytes one entry (key + value) can take. */
  entryMin: number;
}
interface RecordNode {
  readonly kind: 'record';
  readonly fields: Array<{ readonly name: string; node: Node }>;
}
interface UnionNode {
  readonly kind: 'union';
  readonly branches: Node[];
}

const PRIMITIVES = new Set<string>(['null', 'boolean', 'int', 'long', 'float', 'double', 'string', 'bytes']);

/** The schema as the pass needs it; named types (and recursion) become shared nodes. */
function compile(type: avro.Type, seen: Map<avro.Type, Node>, containers: Array<ArrayNode | MapNode>): Node {
  const known = seen.get(type);
  if (known) return known;
  const typeName = type.typeName;
  if (PRIMITIVES.has(typeName)) return { kind: typeName as Primitive };
  // Logical types without an implementation registered read as their underlying type.
  if (typeName.startsWith('logical:')) {
    return compile((type as avro.types.LogicalType).underlyingType, seen, containers);
  }
  if (typeName === 'abstract:long') return { kind: 'long' };
  switch (typeName) {
    case 'fixed':
      return { kind: 'fixed', size: (type as avro.types.FixedType).size };
    case 'enum':
      return { kind: 'enum', symbols: (type as avro.types.EnumType).symbols.length };
    case 'array': {
      const node: ArrayNode = { kind: 'array', items: { kind: 'null' }, itemMin: 0 };
      seen.set(type, node);
      containers.push(node);
      node.items = compile((type as avro.types.ArrayType).itemsType, seen, containers);
      return node;
    }
    case 'map': {
      const node: MapNode = { kind: 'map', values: { kind: 'null' }, entryMin: 1 };
      seen.set(type, node);
      containers.push(node);
      node.values = compile((type as avro.types.MapType).valuesType as avro.Type, seen, containers);
      return node;
    }
    case 'record':
    case 'error': {
      const node: RecordNode = { kind: 'record', fields: [] };
      // Registered before its fields, so a recursive reference finds it.
      seen.set(type, node);
      for (const field of (type as avro.types.RecordType).fields) {
        node.fields.push({ name: field.name, node: compile(field.type, seen, containers) });
      }
      return node;
    }
    case 'union:unwrapped':
    case 'union:wrapped': {
      const node: UnionNode = { kind: 'union', branches: [] };
      seen.set(type, node);
      for (const branch of (type as avro.types.UnwrappedUnionType).types) {
        node.branches.push(compile(branch, seen, containers));
      }
      return node;
    }
    default:
      throw new Error(`the Avro body guard does not know type ${typeName}`);
  }
}

/**
 * Fewest bytes a value of `node` can take. A recursive reference counts as 0: a lower bound is all
 * the checks need (a smaller minimum only makes them more lenient, never unsafe).
 */
function minimumSize(node: Node, onStack: Set<Node>): number {
  switch (node.kind) {
    case 'null':
      return 0;
    case 'float':
      return 4;
    case 'double':
      return 8;
    case 'fixed':
      return node.size;
    case 'record': {
      if (onStack.has(node)) return 0;
      onStack.add(node);
      let sum = 0;
      for (const field of node.fields) sum += minimumSize(field.node, onStack);
      onStack.delete(node);
      return sum;
    }
    case 'union': {
      if (onStack.has(node)) return 1;
      onStack.add(node);
      const smallest = Math.min(...node.branches.map((b) => minimumSize(b, onStack)));
      onStack.delete(node);
      return 1 + (Number.isFinite(smallest) ? smallest : 0);
    }
    // boolean, int, long, enum: one byte; string, bytes: a length; array, map: the closing 0.
    default:
      return 1;
  }
}

export class AvroBodyGuard {
  private constructor(private readonly root: Node) {}

  /** Compiles the guard for one writer schema (once per schema version, at codec start). */
  static forType(type: avro.Type): AvroBodyGuard {
    const containers: Array<ArrayNode | MapNode> = [];
    const root = compile(type, new Map(), containers);
    for (const container of containers) {
      if (container.kind === 'array') container.itemMin = minimumSize(container.items, new Set());
      else container.entryMin = 1 + minimumSize(container.values, new Set());
    }
    return new AvroBodyGuard(root);
  }

  /**
   * Walks the body `bytes[start..]` and throws a DecodeError unless it is one complete value of the
   * schema within `limits`. `label` starts every error message (e.g. "OutreachRequested body").
   */
  check(bytes: Uint8Array, start: number, limits: DecodeLimits, label: string): void {
    new Walk(bytes, start, limits, label).body(this.root);
  }
}

/** One pass over one body. Offsets in messages are from the start of the whole message. */
class Walk {
  private pos: number;
  private readonly end: number;
  private items = 0;
  private depth = 0;
  /** Where in the value the walk is: field names and item indexes, for error messages. */
  private readonly path: Array<string | number> = [];

  constructor(
    private readonly bytes: Uint8Array,
    start: number,
    private readonly limits: DecodeLimits,
    private readonly label: string,
  ) {
    this.pos = start;
    this.end = bytes.length;
  }

  body(root: Node): void {
    this.value(root);
    if (this.pos !== this.end) {
      this.fail('INVALID_BODY', `${this.end - this.pos} bytes after the end of the value`, this.pos);
    }
  }

  private value(node: Node): void {
    switch (node.kind) {
      case 'null':
        return;
      case 'boolean':
        this.take(1, 'a boolean');
        return;
      case 'int':
        this.varint(5, 'an int');
        return;
      case 'long':
        this.varint(10, 'a long');
        return;
      case 'float':
        this.take(4, 'a float');
        return;
      case 'double':
        this.take(8, 'a double');
        return;
      case 'string':
        this.lengthPrefixed('a string');
        return;
      case 'bytes':
        this.lengthPrefixed('bytes');
        return;
      case 'fixed':
        this.take(node.size, `a fixed of ${node.size} bytes`);
        return;
      case 'enum':
        this.index(node.symbols, 'an enum index');
        return;
      case 'union':
        this.value(node.branches[this.index(node.branches.length, 'a union index')] as Node);
        return;
      case 'record':
        this.enter();
        for (const field of node.fields) {
          this.path.push(field.name);
          this.value(field.node);
          this.path.pop();
        }
        this.depth--;
        return;
      case 'array':
        this.blocks(node.items, node.itemMin, false);
        return;
      case 'map':
        this.blocks(node.values, node.entryMin, true);
        return;
    }
  }

  /** Array or map blocks: `count items…`, or `-count byteSize items…`, until a 0 count. */
  private blocks(item: Node, itemMin: number, isMap: boolean): void {
    this.enter();
    const noun = isMap ? 'map entries' : 'array items';
    let index = 0;
    for (;;) {
      const at = this.pos;
      let count = this.varint(10, 'a block count');
      if (count === 0) break;
      let size = -1;
      let room = this.end - this.pos;
      if (count < 0) {
        count = -count;
        const sizeAt = this.pos;
        size = this.varint(10, 'a block byte size');
        this.fits(size, 'a block byte size', sizeAt);
        room = size;
      }
      const itemsStart = this.pos;
      // Both checks come before a single item is walked, so a claim costs nothing to refuse.
      if (count * itemMin > room) {
        const detail = `a block of ${count} ${noun} needs at least ${count * itemMin} bytes, ${room} left`;
        // A sized block that fits the message but not its own items contradicts itself.
        if (size >= 0) this.fail('INVALID_LENGTH', `${detail} in the block`, at);
        this.overrun(count * itemMin, detail, at);
      }
      if (this.items + count > this.limits.maxItems) {
        this.fail(
          'LIMIT_EXCEEDED',
          `a block of ${count} ${noun} takes the message past ${this.limits.maxItems} items and entries`,
          at,
        );
      }
      this.items += count;
      for (let i = 0; i < count; i++) {
        this.path.push(index++);
        if (isMap) this.lengthPrefixed('a map key');
        this.value(item);
        this.path.pop();
      }
      if (size >= 0 && this.pos - itemsStart !== size) {
        this.fail('INVALID_BODY', `the block's byte size says ${size}, its items take ${this.pos - itemsStart}`, at);
      }
    }
    this.depth--;
  }

  private enter(): void {
    if (++this.depth > this.limits.maxDepth) {
      this.fail('LIMIT_EXCEEDED', `nested deeper than ${this.limits.maxDepth}`, this.pos);
    }
  }

  private lengthPrefixed(what: string): void {
    const at = this.pos;
    const length = this.varint(10, `the length of ${what}`);
    this.fits(length, `the length of ${what}`, at);
    this.pos += length;
  }

  /** A union or enum index within [0, size). */
  private index(size: number, what: string): number {
    const at = this.pos;
    const index = this.varint(5, what);
    if (index < 0 || index >= size) this.fail('INVALID_BODY', `${what} ${index} is not in [0, ${size})`, at);
    return index;
  }

  /** A length or byte size: not negative, and within the bytes left. */
  private fits(length: number, what: string, at: number): void {
    if (length < 0) this.fail('INVALID_LENGTH', `${what} is negative (${length})`, at);
    const left = this.end - this.pos;
    if (length > left) this.overrun(length, `${what} is ${length} bytes, ${left} left`, at);
  }

  private take(size: number, what: string): void {
    if (size > this.end - this.pos) this.fail('TRUNCATED', `the body ends inside ${what}`, this.pos);
    this.pos += size;
  }

  /**
   * A claim beyond the bytes left. If a message within the size limit could hold it, these bytes may
   * be a cut-short message; if none could, the claim itself is the problem.
   */
  private overrun(needed: number, detail: string, at: number): never {
    return this.fail(this.pos + needed <= this.limits.maxBytes ? 'TRUNCATED' : 'INVALID_LENGTH', detail, at);
  }

  /**
   * A zig-zag varint of at most `maxLength` bytes (5: 32 bits, 10: 64 bits). Beyond 2^53 the value
   * is approximate, which only matters for data longs, never for a length or count that must fit.
   */
  private varint(maxLength: 5 | 10, what: string): number {
    const bytes = this.bytes;
    const at = this.pos;
    let pos = at;
    let value = 0;
    let scale = 1;
    for (let i = 0; ; i++) {
      if (i === maxLength) this.fail('INVALID_BODY', `${what} is a varint longer than ${maxLength} bytes`, at);
      if (pos >= this.end) this.fail('TRUNCATED', `the body ends inside ${what}`, at);
      const byte = bytes[pos++] as number;
      // The last allowed byte may only carry the bits left of 32 (4) or 64 (1).
      if (i === maxLength - 1 && (byte & 0x7f) > (maxLength === 5 ? 0x0f : 0x01)) {
        this.fail('INVALID_BODY', `${what} does not fit in ${maxLength === 5 ? 32 : 64} bits`, at);
      }
      value += (byte & 0x7f) * scale;
      scale *= 128;
      if ((byte & 0x80) === 0) break;
    }
    this.pos = pos;
    return value % 2 === 1 ? -(value + 1) / 2 : value / 2;
  }

  private fail(code: DecodeErrorCode, detail: string, at: number): never {
    let where = '';
    for (const part of this.path) where += typeof part === 'number' ? `[${part}]` : where ? `.${part}` : part;
    throw new DecodeError(code, `${this.label}: ${where || '(root)'}: ${detail} (at byte ${at})`);
  }
}
