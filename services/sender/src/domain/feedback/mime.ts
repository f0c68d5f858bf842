/**
 * Just enough MIME (RFC 2045/2046, RFC 5322 header syntax) to find the parts of a delivery report,
 * written here rather than taken from a mail parser because a bounce mailbox receives hostile
 * mail: every loop is bounded by a limit given in, the work is linear in the input per nesting
 * level, nothing is decoded that is not asked for, and the code is synchronous and pure.
 *
 * The message is read as bytes (latin1: one character per byte, so 8-bit junk passes through and
 * nothing fails to decode) and split into lines on CRLF, LF or a lone CR alike. An entity is a
 * range of those lines: its header block, then, after the first empty line, its body.
 */
export interface MimeLimits {
  /** Multipart levels below the top (a report is usually at depth 0 or 1). */
  readonly maxDepth: number;
  /** Body parts in all. */
  readonly maxParts: number;
  /** Bytes of one header block (of the message, of a part, of a delivery-status field group). */
  readonly maxHeaderBytes: number;
  /** Fields of one header block. */
  readonly maxHeaderFields: number;
}

export interface HeaderField {
  /** Lower-cased. */
  readonly name: string;
  /** Unfolded and trimmed. */
  readonly value: string;
}

export interface Entity {
  readonly headers: readonly HeaderField[];
  readonly lines: readonly string[];
  readonly bodyStart: number;
  readonly bodyEnd: number;
}

export interface ContentType {
  /** `type/subtype`, lower-cased; `text/plain` when absent or unreadable (RFC 2045 §5.2). */
  readonly type: string;
  /** Parameter names lower-cased, values unquoted. */
  readonly params: ReadonlyMap<string, string>;
}

export class MimeError extends Error {
  override readonly name = 'MimeError';
}

export function toLines(raw: string | Uint8Array): string[] {
  const text =
    typeof raw === 'string' ? raw : Buffer.from(raw.buffer, raw.byteOffset, raw.byteLength).toString('latin1');
  return text.split(/\r\n|\n|\r/);
}

const FIELD_NAME = /^[\x21-\x39\x3b-\x7e]+$/;

/**
 * Reads a header block starting at `start` (up to `end`): folded lines joined, lines that are no
 * field (an mbox `From ` line) skipped. Returns the fields and the index after the empty line
 * that ends the block (or `end`). Throws MimeError past the limits.
 */
export function readHeaderBlock(
  lines: readonly string[],
  start: number,
  end: number,
  limits: MimeLimits,
): { fields: HeaderField[]; next: number } {
  const fields: Array<{ name: string; value: string }> = [];
  let bytes = 0;
  let i = start;
  for (; i < end; i++) {
    const line = lines[i] as string;
    if (line === '') {
      i++;
      break;
    }
    bytes += line.length + 2;
    if (bytes > limits.maxHeaderBytes) throw new MimeError(`header block larger than ${limits.maxHeaderBytes} bytes`);
    const last = fields.at(-1);
    if ((line[0] === ' ' || line[0] === '\t') && last) {
      last.value += line;
      continue;
    }
    const colon = line.indexOf(':');
    if (colon <= 0) continue;
    const name = line.slice(0, colon).trim();
    if (!FIELD_NAME.test(name)) continue;
    if (fields.length >= limits.maxHeaderFields)
      throw new MimeError(`header block with more than ${limits.maxHeaderFields} fields`);
    fields.push({ name: name.toLowerCase(), value: line.slice(colon + 1) });
  }
  return { fields: fields.map((f) => ({ name: f.name, value: f.value.replace(/\s+/g, ' ').trim() })), next: i };
}

export function readEntity(lines: readonly string[], start: number, end: number, limits: MimeLimits): Entity {
  const { fields, next } = readHeaderBlock(lines, start, end, limits);
  return { headers: fields, lines, bodyStart: next, bodyEnd: end };
}

/** The first field of that name (lower-case), if any. */
export function header(fields: readonly HeaderField[], name: string): string | undefined {
  return fields.find((f) => f.name === name)?.value;
}

const MEDIA_TYPE = /^[a-z0-9!#$&^_.+-]+\/[a-z0-9!#$&^_.+-]+$/;

export function contentType(entity: Entity): ContentType {
  const value = header(entity.headers, 'content-type');
  const params = new Map<string, string>();
  if (value === undefined) return { type: 'text/plain', params };
  const semicolon = value.indexOf(';');
  const type = (semicolon < 0 ? value : value.slice(0, semicolon)).trim().toLowerCase();
  // Parameters: name=token or name="quoted \" string"; at most 32 of them.
  const param = /;\s*([^=;\s]+)\s*=\s*(?:"((?:[^"\\]|\\.)*)"|([^;\s]*))/gy;
  let position = semicolon < 0 ? value.length : semicolon;
  for (let n = 0; n < 32 && position < value.length; n++) {
    param.lastIndex = position;
    const match = param.exec(value);
    if (!match) {
      // Skip a malformed parameter (`; junk`, a trailing comment) rather than stop at it.
      const next = value.indexOf(';', position + 1);
      if (next < 0) break;
      position = next;
      continue;
    }
    position = param.lastIndex;
    const name = (match[1] as string).toLowerCase();
    if (!params.has(name))
      params.set(name, match[2] !== undefined ? match[2].replace(/\\(.)/g, '$1') : (match[3] ?? ''));
  }
  return { type: MEDIA_TYPE.test(type) ? type : 'text/plain', params };
}

/** A running count of the parts read, shared by every level of one message. */
export interface PartBudget {
  parts: number;
}

/**
 * The body parts of a multipart entity. A closing delimiter that never comes ends the last part
 * at the end of the body (truncated reports are common); text before the first delimiter and
 * after the closing one is ignored (RFC 2046 §5.1.1).
 */
export function multipartParts(entity: Entity, type: ContentType, budget: PartBudget, limits: MimeLimits): Entity[] {
  const boundary = type.params.get('boundary');
  if (boundary === undefined || boundary.length === 0 || boundary.length > 200)
    throw new MimeError('multipart entity without a usable boundary');
  const delimiter = `--${boundary}`;
  const ranges: Array<[number, number]> = [];
  let partStart = -1;
  for (let i = entity.bodyStart; i < entity.bodyEnd; i++) {
    const line = entity.lines[i] as string;
    if (!line.startsWith(delimiter)) continue;
    const rest = line.slice(delimiter.length);
    const closing = rest.startsWith('--');
    // Transport padding may follow a delimiter; anything else makes it another boundary's line.
    if (!/^[ \t]*$/.test(closing ? rest.slice(2) : rest)) continue;
    if (partStart >= 0) ranges.push([partStart, i]);
    if (closing) {
      partStart = -1;
      break;
    }
    partStart = i + 1;
    if (++budget.parts > limits.maxParts) throw new MimeError(`more than ${limits.maxParts} MIME parts`);
  }
  if (partStart >= 0) ranges.push([partStart, entity.bodyEnd]);
  return ranges.map(([start, end]) => readEntity(entity.lines, start, end, limits));
}

/** The body's lines with its Content-Transfer-Encoding undone (base64, quoted-printable; else as is). */
export function decodedBodyLines(entity: Entity): string[] {
  const body = entity.lines.slice(entity.bodyStart, entity.bodyEnd);
  const encoding = header(entity.headers, 'content-transfer-encoding')?.toLowerCase();
  if (encoding === 'base64') {
    const text = body.join('').replace(/[^A-Za-z0-9+/]/g, '');
    return toLines(Buffer.from(text, 'base64').toString('latin1'));
  }
  if (encoding === 'quoted-printable') {
    const text = body
      .join('\n')
      .replace(/=\n/g, '')
      .replace(/=([0-9A-Fa-f]{2})/g, (_, hex: string) => String.fromCharCode(parseInt(hex, 16)));
    return toLines(text);
  }
  return body;
}
