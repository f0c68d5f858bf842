/**
 * The consumer of `outreach.requested.v1`: each batch goes through the planner's one decision about
 * requests (workflow/outreach-requests.ts `takeOutreachRequests`, the rules in domain/plan.ts
 * `requestDecider`): from OutreachRequested to SendRequested (now) or a scheduled step (later), in
 * one transaction with the planner's outbox and on its database clock. A request for a step already
 * emitted or cancelled plans nothing: a repeat of the same request quietly, any other is reported.
 * Every refusal is told to its publisher in the same transaction: an OutreachRejected (keyed by
 * requestId, domain/rejection.ts) and the request's record (domain/request-status.ts); refused
 * requests other than re-requests also go to the DLQ, as before. A record that cannot be decoded has
 * no requestId to answer: the consumer runner dead-letters it and nothing else is said.
 */
import {
  isTransientError,
  type ConsumedEvent,
  type EventBatchHandler,
  type Logger,
  type Rejection,
} from '@outreach/shared';
import { canonicalCorrelationId, type OutreachRequested } from '@outreach/contracts';
import { addressable, requestUnprocessable } from '../domain/rejection.js';
import { takeOutreachRequests, type OutreachRequestsDeps, type RequestVerdict } from './outreach-requests.js';
import { refuse as refuseAlone } from './requests.js';

interface IngressDeps extends OutreachRequestsDeps {
  readonly logger: Logger;
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

/**
 * The consumer's side of the one decision (workflow/outreach-requests.ts): records that are not
 * requests are dead-lettered; each request is planned or refused, and a refusal other than a
 * re-request is dead-lettered too, as before.
 */
function planRequests(deps: IngressDeps): EventBatchHandler {
  return async (events: readonly ConsumedEvent[]) => {
    const requests: Array<{ offset: string; event: OutreachRequested }> = [];
    for (const consumed of events)
      if (consumed.event.type === 'OutreachRequested')
        requests.push({ offset: consumed.offset, event: consumed.event as OutreachRequested });
    const verdicts = await takeOutreachRequests(
      deps,
      { via: 'kafka' },
      requests.map(({ event }) => event),
    );
    const verdictAt = new Map(requests.map(({ offset }, i) => [offset, verdicts[i] as RequestVerdict]));
    // Dead-lettered, in this order: records that are not requests and requests that break the rules
    // (as they came), then those refused when decided (a re-request is answered, not dead-lettered).
    const rejected: Rejection[] = [];
    for (const { offset, event } of events) {
      const verdict = verdictAt.get(offset);
      if (verdict === undefined)
        rejected.push({ offset, reason: `unexpected event type ${event.type} on the requests topic` });
      else if (verdict.kind === 'rejected' && verdict.invalid) rejected.push({ offset, reason: verdict.reason });
    }
    verdicts.forEach((verdict, i) => {
      if (verdict.kind === 'rejected' && !verdict.invalid && verdict.rerequested === null)
        rejected.push({ offset: (requests[i] as (typeof requests)[number]).offset, reason: verdict.reason });
    });
    for (const rejection of rejected)
      deps.logger.warn({ offset: rejection.offset, reason: rejection.reason }, 'rejected outreach request');
    return { rejected };
  };
}
