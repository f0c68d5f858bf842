/**
 * Given/when/then for pure domain functions (docs/style.md, deciders):
 *
 *   given(history).when(command).then(expected)      for decide(history, command, now) → events
 *   given(events).thenState(expected)                for evolve(state, event) folded from an initial state
 */
import { expect } from 'vitest';

import type { Decider } from '@outreach/contracts';

export type { Decider };

export function deciderSpec<State, Command, Event>(decider: Decider<State, Command, Event>) {
  return (history: readonly Event[]) => {
    const state = history.reduce(decider.evolve, decider.initialState);
    return {
      state,
      when(command: Command) {
        let outcome: { events: readonly Event[] } | { error: unknown };
        try {
          outcome = { events: decider.decide(state, command) };
        } catch (error) {
          outcome = { error };
        }
        return {
          then(expected: readonly Event[]) {
            if ('error' in outcome) throw outcome.error;
            expect(outcome.events).toEqual(expected);
          },
          thenThrows(matcher: RegExp | string) {
            expect('error' in outcome ? outcome.error : undefined).toBeInstanceOf(Error);
            expect('error' in outcome ? (outcome.error as Error).message : '').toMatch(matcher);
          },
        };
      },
      thenState(expected: State) {
        expect(state).toEqual(expected);
      },
    };
  };
}
