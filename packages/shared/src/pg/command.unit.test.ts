import { describe, expect, it } from 'vitest';
import type { Decider } from '@outreach/contracts';
import { decideAll } from './command.js';

interface Add {
  readonly account: string;
  readonly amount: number;
}
type Added = { readonly type: 'Added'; readonly amount: number } | { readonly type: 'Refused'; readonly why: string };

/** A balance that never goes below zero. */
const balance: Decider<number, Add, Added> = {
  initialState: 0,
  decide: (state, { amount }) =>
    state + amount < 0 ? [{ type: 'Refused', why: 'overdrawn' }] : [{ type: 'Added', amount }],
  evolve: (state, event) => (event.type === 'Added' ? state + event.amount : state),
};

describe('decideAll (the command seam, without the database)', () => {
  it('decides each command against its own aggregate, absent ones from the initial state', () => {
    const decided = decideAll(balance, (c) => c.account, new Map([['a', 10]]), [
      { account: 'a', amount: -5 },
      { account: 'b', amount: -1 },
    ]);
    expect(decided.map((d) => [d.before, d.events, d.after])).toEqual([
      [10, [{ type: 'Added', amount: -5 }], 5],
      [0, [{ type: 'Refused', why: 'overdrawn' }], 0],
    ]);
  });

  it('lets a later command of one batch see what an earlier one did to the same aggregate', () => {
    const decided = decideAll(balance, (c) => c.account, new Map([['a', 10]]), [
      { account: 'a', amount: -8 },
      { account: 'a', amount: -8 },
    ]);
    expect(decided.map((d) => d.events[0]?.type)).toEqual(['Added', 'Refused']);
    expect(decided[1]?.before).toBe(2);
  });

  it('leaves the loaded states untouched', () => {
    const states = new Map([['a', 10]]);
    decideAll(balance, (c) => c.account, states, [{ account: 'a', amount: 1 }]);
    expect(states.get('a')).toBe(10);
  });
});
