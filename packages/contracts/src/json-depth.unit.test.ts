import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { jsonDepthProblem, MAX_JSON_DEPTH } from './json-depth.js';

/** The nesting depth of a parsed value, the way the scan counts it (a scalar is 0). */
function depthOf(value: unknown): number {
  if (typeof value !== 'object' || value === null) return 0;
  const children = Array.isArray(value) ? value : Object.values(value);
  return 1 + Math.max(0, ...children.map(depthOf));
}

const nested = (levels: number, open = '[', close = ']') => `${open.repeat(levels)}${close.repeat(levels)}`;

describe('jsonDepthProblem', () => {
  it('agrees with the depth of the parsed value, on text and on UTF-8 bytes, for any JSON', () => {
    fc.assert(
      fc.property(fc.jsonValue({ maxDepth: 8 }), fc.integer({ min: 0, max: 9 }), (value, limit) => {
        const text = JSON.stringify(value);
        const expected = depthOf(value) > limit;
        expect(jsonDepthProblem(text, limit) !== undefined).toBe(expected);
        expect(jsonDepthProblem(Buffer.from(text, 'utf8'), limit) !== undefined).toBe(expected);
      }),
      { numRuns: 500 },
    );
  });

  it('takes exactly the limit and refuses one level more, arrays and objects alike, with the offset', () => {
    expect(jsonDepthProblem(nested(MAX_JSON_DEPTH))).toBeUndefined();
    expect(jsonDepthProblem(nested(MAX_JSON_DEPTH + 1))).toBe(
      `JSON nested deeper than ${MAX_JSON_DEPTH} levels (at offset ${MAX_JSON_DEPTH})`,
    );
    const objects = (levels: number) => `${'{"a":'.repeat(levels)}1${'}'.repeat(levels)}`;
    expect(jsonDepthProblem(objects(3), 3)).toBeUndefined();
    expect(jsonDepthProblem(objects(4), 3)).toMatch(/deeper than 3 levels/);
  });

  it('does not count brackets inside strings, whatever the escapes around them', () => {
    const cases = [
      JSON.stringify({ a: '[[[[[[[[' }),
      JSON.stringify({ a: '\\"[[[[[[[[' }),
      JSON.stringify({ a: '\\', b: '{{{{{{{{{' }),
      JSON.stringify(['"', '[[[[[[[[[', '\\\\"{{{{{{']),
      JSON.stringify({ 'key [[[[[[': 'é€😀[[[[[[[[' }),
    ];
    for (const text of cases) {
      expect(jsonDepthProblem(text, 2), text).toBeUndefined();
      expect(jsonDepthProblem(Buffer.from(text), 2), text).toBeUndefined();
    }
    // A quote escaped inside a string does not end it; the brackets after it are still inside.
    expect(jsonDepthProblem('["\\"[[[[[[[["]', 2)).toBeUndefined();
    // An escaped backslash does end it: the brackets after its closing quote count.
    expect(jsonDepthProblem('["\\\\", [[[[[[]]]]]]]', 2)).toMatch(/deeper than 2/);
  });

  it("finds the attacker's 480,000 levels (960 KB) at the limit's offset, fast, without parsing", () => {
    const bomb = nested(480_000);
    const started = performance.now();
    expect(jsonDepthProblem(bomb)).toBe(
      `JSON nested deeper than ${MAX_JSON_DEPTH} levels (at offset ${MAX_JSON_DEPTH})`,
    );
    expect(jsonDepthProblem(Buffer.from(bomb))).toMatch(/deeper than/);
    expect(performance.now() - started).toBeLessThan(100);
    // Deep nesting after a long innocent prefix is found too: the outer array is level 1, so the
    // inner arrays' 64th opening bracket (400,001 + 63) is the one past the limit.
    const late = `[${'"x",'.repeat(100_000)}${nested(MAX_JSON_DEPTH)}]`;
    expect(jsonDepthProblem(late)).toMatch(/at offset 400064\)$/);
  });

  it('says nothing about invalid JSON it can count (the parser refuses that next)', () => {
    expect(jsonDepthProblem(']]]]')).toBeUndefined();
    expect(jsonDepthProblem('"unterminated [[[[[[[[', 1)).toBeUndefined();
    expect(jsonDepthProblem('')).toBeUndefined();
  });
});
