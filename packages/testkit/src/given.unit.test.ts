import { describe, it } from 'vitest';
import { deciderSpec } from './given.js';

// A tiny decider, to show and check the helper: a counter that refuses to go past a limit.
type Event = { type: 'Incremented'; by: number };
type Command = { type: 'Increment'; by: number };
const counter = deciderSpec<number, Command, Event>({
  initialState: 0,
  evolve: (state, event) => state + event.by,
  decide: (state, command) => {
    if (state + command.by > 10) throw new Error('limit exceeded');
    return [{ type: 'Incremented', by: command.by }];
  },
});

describe('deciderSpec', () => {
  it('given past events, when a command, then new events', () => {
    counter([{ type: 'Incremented', by: 4 }])
      .when({ type: 'Increment', by: 2 })
      .then([{ type: 'Incremented', by: 2 }]);
  });
  it('then a rejection', () => {
    counter([{ type: 'Incremented', by: 9 }])
      .when({ type: 'Increment', by: 2 })
      .thenThrows(/limit exceeded/);
  });
  it('then a state', () => {
    counter([
      { type: 'Incremented', by: 1 },
      { type: 'Incremented', by: 2 },
    ]).thenState(3);
  });
});
