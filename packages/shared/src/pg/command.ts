/**
 * The one seam that runs a decider against PostgreSQL. In one transaction:
 *   1. `load` reads the state of every aggregate the commands name, with a row lock (FOR UPDATE, or an
 *      INSERT … ON CONFLICT that takes one), in one statement for the whole batch;
 *   2. the decider decides each command against its aggregate's state, evolving the state as it goes,
 *      so two commands for one aggregate in one batch see each other;
 *   3. `apply` writes the events: the aggregates' rows and their outbox rows, set-based.
 *
 * Repositories provide `load` and `apply` and hold no business rule; the domain provides `decide`.
 * A batch is the unit of work (one round trip per step, never one per row): a single command is a
 * batch of one.
 */
import type { Pool, PoolClient } from 'pg';
import type { Decider } from '@outreach/contracts';
import { withTransaction } from './transaction.js';

export interface Decided<Command, State, Event> {
  readonly command: Command;
  /** The aggregate's state before this command (after any earlier command of the batch). */
  readonly before: State;
  readonly events: readonly Event[];
  /** The state after the events. */
  readonly after: State;
}

export interface AggregateStore<Key, State, Command, Event, Result> {
  /** The aggregate a command is about. */
  readonly keyOf: (command: Command) => Key;
  /** The aggregates' states, locked for the transaction; an aggregate not stored is absent. */
  readonly load: (client: PoolClient, keys: readonly Key[]) => Promise<ReadonlyMap<Key, State>>;
  /** Writes the events of the batch (the aggregates' rows and the outbox rows) and returns the result. */
  readonly apply: (client: PoolClient, decided: readonly Decided<Command, State, Event>[]) => Promise<Result>;
}

/** Decides `commands` in order against `states` (pure: the part of the seam a unit test runs). */
export function decideAll<Key, State, Command, Event>(
  decider: Decider<State, Command, Event>,
  keyOf: (command: Command) => Key,
  states: ReadonlyMap<Key, State>,
  commands: readonly Command[],
): Decided<Command, State, Event>[] {
  const current = new Map(states);
  return commands.map((command) => {
    const key = keyOf(command);
    const before = current.get(key) ?? decider.initialState;
    const events = decider.decide(before, command);
    const after = events.reduce(decider.evolve, before);
    current.set(key, after);
    return { command, before, events, after };
  });
}

/**
 * Runs `commands` through `decider` in one transaction on `pool` (or inside `client`'s transaction):
 * load with a lock, decide, apply.
 */
export async function runCommands<Key, State, Command, Event, Result>(
  on: Pool | PoolClient,
  decider: Decider<State, Command, Event>,
  store: AggregateStore<Key, State, Command, Event, Result>,
  commands: readonly Command[],
): Promise<Result> {
  const run = async (client: PoolClient) => {
    const keys = [...new Set(commands.map(store.keyOf))];
    const states = await store.load(client, keys);
    return store.apply(client, decideAll(decider, store.keyOf, states, commands));
  };
  return isPool(on) ? withTransaction(on, run) : run(on);
}

function isPool(on: Pool | PoolClient): on is Pool {
  return 'totalCount' in on;
}
