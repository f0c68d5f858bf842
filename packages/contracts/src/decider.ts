/**
 * An aggregate's rules, as pure functions (docs/style.md, "deciders"): `decide` turns a command and the
 * current state into events (or none), `evolve` folds one event into the state. Every service's
 * `domain/` holds one per aggregate; the HTTP routes and the Kafka consumers run the same one through
 * the command seam (`runCommands`, platform), so a rule lives in exactly one place.
 */
export interface Decider<State, Command, Event> {
  readonly initialState: State;
  readonly decide: (state: State, command: Command) => readonly Event[];
  readonly evolve: (state: State, event: Event) => State;
}

/** The state after `events`, folded from the decider's initial state. */
export function fold<State, Command, Event>(
  decider: Decider<State, Command, Event>,
  events: readonly Event[],
  from: State = decider.initialState,
): State {
  return events.reduce(decider.evolve, from);
}
