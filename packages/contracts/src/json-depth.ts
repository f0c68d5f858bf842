/**
 * How deep a JSON text nests, found before anything parses it. `JSON.parse` has no depth limit: V8
 * parses 480,000 nested arrays (960 KB) without complaint, and what walks the result afterwards
 * (schema validation, `JSON.stringify`, a log serializer) recurses, overflows its stack or spends
 * the CPU a readiness probe needed. Neither fastify's parser nor secure-json-parse bounds depth, so
 * every JSON body the platform reads (the shared shell's `application/json` parser, the sender's
 * SNS and SendGrid webhooks, the SES notification inside an SNS message) is scanned here first.
 *
 * One pass, no allocation: brackets outside strings are counted, and a string's escapes are
 * skipped. It runs on bytes as well as on text: in UTF-8 every byte of a multi-byte character is
 * 0x80 or above, so `"`, `\`, `[`, `{`, `]` and `}` are only ever themselves.
 */

/** The deepest JSON any route of the platform takes; real bodies nest a handful of levels. */
export const MAX_JSON_DEPTH = 64;

const QUOTE = 0x22;
const BACKSLASH = 0x5c;
const OPEN_ARRAY = 0x5b;
const OPEN_OBJECT = 0x7b;
const CLOSE_ARRAY = 0x5d;
const CLOSE_OBJECT = 0x7d;

/**
 * The reason `json` nests deeper than `maxDepth` arrays and objects, or undefined when it does not.
 * Says nothing about whether the text is valid JSON: the parser that runs next decides that.
 */
export function jsonDepthProblem(json: string | Uint8Array, maxDepth: number = MAX_JSON_DEPTH): string | undefined {
  const at: (i: number) => number = typeof json === 'string' ? (i) => json.charCodeAt(i) : (i) => json[i] as number;
  const length = json.length;
  let depth = 0;
  let inString = false;
  for (let i = 0; i < length; i++) {
    const c = at(i);
    if (inString) {
      if (c === BACKSLASH) i++;
      else if (c === QUOTE) inString = false;
    } else if (c === QUOTE) {
      inString = true;
    } else if (c === OPEN_ARRAY || c === OPEN_OBJECT) {
      if (++depth > maxDepth) return `JSON nested deeper than ${maxDepth} levels (at offset ${i})`;
    } else if (c === CLOSE_ARRAY || c === CLOSE_OBJECT) {
      depth--;
    }
  }
  return undefined;
}
