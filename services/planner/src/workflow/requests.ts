/**
 * The HTTP side of request statuses: a refusal the HTTP ingress answers (4xx) is told to its
 * publisher the way the consumer tells one (an OutreachRejected through the outbox and the request's
 * record, in one transaction on the database clock); and a publisher asks what became of a request.
 */
import { withTransaction } from '@outreach/shared';
import type { Pool } from 'pg';
import type { PlannerRepository } from '../adapters/planner-repository.js';
import type { RequestsRepository } from '../adapters/requests-repository.js';
import { outreachRejected, type RefusedRequest, type RequestRejection } from '../domain/rejection.js';
import { requestView, type RequestView } from '../domain/request-status.js';

export interface RequestsDeps {
  readonly pool: Pool;
  readonly repository: PlannerRepository;
  readonly requests: RequestsRepository;
}

/**
 * Publishes the refusal and records it; false when the request id cannot travel (nothing safe to key
 * the event by, domain/rejection.ts `outreachRejected`). Throws when the database is away: the
 * caller answers 503 and the publisher retries, so a 4xx always comes with its event.
 */
export async function refuse(
  deps: RequestsDeps,
  request: RefusedRequest,
  rejection: RequestRejection,
): Promise<boolean> {
  return withTransaction(deps.pool, async (client) => {
    const event = outreachRejected(request, rejection, await deps.repository.now(client));
    if (event === null) return false;
    await deps.repository.enqueue(client, [event]);
    await deps.requests.recordDecisions(client, [{ requestId: event.requestId, to: 'rejected', rejection }]);
    return true;
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
