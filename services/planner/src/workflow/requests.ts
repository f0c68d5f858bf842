/**
 * The HTTP side of request statuses: a refusal the HTTP ingress answers (4xx) is told to its
 * publisher the way the consumer tells one (an OutreachRejected through the outbox and the request's
 * record, in one transaction on the database clock); and a publisher asks what became of a request.
 */
import { runCommands, withTransaction } from '@outreach/shared';
import type { Pool } from 'pg';
import type { PlannerRepository } from '../adapters/planner-repository.js';
import { requestStore } from '../adapters/request-store.js';
import type { RequestsRepository } from '../adapters/requests-repository.js';
import { requestDecider, type RequestCommand } from '../domain/plan.js';
import { addressable, type RefusedRequest, type RequestRejection } from '../domain/rejection.js';
import { requestView, type RequestView } from '../domain/request-status.js';

export interface RequestsDeps {
  readonly pool: Pool;
  readonly repository: PlannerRepository;
  readonly requests: RequestsRepository;
}

/**
 * Publishes the refusal and records it (the request's decider, `RefuseRequest`, through the command
 * seam); false when the request id cannot travel (nothing safe to key the event by,
 * domain/rejection.ts `outreachRejected`). Throws when the database is away: the caller answers 503
 * and the publisher retries, so a 4xx always comes with its event. For refusals that come before a
 * request could be read as one (a body the schema refuses), and for a request that failed for good.
 */
export async function refuse(
  deps: RequestsDeps,
  request: RefusedRequest,
  rejection: RequestRejection,
): Promise<boolean> {
  return withTransaction(deps.pool, async (client) => {
    const now = await deps.repository.now(client);
    const commands: RequestCommand[] = [
      { type: 'RefuseRequest', refused: request, rejection, reason: rejection.detail },
    ];
    await runCommands(client, requestDecider, requestStore(deps, now, commands), commands);
    return addressable(request.requestId);
  });
}

/** What became of the request, or undefined when the planner has no record of it. */
export async function requestStatus(
  deps: Pick<RequestsDeps, 'requests'>,
  requestId: string,
): Promise<RequestView | undefined> {
  const record = await deps.requests.record(requestId);
  if (record === undefined) return undefined;
  return requestView(record, record.status === 'planned' ? await deps.requests.sends(requestId) : []);
}
