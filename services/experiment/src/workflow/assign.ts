/**
 * Assigning candidates, the one use case the HTTP routes (one candidate, or the planner's batch) and
 * the dry run share: in one transaction the repository loads the candidates' states (claiming the
 * exclusion group's memberships where the domain says so: the claim is the lock), the Assignment
 * decider decides, and the repository applies the events with their outbox rows. A batch takes the
 * same statements as one candidate.
 */
import { decideAll } from '@outreach/shared';
import type { PoolClient } from 'pg';
import type { Assignment, Experiment, ExperimentsRepository } from '../adapters/experiments-repository.js';
import { assignmentDecider, assignmentKeyOf, type AssignmentCommand } from '../domain/assignment.js';

/**
 * Each candidate's assignment, in the order asked, creating the missing ones (active experiments
 * only). `client` lets the dry run work inside a transaction it rolls back.
 */
export async function assignCandidates(
  repository: ExperimentsRepository,
  experiment: Experiment,
  candidateKeys: readonly string[],
  correlationId: string,
  client?: PoolClient,
): Promise<Assignment[]> {
  const keys = [...new Set(candidateKeys)];
  const run = async (c: PoolClient): Promise<Assignment[]> => {
    if (keys.length === 0) return [];
    const { at, states } = await repository.loadAssignments(c, experiment, keys);
    const commands = keys.map((candidateKey): AssignmentCommand => ({
      type: 'Assign',
      experiment,
      candidateKey,
      correlationId,
      at,
    }));
    return repository.applyAssignments(c, experiment, decideAll(assignmentDecider, assignmentKeyOf, states, commands));
  };
  const byKey = new Map((await (client ? run(client) : repository.transaction(run))).map((a) => [a.candidateKey, a]));
  return candidateKeys.map((key) => byKey.get(key) as Assignment);
}
