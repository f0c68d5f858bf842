import type { Experiment, ExperimentsRepository } from '../adapters/experiments-repository.js';
import type { Variant } from '../domain/assignment.js';
import { assignCandidates } from './assign.js';

export interface DryRunResult {
  readonly experimentId: string;
  readonly n: number;
  readonly stable: number;
  readonly flipped: number;
  readonly notEnrolled: number;
  readonly firstPass: Readonly<Record<string, number>>;
}

/**
 * The seed's dry test, through the real assignment path: assign n synthetic ids, change the weights,
 * assign them again, count flips (must be 0). It all happens in a transaction that is rolled back,
 * so no real assignment, membership or event survives it.
 */
export async function dryRun(
  repository: ExperimentsRepository,
  experiment: Experiment,
  n: number,
): Promise<DryRunResult> {
  return repository.scratch(async (client) => {
    const active: Experiment = { ...experiment, status: 'active' };
    const ids = Array.from({ length: n }, (_, i) => `__dry-run__:${experiment.experimentId}:${i}`);
    const first = await assignCandidates(repository, active, ids, 'dry-run', client);
    // Weights move between the passes, as they may in a live test: assigned candidates must not.
    const rotated: Variant[] = active.variants.map((v, i, all) => ({
      name: v.name,
      weight: (all[(i + 1) % all.length] as Variant).weight + 1,
    }));
    await repository.update(experiment.experimentId, { variants: rotated }, client);
    const changed = (await repository.find(experiment.experimentId, client)) as Experiment;
    const second = await assignCandidates(repository, { ...changed, status: 'active' }, ids, 'dry-run', client);
    let stable = 0;
    let flipped = 0;
    let notEnrolled = 0;
    const firstPass: Record<string, number> = {};
    first.forEach((a, i) => {
      const b = second[i];
      if (!a.enrolled || !b?.enrolled) {
        notEnrolled++;
        return;
      }
      firstPass[a.variant] = (firstPass[a.variant] ?? 0) + 1;
      if (a.variant === b.variant) stable++;
      else flipped++;
    });
    return { experimentId: experiment.experimentId, n, stable, flipped, notEnrolled, firstPass };
  });
}
