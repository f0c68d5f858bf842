/**
 * A conversation event from a system that cannot produce Avro (an agent's inbox, a CRM): a reply,
 * a close, a step carried out, as its HTTP ingress takes it. The same key rules as every ingress
 * (schemas/README.md, "Keys"): campaign id, step and conversation id in their canonical forms and
 * free of addresses, the candidate keyed as the planner keys it (an address becomes its keyed
 * hash), a message id or reason with an at-sign refused. The reason names fields, never values.
 *
 * The event id is the caller's when given, so a retry is the same event; otherwise one derived from
 * what identifies the fact (the conversation and its message id, or its step), and only a reply
 * without a message id or a close gets a fresh one, which a retry does not repeat.
 * Pure: the clock, the fresh id and the emailHash key come in as values.
 */
import {
  canonicalCampaignId,
  canonicalConversationId,
  canonicalStep,
  candidateKeyFor,
  hasControlCharacters,
  holdsAtSign,
  idProblem,
  uuidV5,
  type ConversationClosed,
  type EmailHashKey,
  type MessageReceived,
  type StepCompleted,
} from '@outreach/contracts';

/** The liveness service's reason for closing a conversation whose sequence got no reply (schemas: ConversationClosed). */
export const SEQUENCE_COMPLETED = 'sequence_completed';

export const ingestedTypes = ['MessageReceived', 'ConversationClosed', 'StepCompleted'] as const;
export type IngestedType = (typeof ingestedTypes)[number];
export type IngestedEvent = MessageReceived | ConversationClosed | StepCompleted;

/** What the platform fills in; the conversation id comes from the path. */
export const FILLED_IN = ['occurredAt', 'producer', 'correlationId', 'causationId', 'conversationId'] as const;
type Given<E extends IngestedEvent> = Omit<E, 'type' | (typeof FILLED_IN)[number] | 'eventId'> & {
  readonly type: E['type'];
  /** The caller's id for the event (a UUID): its retries are one event. */
  readonly eventId?: string;
};
export type ConversationEventRequest = Given<MessageReceived> | Given<ConversationClosed> | Given<StepCompleted>;

export interface IngressContext {
  /** As the caller wrote it in the path. */
  readonly conversationId: string;
  readonly now: number;
  /** The request's correlation id (already a plain token: service/http.ts). */
  readonly correlationId: string;
  readonly producer: string;
  /** The id of an event that has nothing to derive one from. */
  readonly freshEventId: string;
  readonly hashKey: EmailHashKey;
}

export type Ingestion =
  { readonly ok: true; readonly event: IngestedEvent } | { readonly ok: false; readonly reason: string };

const AT_SIGN = 'must not contain an at-sign (conversation topics are free of addresses)';

export function conversationEventFrom(request: ConversationEventRequest, context: IngressContext): Ingestion {
  const problems: string[] = [];
  const conversationId = canonicalConversationId(context.conversationId);
  if (conversationId === '' || hasControlCharacters(conversationId))
    problems.push('conversationId is empty or contains line breaks or control characters');
  else if (holdsAtSign(conversationId)) problems.push(`conversationId ${AT_SIGN}`);
  const campaignId = canonicalCampaignId(request.campaignId);
  const campaignProblem = idProblem('campaignId', campaignId);
  if (campaignProblem) problems.push(campaignProblem);
  // An address as the candidate is keyed by its keyed hash, as the outreach ingress keys it.
  const candidateKey = candidateKeyFor(request.candidateKey, context.hashKey);
  const candidateProblem = idProblem('candidateKey', candidateKey);
  if (candidateProblem) problems.push(candidateProblem);

  const base = {
    occurredAt: context.now,
    producer: context.producer,
    correlationId: context.correlationId,
    causationId: null,
    conversationId,
    campaignId,
    candidateKey,
  };
  const derived = (...parts: string[]) =>
    request.eventId ?? uuidV5('conversation-event', conversationId, request.type, ...parts);
  let event: IngestedEvent;
  switch (request.type) {
    case 'MessageReceived': {
      const messageId = request.messageId === null ? null : request.messageId.trim();
      if (messageId !== null) {
        const problem = idProblem('messageId', messageId);
        if (problem) problems.push(problem);
      }
      event = {
        type: 'MessageReceived',
        eventId: messageId === null ? (request.eventId ?? context.freshEventId) : derived(messageId),
        ...base,
        messageId,
      };
      break;
    }
    case 'StepCompleted': {
      const stepId = canonicalStep(request.stepId);
      const problem = idProblem('stepId', stepId);
      if (problem) problems.push(problem);
      event = { type: 'StepCompleted', eventId: derived(stepId), ...base, stepId };
      break;
    }
    case 'ConversationClosed': {
      const reason = request.reason === null ? null : request.reason.trim();
      if (reason !== null) {
        if (reason === '' || hasControlCharacters(reason))
          problems.push('reason is empty or contains line breaks or control characters');
        else if (holdsAtSign(reason)) problems.push(`reason ${AT_SIGN}`);
        // The liveness service's own close means "the sequence ran out"; nobody else may say so.
        else if (reason === SEQUENCE_COMPLETED)
          problems.push(`reason ${SEQUENCE_COMPLETED} is the liveness service's own`);
      }
      event = {
        type: 'ConversationClosed',
        eventId: request.eventId ?? context.freshEventId,
        ...base,
        reason,
      };
      break;
    }
    default: {
      const never: never = request;
      return { ok: false, reason: `unknown event type ${(never as { type: string }).type}` };
    }
  }
  return problems.length > 0
    ? { ok: false, reason: `invalid ${request.type}: ${problems.join('; ')}` }
    : { ok: true, event };
}
