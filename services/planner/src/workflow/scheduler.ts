/**
 * The scheduler: due steps (database clock) become SendRequested, each exactly once however many
 * planners run. The repository takes the due rows and marks them emitted; the step's rules
 * (domain/step.ts) give each its event, in the same transaction.
 */
import { withTransaction } from '@outreach/shared';
import type { Pool } from 'pg';
import type { PlannerRepository } from '../adapters/planner-repository.js';
import { stepDecider } from '../domain/step.js';

/** Emits up to `limit` due steps; returns how many (a full batch means more may be due). */
export async function emitDue(deps: { pool: Pool; repository: PlannerRepository }, limit: number): Promise<number> {
  return withTransaction(deps.pool, async (client) => {
    const now = await deps.repository.now(client);
    const due = await deps.repository.takeDue(client, limit);
    await deps.repository.enqueue(
      client,
      due.flatMap(({ send, dueAt }) =>
        stepDecider.decide({ status: 'scheduled', dueAt }, { type: 'EmitStep', send, now }),
      ),
    );
    return due.length;
  });
}
