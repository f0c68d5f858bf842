/**
 * Given/when/then for pure domain functions (STYLE.md habit 3):
 *
 *   given(history).when(command).then(expected)      for decide(history, command, now) → events
 *   given(events).thenState(expected)                for evolve(state, event) folded from an initial state
 */
import { expect } from 'vitest';

export interface Decider<State, Command, Event> {
  readonly initialState: State;
  readonly evolve: (state: State, event: Event) => State;
  readonly decide: (state: State, command: Command) => readonly Event[];
}

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
