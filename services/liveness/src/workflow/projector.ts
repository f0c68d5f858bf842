import {
  lockAgainstErasure,
  runCommands,
  type ErasedSubjects,
  withTransaction,
  type ConsumedEvent,
  type EventBatchHandler,
  type Logger,
  type Rejection,
} from '@outreach/shared';
import {
  canonicalCampaignId,
  canonicalConversationId,
  canonicalCorrelationId,
  canonicalStep,
  holdsAtSign,
  type ConversationRecovered,
} from '@outreach/contracts';
import type { ConversationsRepository, ProjectedEvent } from '../adapters/conversations-repository.js';
import {
  conversationDecider,
  decideProjection,
  initialConversation,
  type Cause,
  type ConversationProjected,
  type ProjectConversation,
  type StoredConversation,
} from '../domain/conversation-decider.js';

/** The conversation an event belongs to; a send belongs to (campaign, candidate)'s default conversation. */
export function defaultConversationId(campaignId: string, candidateKey: string): string {
  return `${campaignId}:${candidateKey}`;
}

/**
 * Maps consumed events to projection inputs; event time is the record's broker append time.
 * Campaign ids, conversation ids and steps get their canonical forms (agents write conversation
 * events too, a campaign's graces are stored under the canonical id, and the planner files a given
 * conversation id in its canonical form); a correlation id that is no plain token is replaced, as
 * at every ingress, since it travels on to conversation.liveness.v1.
 *
 * A send belongs to the conversation it names (SendRecorded carries the SendRequested's
 * conversationId). One that names none (written before the field, or by a sender that does not
 * copy it yet) is filed by its step: under the conversation whose SequencePlanned lists
 * (campaign, candidate, step), else the default one (the repository decides, see its header).
 */
export function toProjected(consumed: ConsumedEvent): ProjectedEvent | undefined {
  const { event } = consumed;
  const base = {
    eventId: event.eventId,
    at: consumed.timestamp,
    position: [consumed.topic, consumed.partition, Number(consumed.offset)] as const,
    correlationId: canonicalCorrelationId(event.correlationId, event.eventId),
  };
  const inConversation = (
    e: { conversationId: string; campaignId: string; candidateKey: string },
    input: ProjectedEvent['input'],
  ) => ({
    ...base,
    conversationId: canonicalConversationId(e.conversationId),
    campaignId: canonicalCampaignId(e.campaignId),
    candidateKey: e.candidateKey,
    input,
  });
  switch (event.type) {
    case 'ConversationStarted':
    case 'MessageReceived':
      return inConversation(event, { type: event.type });
    case 'ConversationClosed':
      return inConversation(event, { type: 'ConversationClosed', reason: event.reason });
    case 'SequencePlanned':
      return inConversation(event, { type: 'SequencePlanned', steps: event.steps.map(canonicalStep) });
    case 'NextStepScheduled':
      return inConversation(event, { type: 'NextStepScheduled', stepId: event.stepId, dueAt: event.dueAt });
    case 'StepCancelled':
      return inConversation(event, { type: 'StepCancelled', stepId: event.stepId });
    case 'StepCompleted':
      return inConversation(event, { type: 'StepCompleted', stepId: event.stepId });
    case 'SendRecorded': {
      // A send that went out is a step taken. One suppressed or failed ends the sequence (the planner
      // goes on only after a sent step); held and ambiguous sends are not over yet, and a skipped
      // duplicate is another send's.
      if (event.outcome !== 'sent' && event.outcome !== 'suppressed' && event.outcome !== 'failed') return undefined;
      const campaignId = canonicalCampaignId(event.campaignId);
      const step = canonicalStep(event.step);
      const send = {
        ...base,
        campaignId,
        candidateKey: event.candidateKey,
        input:
          event.outcome === 'sent'
            ? ({ type: 'SendRecorded', step } as const)
            : ({ type: 'SendRecorded', step, outcome: event.outcome } as const),
      };
      const named = event.conversationId === null ? '' : canonicalConversationId(event.conversationId);
      return named === ''
        ? { ...send, conversationId: defaultConversationId(campaignId, event.candidateKey), routeStep: step }
        : { ...send, conversationId: named };
    }
    default:
      return undefined;
  }
}

/**
 * Why an event cannot be projected: an id that holds an address. The projection re-emits these ids
 * on conversation.liveness.v1 and serves them on its API, both free of addresses; the planner never
 * writes one (schemas/README.md, "Keys"), an agent might. The reason names the field only.
 */
export function projectionProblem(event: ProjectedEvent): string | undefined {
  const fields: string[] = (['conversationId', 'campaignId', 'candidateKey'] as const).filter((f) =>
    holdsAtSign(event[f]),
  );
  // A plan's steps are served on the API's timeline, which is free of addresses too.
  if (event.input.type === 'SequencePlanned' && event.input.steps.some(holdsAtSign)) fields.push('steps');
  return fields.length > 0
    ? `${fields.join(', ')} must not contain an at-sign (conversation topics are free of addresses)`
    : undefined;
}

/**
 * Projects a batch of events, in one transaction: stores the events not stored yet (the repository's
 * `record`: set-based, sends filed by their step), then re-folds every conversation they touched
 * through the Conversation decider (`runCommands`: load locked, decide, apply). Returns the
 * recoveries emitted.
 */
export async function projectEvents(
  repository: ConversationsRepository,
  batch: readonly ProjectedEvent[],
  erased?: ErasedSubjects,
): Promise<ConversationRecovered[]> {
  // An event already under an erasure's pseudonyms (a request on its way during the erasure, claimed
  // scrubbed by the sender) is an erased person's: no conversation is made of it.
  const named = batch.filter((e) => !e.candidateKey.startsWith('erased:') && !e.conversationId.startsWith('erased:'));
  if (named.length === 0) return [];
  return withTransaction(repository.pool, async (client) => {
    // Events of a person erased here are skipped, asked under the lock an erasure takes: either the
    // erasure ran first and is seen here, or it waits for this batch and deletes what it wrote.
    let events = named;
    if (erased?.configured) {
      // Live: in this transaction, under the lock. A rebuild writes a scratch schema and reads the
      // live one's erasures (no erasure runs on the scratch schema).
      const live = erased.db === repository.pool;
      if (live) await lockAgainstErasure(client);
      const skip = await erased.candidates(
        named.map((e) => e.candidateKey),
        live ? client : erased.db,
      );
      if (skip.size > 0) events = named.filter((e) => !skip.has(e.candidateKey));
      if (events.length === 0) return [];
    }
    const { touched, filed, fresh } = await repository.record(client, events);
    if (touched.length === 0) return [];
    const now = await repository.now(client);
    // A recovery's cause: the first of the batch's events filed under the conversation.
    const causes = new Map<string, Cause>();
    for (const e of filed) if (!causes.has(e.conversationId)) causes.set(e.conversationId, e);
    const command = (conversationId: string): ProjectConversation => ({
      type: 'ProjectConversation',
      conversationId,
      now,
      defaults: repository.defaults,
      cause: pickCause(causes.get(conversationId)),
    });
    // Conversations the batch may have created: decided from the batch's events alone (nothing else
    // is stored under them, nor flagged) and inserted as projected. One whose row exists after all
    // (another instance created it) takes the locked path below with the rest.
    const graces = await repository.graceSettings(client, [...new Set(fresh.map((f) => f.campaignId))]);
    const created = await repository.insertFresh(
      client,
      fresh.map((f) => {
        const stored: StoredConversation = {
          ...initialConversation,
          history: f.history,
          graces: graces.get(f.campaignId) ?? null,
        };
        const [projection] = decideProjection(stored, command(f.conversationId));
        return { fresh: f, projection: projection as ConversationProjected };
      }),
    );
    const lapsed = fresh.filter((f) => !created.has(f.conversationId));
    await repository.insertDefaults(
      client,
      lapsed.map((f) => f.conversationId),
      new Map(lapsed.map((f) => [f.conversationId, f])),
    );
    const rest = touched.filter((id) => !created.has(id));
    if (rest.length === 0) return [];
    return runCommands(client, conversationDecider, repository.conversations, rest.map(command));
  });
}

function pickCause(event: Cause | undefined): Cause | null {
  return event === undefined ? null : { eventId: event.eventId, correlationId: event.correlationId };
}

/**
 * The projector's handler. Events of a person erased here (`erased`, the live schema's
 * subject_erasures) and events under an erasure's `erased:` pseudonyms are skipped: the erasure deleted their conversations, and neither a late event
 * nor a replay of the log (a rebuild, a reset of the group) brings them back (ADR 014).
 */
export function projectorHandler(
  repository: ConversationsRepository,
  logger: Logger,
  erased?: ErasedSubjects,
): EventBatchHandler {
  return async (events) => {
    const projected: ProjectedEvent[] = [];
    const rejected: Rejection[] = [];
    for (const consumed of events) {
      const event = toProjected(consumed);
      if (!event) continue;
      const problem = projectionProblem(event);
      if (problem) rejected.push({ offset: consumed.offset, reason: problem });
      else projected.push(event);
    }
    const recovered = await projectEvents(repository, projected, erased);
    for (const event of recovered) {
      logger.info(
        { alert: 'conversation_recovered', conversationId: event.conversationId, reason: event.reason },
        'conversation recovered',
      );
    }
    return { rejected };
  };
}
