/**
 * Hostile input for the mask (attack round 4): what a dead letter or an event may carry that the
 * mask let through or choked on, each fixed (they were `it` until then).
 */
import { describe, expect, it } from 'vitest';
import { MASK, MAX_TEXT, maskPersonal, maskText } from './mask.js';

describe('maskPersonal on hostile input', () => {
  // ADDRESS had unbounded runs on both sides of the at-sign: `a…a@b…b` without a dot backtracks over
  // the domain from every start position, O(n²). 2 × 20,000 characters took seconds here; a 1 MB
  // dead letter (an upstream producer's junk on an input topic, dead-lettered verbatim) blocks the
  // console's event loop for many minutes on every view of the DLQ page, health probes included.
  it('masks a long run without a dotted domain in bounded time', () => {
    const text = `${'a'.repeat(20_000)}@${'b'.repeat(20_000)}`;
    const started = performance.now();
    maskPersonal(text);
    expect(performance.now() - started).toBeLessThan(500);
  });

  // Keys are copied as they are: a map keyed by address (Avro maps, JSON objects) shows every key.
  it('masks an address used as an object key', () => {
    const masked = JSON.stringify(maskPersonal({ byAddress: { 'victim.key@example.com': 'sent' } }));
    expect(masked).not.toContain('victim.key@example.com');
  });

  // The platform treats these spellings as addresses (AT_SIGN in @outreach/contracts, the logger's
  // last pass, candidateKeyFor), the console's mask only a plain `@`.
  it.each(['victim.fw\uff20example.com', 'victim.small\ufe6bexample.com', 'victim.pct%40example.com'])(
    'masks the at-sign spelling in %s',
    (address) => {
      expect(maskPersonal(`note: ${address}`)).toBe(`note: ${MASK}`);
    },
  );

  // Names, subjects and bodies under field names the list does not spell.
  it.each(['recipientName', 'senderName', 'givenName', 'surname', 'subjectLine', 'bodyText', 'snippet'])(
    'masks the value of %s',
    (field) => {
      expect(maskPersonal({ [field]: 'Ada Lovelace' })).toEqual({ [field]: MASK });
    },
  );

  // The bound is a guard against quadratic blowup, not a benchmark: a megabyte of each hostile shape
  // (cut to MAX_TEXT first), and the uncut mask on n and 4n characters growing about linearly.
  it.each([
    ['a run, an at-sign, a run', `${'a'.repeat(500_000)}@${'b'.repeat(500_000)}`],
    ['at-signs', 'a@'.repeat(500_000)],
    ['a dotted domain without a last label', `a@${'1.'.repeat(500_000)}`],
    ['full-width at-signs', 'a\uff20b.'.repeat(250_000)],
  ])('masks a megabyte of %s quickly', (_shape, text) => {
    const started = performance.now();
    expect(maskText(text).length).toBeLessThanOrEqual(MAX_TEXT + 1);
    expect(performance.now() - started).toBeLessThan(500);
  });

  it('masks in about linear time without the cut', () => {
    const time = (n: number) => {
      const text = `${'a'.repeat(n)}@${'b'.repeat(n)}`;
      const started = performance.now();
      for (let i = 0; i < 5; i++) maskText(text, Number.MAX_SAFE_INTEGER);
      return performance.now() - started;
    };
    time(10_000); // warm up
    const small = time(50_000);
    const large = time(200_000);
    // Linear: about 4 times; quadratic would be 16.
    expect(large).toBeLessThan(Math.max(small, 5) * 10);
  });

  it('masks an address across the cut whole, and cuts after masking', () => {
    const text = `${'x'.repeat(MAX_TEXT - 10)} victim.cut@example.com and more`;
    const shown = maskText(text);
    expect(shown).not.toContain('victim');
    expect(shown.endsWith('…')).toBe(true);
    expect(shown.length).toBe(MAX_TEXT + 1);
  });

  it('keeps apart keys that mask alike', () => {
    expect(maskPersonal({ 'a.one@example.com': 1, 'a.two@example.com': 2, id: 'x' })).toEqual({
      [MASK]: 1,
      [`${MASK} (2)`]: 2,
      id: 'x',
    });
  });

  it('leaves ids, codes and reasons readable', () => {
    const record = { campaignId: 'c-1', context: 'retry', reason: 'schema_invalid', emailHash: 'ab12' };
    expect(maskPersonal(record)).toEqual(record);
  });
});
