/**
 * A conversation event sent over HTTP (a reply, a close, a step carried out): in one transaction,
 * on the database clock, the domain checks and builds it (domain/conversation-event.ts) and the
 * outbox takes it for `conversation.events.v1`, where the liveness service and the planner's own
 * conversation consumer read it as they read an agent's. The same event id again is the same event:
 * the outbox keeps the first, and the answer says it was a duplicate.
 */
import { withTransaction } from '@outreach/shared';
import { type EmailHashKey } from '@outreach/contracts';
import type { Pool } from 'pg';
import type { PlannerRepository } from '../adapters/planner-repository.js';
import {
  conversationEventFrom,
  type ConversationEventRequest,
  type IngestedEvent,
  type IngressContext,
} from '../domain/conversation-event.js';

export type ConversationIngress =
  | { readonly ok: true; readonly event: IngestedEvent; readonly duplicate: boolean }
  | { readonly ok: false; readonly reason: string };

export async function ingestConversationEvent(
  deps: { readonly pool: Pool; readonly repository: PlannerRepository; readonly hashKey: EmailHashKey },
  request: ConversationEventRequest,
  context: Omit<IngressContext, 'now' | 'hashKey'>,
): Promise<ConversationIngress> {
  return withTransaction(deps.pool, async (client) => {
    const now = await deps.repository.now(client);
    const ingestion = conversationEventFrom(request, { ...context, now, hashKey: deps.hashKey });
    if (!ingestion.ok) return ingestion;
    const added = await deps.repository.enqueueConversationEvents(client, [ingestion.event]);
    return { ok: true, event: ingestion.event, duplicate: added === 0 };
  });
}
