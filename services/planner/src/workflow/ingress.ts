/**
 * From OutreachRequested to SendRequested (now) or a scheduled step (later): validate, resolve the
 * sticky variant (batched per experiment), then, in one transaction with the planner's outbox and on
 * its database clock, read (and lock) the steps asked for, decide each request (domain/step.ts
 * `arrivalOf`, domain/plan.ts `planRequest`) and store what was decided. A request for a step already
 * emitted or cancelled plans nothing: a repeat of the same request quietly, any other is reported.
 * Every refusal is told to its publisher in the same transaction: an OutreachRejected (keyed by
 * requestId, domain/rejection.ts) and the request's record (domain/request-status.ts); invalid
 * requests also go to the DLQ, as before. A record that cannot be decoded has no requestId to
 * answer: the consumer runner dead-letters it and nothing else is said.
 */
import {
  canonicalCorrelationId,
  isTransientError,
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
import { stepRefKey, type PlannerRepository } from '../adapters/planner-repository.js';
import type { RequestsRepository } from '../adapters/requests-repository.js';
import { planRequest, type Plan } from '../domain/plan.js';
import {
  addressable,
  contentMissing,
  experimentRefused,
  invalidRequest,
  outreachRejected,
  requestUnprocessable,
  stepTaken,
  unknownExperiment,
  type RefusedRequest,
  type RequestRejection,
} from '../domain/rejection.js';
import { foldDecisions, plannedSteps, type RequestDecision } from '../domain/request-status.js';
import { UNKNOWN_EXPERIMENT, validateRequest, type PlannedRequest, type VariantDecision } from '../domain/request.js';
import { arrivalOf, unstoredStep } from '../domain/step.js';
import { refuse as refuseAlone } from './requests.js';
import type { Rerequest, Rerequests } from './rerequests.js';

interface IngressDeps {
  pool: Pool;
  repository: PlannerRepository;
  requests: RequestsRepository;
  experiments: ExperimentClient;
  logger: Logger;
  hashKey: EmailHashKey;
  rerequests: Rerequests;
}

/**
 * The handler, with a safety net: when it fails for good on one request alone (the consumer runner
 * has narrowed a failing chunk to it, and is about to dead-letter it as REJECTED), its publisher is
 * told as for any refusal (an OutreachRejected with a generic detail, the request's record), and the
 * record is dead-lettered as before. A transient failure is left to the runner's retries, and one
 * whose requestId cannot travel (or whose telling fails too) is only dead-lettered.
 */
export function ingressHandler(deps: IngressDeps): EventBatchHandler {
  const handle = planRequests(deps);
  return async (events, context) => {
    try {
      return await handle(events, context);
    } catch (error) {
      const [only] = events;
      if (events.length !== 1 || !only || isTransientError(error) || only.event.type !== 'OutreachRequested')
        throw error;
      const event = only.event as OutreachRequested;
      if (!addressable(event.requestId)) throw error;
      const correlationId = canonicalCorrelationId(event.correlationId, event.eventId);
      try {
        await refuseAlone(
          deps,
          { requestId: event.requestId, eventId: event.eventId, correlationId },
          requestUnprocessable,
        );
      } catch (telling) {
        deps.logger.warn({ err: telling, offset: only.offset }, 'a failed request could not be told to its publisher');
        throw error;
      }
      const message = error instanceof Error ? error.message : String(error);
      deps.logger.error({ err: error, offset: only.offset }, 'request failed; told its publisher, dead-lettering it');
      return { rejected: [{ offset: only.offset, reason: `handler failed: ${message}` }] };
    }
  };
}

function planRequests(deps: IngressDeps): EventBatchHandler {
  return async (events: readonly ConsumedEvent[]) => {
    const rejected: Rejection[] = [];
    // Each refusal, to tell its publisher: the request's ids (never its contents) and why.
    const refusals: Array<{ request: RefusedRequest; rejection: RequestRejection }> = [];
    const refuse = (request: RefusedRequest, rejection: RequestRejection) => refusals.push({ request, rejection });
    const refusedPlan = (request: PlannedRequest): RefusedRequest => ({
      requestId: request.requestId,
      eventId: request.requestEventId,
      correlationId: request.correlationId,
    });
    const valid: Array<{ offset: string; request: PlannedRequest }> = [];
    for (const consumed of events) {
      if (consumed.event.type !== 'OutreachRequested') {
        rejected.push({
          offset: consumed.offset,
          reason: `unexpected event type ${consumed.event.type} on the requests topic`,
        });
        continue;
      }
      const event = consumed.event as OutreachRequested;
      const validation = validateRequest(event, deps.hashKey);
      if (validation.ok) valid.push({ offset: consumed.offset, request: validation.request });
      else {
        rejected.push({ offset: consumed.offset, reason: validation.reason });
        refuse(
          {
            requestId: event.requestId,
            eventId: event.eventId,
            correlationId: canonicalCorrelationId(event.correlationId, event.eventId),
          },
          invalidRequest(validation.fields),
        );
      }
    }

    // Sticky variants from the experiment service, one batch per experiment. If it cannot answer,
    // this throws a TransientError: the whole chunk waits and is retried, nothing is dropped.
    const decisions = new Map<string, VariantDecision | 'unknown_experiment' | 'refused'>();
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
      // A 400 names no culprit: with several candidates, fail the chunk so the runner retries its
      // requests one by one, and each alone gets its own answer (a batch too large passes that way too).
      if (answer.kind === 'refused' && candidates.size > 1)
        throw new Error(`the experiment service refused a batch of ${candidates.size} candidates (400)`);
      for (const candidateKey of candidates) {
        decisions.set(
          `${experimentId}\u0000${candidateKey}`,
          answer.kind === 'decisions'
            ? (answer.byCandidate.get(candidateKey) ?? { enrolled: false, reason: 'no answer' })
            : answer.kind,
        );
      }
    }

    const rerequests: Rerequest[] = [];
    await withTransaction(deps.pool, async (client) => {
      const now = await deps.repository.now(client);
      const stored = await deps.repository.storedSteps(
        client,
        valid.map(({ request }) => request),
        { lock: true },
      );
      const plans: Plan[] = [];
      const planned: PlannedRequest[] = [];
      for (const { offset, request } of valid) {
        const arrival = arrivalOf(stored.get(stepRefKey(request)) ?? unstoredStep, request.requestId);
        if (arrival.kind !== 'open') {
          if (arrival.kind === 'rerequested') {
            const { campaignId, step, requestId } = request;
            rerequests.push({ state: arrival.state, ingress: 'kafka', campaignId, step, requestId });
            refuse(refusedPlan(request), stepTaken(arrival.state, request.sendId));
          }
          continue;
        }
        const decision = request.experimentId
          ? decisions.get(`${request.experimentId}\u0000${request.candidateKey}`)
          : null;
        if (decision === 'unknown_experiment') {
          rejected.push({ offset, reason: UNKNOWN_EXPERIMENT });
          refuse(refusedPlan(request), unknownExperiment);
          continue;
        }
        if (decision === 'refused') {
          rejected.push({ offset, reason: 'the experiment service refused the experimentId or candidateId (400)' });
          refuse(refusedPlan(request), experimentRefused);
          continue;
        }
        const result = planRequest(request, decision ?? null, now);
        if (result.ok) {
          plans.push(result.plan);
          planned.push(request);
        } else {
          rejected.push({ offset, reason: `invalid OutreachRequested: ${result.reason}` });
          refuse(refusedPlan(request), contentMissing(result.code, result.at));
        }
      }
      // The plan first: watchers learn which steps are coming before any of them is scheduled or sent.
      await deps.repository.enqueue(
        client,
        plans.map((plan) => plan.planned),
      );
      await deps.repository.schedule(
        client,
        plans.flatMap((plan) => plan.schedule ?? []),
      );
      await deps.repository.startSequences(
        client,
        plans.flatMap((plan) => plan.sequence ?? []),
      );
      await deps.repository.enqueue(
        client,
        plans.flatMap((plan) => plan.send ?? []),
      );
      // What each publisher can ask about its request (GET /v1/outreach-requests/:requestId), and
      // the OutreachRejected of each refusal whose requestId can travel.
      await deps.requests.plannedSends(
        client,
        planned.map((request) => ({
          requestId: request.requestId,
          campaignId: request.campaignId,
          candidateKey: request.candidateKey,
          headStep: request.step,
          steps: plannedSteps(request),
        })),
      );
      const told = refusals.flatMap(({ request, rejection }) => {
        const event = outreachRejected(request, rejection, now);
        return event ? [{ event, rejection }] : [];
      });
      await deps.repository.enqueue(
        client,
        told.map(({ event }) => event),
      );
      const verdicts: RequestDecision[] = [
        ...planned.map((request) => ({ requestId: request.requestId, to: 'planned' as const })),
        ...told.map(({ event, rejection }) => ({ requestId: event.requestId, to: 'rejected' as const, rejection })),
      ];
      await deps.requests.recordDecisions(client, foldDecisions(verdicts));
    });
    // After the commit: a retried chunk reports once, the time it went through.
    deps.rerequests.report(rerequests);
    for (const rejection of rejected)
      deps.logger.warn({ offset: rejection.offset, reason: rejection.reason }, 'rejected outreach request');
    return { rejected };
  };
}
