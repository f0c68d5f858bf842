/**
 * The planner's one decision about outreach requests, whichever way they came: the HTTP ingress
 * (POST /v1/outreach-requests) and the consumer of `outreach.requested.v1` both call
 * `takeOutreachRequests`, and the rules run in their one order in the request's decider
 * (domain/plan.ts `requestDecider`): validate, then the step the request asks for, then the
 * experiment, then the content.
 *
 * What differs is what each ingress can know and do, not the rules:
 * - over HTTP the request is taken or refused before it is published: the step is read as it is now
 *   (no lock), the experiment's variants are checked (a service that does not answer lets the request
 *   through unchecked, the consumer waits for it), and a request taken goes to the topic and is
 *   recorded `accepted`;
 * - the consumer plans: the sticky variants are asked first, one batch per experiment, then, in one
 *   transaction with the planner's outbox and on its database clock (read once, there), the steps are
 *   read and locked, each request decided and what was decided stored (`runCommands`,
 *   adapters/request-store.ts). A batch is set-based: one round trip per step for all its requests.
 *
 * Every refusal whose requestId can travel is told to its publisher (an OutreachRejected, the
 * request's record) in one transaction on the database clock; a re-request of a step already
 * emitted or cancelled is counted and logged (workflow/rerequests.ts).
 */
import { decideAll, lockAgainstErasure, runCommands, TransientError, withTransaction } from '@outreach/shared';
import { canonicalCorrelationId, type EmailHashKey, type OutreachRequested } from '@outreach/contracts';
import type { Pool, PoolClient } from 'pg';
import type { ExperimentClient } from '../adapters/experiment-client.js';
import type { PlannerRepository } from '../adapters/planner-repository.js';
import { applyRequestEvents, requestStore, type RequestDecided } from '../adapters/request-store.js';
import type { RequestsRepository } from '../adapters/requests-repository.js';
import type { ArrivingRequest } from '../adapters/subjects-repository.js';
import {
  asksExperiment,
  requestDecider,
  requestKeyOf,
  type ExperimentAnswer,
  type RequestCommand,
} from '../domain/plan.js';
import {
  erasedSubjectRequest,
  invalidRequest,
  type RefusedRequest,
  type RequestRejection,
} from '../domain/rejection.js';
import { validateRequest, type PlannedRequest } from '../domain/request.js';
import { stepRefKey } from '../domain/step.js';
import type { Rerequest, Rerequests } from './rerequests.js';

export interface OutreachRequestsDeps {
  readonly pool: Pool;
  readonly repository: PlannerRepository;
  readonly requests: RequestsRepository;
  readonly experiments: ExperimentClient;
  readonly hashKey: EmailHashKey;
  readonly rerequests: Rerequests;
  /**
   * Which of a batch read from the topic were made before an erasure of their person (ADR 014; one
   * keyed lookup per batch, adapters/subjects-repository.ts `erasedBefore`); absent without a
   * suppression key. Those are refused before anything is asked or stored about them.
   */
  readonly erasedBefore?: (
    requests: ReadonlyArray<ArrivingRequest>,
    client?: PoolClient,
  ) => Promise<ReadonlySet<number>>;
}

/**
 * Where the requests came from. `http`: one request taken from a caller, published with `publish`
 * once the rules let it through. `kafka`: a batch read from the requests topic, planned.
 */
export type Ingress =
  { readonly via: 'http'; readonly publish: (event: OutreachRequested) => Promise<void> } | { readonly via: 'kafka' };

/** What became of one request, for its ingress to answer (HTTP) or report (the consumer). */
export type RequestVerdict =
  | { readonly kind: 'accepted'; readonly request: PlannedRequest; readonly experimentChecked: boolean }
  | { readonly kind: 'planned'; readonly request: PlannedRequest }
  /** The same request again for a step already emitted or cancelled: nothing to do, nothing to say. */
  | { readonly kind: 'repeated' }
  | {
      readonly kind: 'rejected';
      readonly rejection: RequestRejection;
      /** In the platform's words and the request's field names: for logs, the DLQ and the HTTP answer. */
      readonly reason: string;
      readonly rerequested: 'emitted' | 'cancelled' | null;
      /** Refused by the request rules alone (validation), before anything was read or asked. */
      readonly invalid: boolean;
    };

/** Decides and carries out `events` (each an OutreachRequested); returns each one's verdict, in order. */
export async function takeOutreachRequests(
  deps: OutreachRequestsDeps,
  ingress: Ingress,
  events: readonly OutreachRequested[],
): Promise<RequestVerdict[]> {
  const validations = events.map((event) => validateRequest(event, deps.hashKey));
  // To whom a refusal is addressed: over HTTP the request was never published, so nothing caused it.
  const refusedOf = (event: OutreachRequested, request?: PlannedRequest): RefusedRequest =>
    ingress.via === 'http'
      ? { requestId: event.requestId, eventId: '', correlationId: String(event.correlationId) }
      : request
        ? { requestId: request.requestId, eventId: request.requestEventId, correlationId: request.correlationId }
        : {
            requestId: event.requestId,
            eventId: event.eventId,
            correlationId: canonicalCorrelationId(event.correlationId, event.eventId),
          };
  // The refusals of requests that break the rules come first, then the others in their order.
  const refusals: Array<{ index: number; command: RequestCommand }> = [];
  const valid: Array<{ index: number; event: OutreachRequested; request: PlannedRequest }> = [];
  validations.forEach((validation, index) => {
    const event = events[index] as OutreachRequested;
    if (validation.ok) valid.push({ index, event, request: validation.request });
    else
      refusals.push({
        index,
        command: {
          type: 'RefuseRequest',
          refused: refusedOf(event),
          rejection: invalidRequest(validation.fields),
          reason: validation.reason,
        },
      });
  });

  const verdicts: RequestVerdict[] = new Array<RequestVerdict>(events.length);
  const decidedAt = (order: readonly number[], decided: readonly RequestDecided[]) =>
    decided.forEach((one, i) => {
      verdicts[order[i] as number] = verdictOf(one);
    });

  if (ingress.via === 'http') {
    const stored = await deps.repository.currentSteps(valid.map(({ request }) => request));
    const commands = [...refusals];
    for (const { index, event, request } of valid) {
      const state = stored.get(stepRefKey(request)) ?? requestDecider.initialState;
      const experiment = asksExperiment(state, request) ? await variantsOf(deps.experiments, request) : NOT_ASKED;
      commands.push({ index, command: { type: 'AcceptRequest', request, refused: refusedOf(event), experiment } });
    }
    const decided = decideAll(
      requestDecider,
      requestKeyOf,
      stored,
      commands.map(({ command }) => command),
    );
    decidedAt(
      commands.map(({ index }) => index),
      decided,
    );
    deps.rerequests.report(rerequestsOf(decided, 'http'));
    const rejected = decided.flatMap(({ events: decidedEvents }) =>
      decidedEvents.filter((event) => event.type === 'RequestRejected'),
    );
    if (rejected.length > 0)
      await withTransaction(deps.pool, async (client) =>
        applyRequestEvents(deps, client, await deps.repository.now(client), rejected),
      );
    for (const { index } of commands) {
      const verdict = verdicts[index] as RequestVerdict;
      if (verdict.kind !== 'accepted') continue;
      await ingress.publish(events[index] as OutreachRequested);
      // After the publish: a request the consumer decided meanwhile keeps its decision.
      await deps.requests.accepted(verdict.request.requestId, verdict.request.requestEventId);
    }
    return verdicts;
  }

  // A request made before its person's erasure and read after it: refused before the experiment
  // service is asked (an assignment would name the candidate) and before anything is stored; asked
  // again in the transaction, under the lock an erasure takes, for an erasure that ran meanwhile.
  const arriving = (of: typeof valid) =>
    of.map(({ event, request }) => ({
      candidateKey: request.candidateKey,
      emailNorm: request.emailNorm,
      occurredAt: Number(event.occurredAt),
    }));
  const erasedRefusal = ({ index, event, request }: (typeof valid)[number]) => ({
    index,
    command: {
      type: 'RefuseRequest',
      refused: refusedOf(event, request),
      rejection: erasedSubjectRequest(),
      reason: 'the candidate was erased after this request was made: not planned',
    } satisfies RequestCommand,
  });
  const erased = deps.erasedBefore ? await deps.erasedBefore(arriving(valid)) : new Set<number>();
  const asked = valid.filter((_, i) => !erased.has(i));
  const early = valid.filter((_, i) => erased.has(i)).map(erasedRefusal);
  // Sticky variants from the experiment service, one batch per experiment, before the transaction.
  const answers = await assignments(
    deps.experiments,
    asked.map(({ request }) => request),
  );
  const { decided, order } = await withTransaction(deps.pool, async (client) => {
    let planning = asked;
    let late: typeof early = [];
    if (deps.erasedBefore && asked.length > 0) {
      await lockAgainstErasure(client);
      const meanwhile = await deps.erasedBefore(arriving(asked), client);
      planning = asked.filter((_, i) => !meanwhile.has(i));
      late = asked.filter((_, i) => meanwhile.has(i)).map(erasedRefusal);
    }
    const refused = [...refusals, ...early, ...late];
    const now = await deps.repository.now(client);
    const commands: RequestCommand[] = [
      ...refused.map(({ command }) => command),
      ...planning.map(({ event, request }): RequestCommand => ({
        type: 'PlanRequest',
        request,
        refused: refusedOf(event, request),
        experiment: answers(request),
        now,
      })),
    ];
    return {
      decided: await runCommands(client, requestDecider, requestStore(deps, now, commands), commands),
      order: [...refused.map(({ index }) => index), ...planning.map(({ index }) => index)],
    };
  });
  decidedAt(order, decided);
  // After the commit: a retried chunk reports once, the time it went through.
  deps.rerequests.report(rerequestsOf(decided, 'kafka'));
  return verdicts;
}

/** Not asked: the answer cannot matter (no experiment, or a re-request refused before it). */
const NOT_ASKED: ExperimentAnswer = { kind: 'none' };

function verdictOf({ command, events }: RequestDecided): RequestVerdict {
  const [event] = events;
  if (event === undefined) return { kind: 'repeated' };
  switch (event.type) {
    case 'RequestAccepted':
      return { kind: 'accepted', request: event.request, experimentChecked: event.experimentChecked };
    case 'RequestPlanned':
      return { kind: 'planned', request: event.request };
    case 'RequestRejected':
      return {
        kind: 'rejected',
        rejection: event.rejection,
        reason: event.reason,
        rerequested: event.rerequested,
        invalid: command.type === 'RefuseRequest',
      };
    default: {
      const exhaustive: never = event;
      throw new Error(`unknown request event ${JSON.stringify(exhaustive)}`);
    }
  }
}

/** The re-requests among what was decided: requests for a step another request already had emitted or cancelled. */
function rerequestsOf(decided: readonly RequestDecided[], ingress: 'http' | 'kafka'): Rerequest[] {
  return decided.flatMap(({ command, events }) =>
    events.flatMap((event) => {
      if (event.type !== 'RequestRejected' || event.rerequested === null || command.type === 'RefuseRequest') return [];
      const { campaignId, step, requestId } = command.request;
      return [{ state: event.rerequested, ingress, campaignId, step, requestId }];
    }),
  );
}

/** The HTTP ingress's question: the experiment's variants (a service that does not answer: unchecked). */
async function variantsOf(experiments: ExperimentClient, request: PlannedRequest): Promise<ExperimentAnswer> {
  if (!request.experimentId) return NOT_ASKED;
  try {
    const variants = await experiments.variants(request.experimentId);
    return variants === undefined ? { kind: 'unknown' } : { kind: 'variants', variants };
  } catch (error) {
    // The experiment service is down: accept; the request waits in Kafka until it answers.
    if (error instanceof TransientError) return { kind: 'unavailable' };
    throw error;
  }
}

/**
 * The consumer's question: each candidate's sticky variant, one batch per experiment. If the service
 * cannot answer, this throws a TransientError: the whole chunk waits and is retried, nothing is dropped.
 */
async function assignments(
  experiments: ExperimentClient,
  requests: readonly PlannedRequest[],
): Promise<(request: PlannedRequest) => ExperimentAnswer> {
  const byExperiment = new Map<string, Set<string>>();
  for (const request of requests) {
    if (request.experimentId)
      byExperiment.set(
        request.experimentId,
        (byExperiment.get(request.experimentId) ?? new Set()).add(request.candidateKey),
      );
  }
  const answers = new Map<string, ExperimentAnswer>();
  for (const [experimentId, candidates] of byExperiment) {
    const answer = await experiments.assign(experimentId, [...candidates]);
    // A 400 names no culprit: with several candidates, fail the chunk so the runner retries its
    // requests one by one, and each alone gets its own answer (a batch too large passes that way too).
    if (answer.kind === 'refused' && candidates.size > 1)
      throw new Error(`the experiment service refused a batch of ${candidates.size} candidates (400)`);
    for (const candidateKey of candidates) {
      answers.set(
        `${experimentId}\u0000${candidateKey}`,
        answer.kind === 'decisions'
          ? {
              kind: 'assigned',
              decision: answer.byCandidate.get(candidateKey) ?? { enrolled: false, reason: 'no answer' },
            }
          : answer.kind === 'unknown_experiment'
            ? { kind: 'unknown' }
            : { kind: 'refused' },
      );
    }
  }
  return (request) =>
    request.experimentId
      ? (answers.get(`${request.experimentId}\u0000${request.candidateKey}`) as ExperimentAnswer)
      : { kind: 'none' };
}
