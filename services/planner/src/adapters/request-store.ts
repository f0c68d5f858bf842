/**
 * Loads and applies the request's decider (domain/plan.ts `requestDecider`) for the command seam
 * (`runCommands`): it reads and locks the steps the requests ask for (one statement for the batch),
 * and writes what was decided, set-based, in the caller's transaction: the plans (their events, steps,
 * sequences and planned sends), then the OutreachRejected of each refusal whose requestId can travel
 * and that the domain says is told (`refusalTold`, over the records read and locked here), then the
 * requests' records. No rule here: the domain decided; this stores it as it is.
 */
import type { AggregateStore, Decided } from '@outreach/shared';
import type { PoolClient } from 'pg';
import { requestKeyOf, type RequestCommand, type RequestEvent, type RequestState } from '../domain/plan.js';
import { outreachRejected } from '../domain/rejection.js';
import { foldDecisions, plannedSteps, refusalTold, type RequestDecision } from '../domain/request-status.js';
import type { StepRef } from '../domain/step.js';
import type { PlannerRepository } from './planner-repository.js';
import type { RequestsRepository } from './requests-repository.js';

export type RequestDecided = Decided<RequestCommand, RequestState, RequestEvent>;
export type RequestStore = AggregateStore<
  string,
  RequestState,
  RequestCommand,
  RequestEvent,
  readonly RequestDecided[]
>;

/**
 * The store for one batch of `commands`, at the database's `now` (the transaction's, read once by
 * the caller): `now` stamps the OutreachRejected it enqueues. Returns what was decided, per command.
 */
export function requestStore(
  deps: { readonly repository: PlannerRepository; readonly requests: RequestsRepository },
  now: number,
  commands: readonly RequestCommand[],
): RequestStore {
  const refs = new Map<string, StepRef>();
  for (const command of commands)
    if (command.type !== 'RefuseRequest') refs.set(requestKeyOf(command), command.request);
  return {
    keyOf: requestKeyOf,
    // The steps, locked until the transaction ends: the scheduler skips locked rows, so a step
    // cannot be emitted between this read and the writes below. A refusal reads nothing.
    load: (client: PoolClient, keys: readonly string[]) =>
      deps.repository.storedSteps(
        client,
        keys.flatMap((key) => refs.get(key) ?? []),
        { lock: true },
      ),
    apply: async (client, decided) => {
      await applyRequestEvents(
        deps,
        client,
        now,
        decided.flatMap(({ events }) => events),
      );
      return decided;
    },
  };
}

/** Writes a batch of the request's events in the caller's transaction (the order below is the watchers'). */
export async function applyRequestEvents(
  deps: { readonly repository: PlannerRepository; readonly requests: RequestsRepository },
  client: PoolClient,
  now: number,
  events: readonly RequestEvent[],
): Promise<void> {
  const { repository, requests } = deps;
  const planned = events.flatMap((event) => (event.type === 'RequestPlanned' ? [event] : []));
  const plans = planned.map(({ plan }) => plan);
  // The plan first: watchers learn which steps are coming before any of them is scheduled or sent.
  await repository.enqueue(
    client,
    plans.map((plan) => plan.planned),
  );
  await repository.schedule(
    client,
    plans.flatMap((plan) => plan.schedule ?? []),
  );
  await repository.startSequences(
    client,
    plans.flatMap((plan) => plan.sequence ?? []),
  );
  await repository.enqueue(
    client,
    plans.flatMap((plan) => plan.send ?? []),
  );
  // What each publisher can ask about its request (GET /v1/outreach-requests/:requestId), and
  // the OutreachRejected of each refusal whose requestId can travel.
  await requests.plannedSends(
    client,
    planned.map(({ request }) => ({
      requestId: request.requestId,
      campaignId: request.campaignId,
      candidateKey: request.candidateKey,
      headStep: request.step,
      steps: plannedSteps(request),
    })),
  );
  // A refusal is told only where it moves the request's record: never over another event's plan or
  // acceptance (a bad body reusing someone's requestId), nor over a plan made in this batch.
  const refusals = events.flatMap((event) => (event.type === 'RequestRejected' ? [event] : []));
  const stored = await requests.storedRecords(
    client,
    refusals.map(({ refused }) => refused.requestId),
  );
  const plannedIds = new Set(planned.map(({ request }) => request.requestId));
  const told = refusals.flatMap(({ refused, rejection }) => {
    const eventId = refused.eventId === '' ? null : refused.eventId;
    if (!refusalTold(stored.get(refused.requestId), eventId, plannedIds.has(refused.requestId))) return [];
    const rejected = outreachRejected(refused, rejection, now);
    return rejected ? [{ event: rejected, rejection, eventId }] : [];
  });
  await repository.enqueue(
    client,
    told.map(({ event }) => event),
  );
  const decisions: RequestDecision[] = [
    ...planned.map(({ request }) => ({
      requestId: request.requestId,
      eventId: request.requestEventId,
      to: 'planned' as const,
    })),
    ...told.map(({ event, rejection, eventId }) => ({
      requestId: event.requestId,
      eventId,
      to: 'rejected' as const,
      rejection,
    })),
  ];
  await requests.recordDecisions(client, foldDecisions(decisions));
}
