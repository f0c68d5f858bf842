import { describe, expect, it } from 'vitest';
import { MASK, maskPersonal } from './mask.js';

describe('maskPersonal', () => {
  it('masks personal fields whole, at any depth, and keeps ids and codes', () => {
    const record = {
      requestId: 'r-1',
      campaignId: 'c-1',
      email: 'ada@example.com',
      contents: [{ subject: 'Hi Ada', body: 'Dear Ada' }],
      candidate: { name: 'Ada Lovelace', firstName: 'Ada', id: 'cand-1' },
      reason: 'schema_invalid',
    };
    expect(maskPersonal(record)).toEqual({
      requestId: 'r-1',
      campaignId: 'c-1',
      email: MASK,
      contents: MASK,
      candidate: { name: MASK, firstName: MASK, id: 'cand-1' },
      reason: 'schema_invalid',
    });
  });

  it('masks an address wherever it hides in a string, and leaves null fields as they are', () => {
    expect(maskPersonal({ detail: 'bounced: <ada@example.com> said no', to: null })).toEqual({
      detail: `bounced: <${MASK}> said no`,
      to: null,
    });
    expect(maskPersonal(['x ada@example.co.uk y'])).toEqual([`x ${MASK} y`]);
  });

  it('stops at a depth, so a hostile record cannot make it recurse without end', () => {
    let deep: unknown = 'ada@example.com';
    for (let i = 0; i < 100; i++) deep = { next: deep };
    expect(JSON.stringify(maskPersonal(deep))).toContain('[too deep]');
  });
});
