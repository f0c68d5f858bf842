/**
 * Hostile input for the mask (attack round 4): what a dead letter or an event may carry that the
 * mask lets through or chokes on. Each `it.fails` documents a finding that is not fixed yet: it
 * passes while the bug is there and fails once it is fixed, so turn it into `it` with the fix.
 */
import { describe, expect, it } from 'vitest';
import { MASK, maskPersonal } from './mask.js';

describe('maskPersonal on hostile input', () => {
  // ADDRESS has unbounded runs on both sides of the at-sign: `a…a@b…b` without a dot backtracks over
  // the domain from every start position, O(n²). 2 × 20,000 characters took seconds here; a 1 MB
  // dead letter (an upstream producer's junk on an input topic, dead-lettered verbatim) blocks the
  // console's event loop for many minutes on every view of the DLQ page, health probes included.
  it.fails('masks a long run without a dotted domain in linear time', () => {
    const text = `${'a'.repeat(20_000)}@${'b'.repeat(20_000)}`;
    const started = performance.now();
    maskPersonal(text);
    expect(performance.now() - started).toBeLessThan(500);
  });

  // Keys are copied as they are: a map keyed by address (Avro maps, JSON objects) shows every key.
  it.fails('masks an address used as an object key', () => {
    const masked = JSON.stringify(maskPersonal({ byAddress: { 'victim.key@example.com': 'sent' } }));
    expect(masked).not.toContain('victim.key@example.com');
  });

  // The platform treats these spellings as addresses (AT_SIGN in @outreach/contracts, the logger's
  // last pass, candidateKeyFor), the console's mask only a plain `@`.
  it.fails.each(['victim.fw\uff20example.com', 'victim.small\ufe6bexample.com', 'victim.pct%40example.com'])(
    'masks the at-sign spelling in %s',
    (address) => {
      expect(maskPersonal(`note: ${address}`)).toBe(`note: ${MASK}`);
    },
  );

  // Names, subjects and bodies under field names the list does not spell.
  it.fails.each(['recipientName', 'senderName', 'givenName', 'surname', 'subjectLine', 'bodyText', 'snippet'])(
    'masks the value of %s',
    (field) => {
      expect(maskPersonal({ [field]: 'Ada Lovelace' })).toEqual({ [field]: MASK });
    },
  );
});
