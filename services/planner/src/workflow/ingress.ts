/**
 * From OutreachRequested to SendRequested (now) or a scheduled step (later): validate, resolve the
 * sticky variant (batched per experiment), pick the content, and record it all in one transaction
 * with the planner's outbox.
 */
import {
  withTransaction,
  type ConsumedEvent,
  type EmailHashKey,
  type EventBatchHandler,
  type Logger,
  type OutreachRequested,
  type Rejection,
} from '@outreach/shared';
import type { Pool } from 'pg';
import type { ExperimentClient } from '../adapters/experiment-client.js';
import {
  plannedSend,
  type PlannerRepository,
  type PlannedSend,
  type StoredFollowUp,
} from '../adapters/planner-repository.js';
import { chooseContent, validateRequest, type PlannedRequest, type VariantDecision } from '../domain/request.js';

export interface Decided {
  readonly request: PlannedRequest;
  readonly head: PlannedSend;
  readonly followUps: readonly StoredFollowUp[];
}

/** Chooses the content of the head step and every follow-up for one decision; a reason when one lacks it. */
export function decide(
  request: PlannedRequest,
  decision: VariantDecision | null,
): { ok: true; decided: Decided } | { ok: false; reason: string } {
  const head = chooseContent(request.contents, decision);
  if (!head.ok) return { ok: false, reason: head.reason };
  const followUps: StoredFollowUp[] = [];
  for (const [i, followUp] of request.followUps.entries()) {
    const chosen = chooseContent(followUp.contents, decision);
    // Reasons name fields, never the caller's values: they go to logs and DLQ headers.
    if (!chosen.ok) return { ok: false, reason: `followUps[${i}]: ${chosen.reason}` };
    followUps.push({
      step: followUp.step,
      delayMs: followUp.delayMs,
      content: chosen.content,
      variant: chosen.variant,
    });
  }
  return {
    ok: true,
    decided: {
      request,
      head: plannedSend(request, request.step, request.sendId, head.content, head.variant),
      followUps,
    },
  };
}

export function ingressHandler(deps: {
  pool: Pool;
  repository: PlannerRepository;
  experiments: ExperimentClient;
  logger: Logger;
  hashKey: EmailHashKey;
}): EventBatchHandler {
  return async (events: readonly ConsumedEvent[]) => {
    const rejected: Rejection[] = [];
    const valid: Array<{ offset: string; request: PlannedRequest }> = [];
    for (const consumed of events) {
      if (consumed.event.type !== 'OutreachRequested') {
        rejected.push({
          offset: consumed.offset,
          reason: `unexpected event type ${consumed.event.type} on the requests topic`,
        });
        continue;
      }
      const validation = validateRequest(consumed.event as OutreachRequested, deps.hashKey);
      if (validation.ok) valid.push({ offset: consumed.offset, request: validation.request });
      else rejected.push({ offset: consumed.offset, reason: validation.reason });
    }

    // Sticky variants from the experiment service, one batch per experiment. If it cannot answer,
    // this throws a TransientError: the whole chunk waits and is retried, nothing is dropped.
    const decisions = new Map<string, VariantDecision | 'unknown_experiment'>();
    const byExperiment = new Map<string, Set<string>>();
    for (const { request } of valid) {
      if (request.experimentId)
        byExperiment.set(
          request.experimentId,
          (byExperiment.get(request.experimentId) ?? new Set()).add(request.candidateKey),
        );
    }
    for (const [experimentId, candidates] of byExperiment) {
      const answer = await deps.experiments.assign(experimentId, [...candidates]);
      for (const candidateKey of candidates) {
        decisions.set(
          `${experimentId}\u0000${candidateKey}`,
          answer.kind === 'unknown_experiment'
            ? 'unknown_experiment'
            : (answer.byCandidate.get(candidateKey) ?? { enrolled: false, reason: 'no answer' }),
        );
      }
    }

    const decided: Decided[] = [];
    for (const { offset, request } of valid) {
      const decision = request.experimentId
        ? decisions.get(`${request.experimentId}\u0000${request.candidateKey}`)
        : null;
      if (decision === 'unknown_experiment') {
        rejected.push({ offset, reason: 'unknown experiment: experimentId names no experiment' });
        continue;
      }
      const result = decide(request, decision ?? null);
      if (result.ok) decided.push(result.decided);
      else rejected.push({ offset, reason: `invalid OutreachRequested: ${result.reason}` });
    }

    await withTransaction(deps.pool, async (client) => {
      const now = ((await client.query<{ now: Date }>('SELECT now() AS now')).rows[0] as { now: Date }).now.getTime();
      const immediate: PlannedSend[] = [];
      for (const { request, head, followUps } of decided) {
        if (request.sendAt !== null && request.sendAt > now)
          await deps.repository.schedule(client, head, new Date(request.sendAt));
        else immediate.push(head);
        await deps.repository.startSequence(client, head, followUps);
      }
      await deps.repository.sendNow(client, immediate);
    });
    for (const rejection of rejected)
      deps.logger.warn({ offset: rejection.offset, reason: rejection.reason }, 'rejected outreach request');
    return { rejected };
  };
}
