import { randomUUID } from 'node:crypto';
import { AppError, avroFromJson, avroToJsonSchema, type JsonSchema } from '@outreach/shared';
import { schemaDefinitions } from '@outreach/contracts';
import { Type, type Static } from '@sinclair/typebox';
import type { FastifyInstance } from 'fastify';
import {
  FILLED_IN,
  ingestedTypes,
  type ConversationEventRequest,
  type IngestedType,
} from '../../domain/conversation-event.js';
import { ingestConversationEvent } from '../../workflow/conversation-ingress.js';

const ID = { maxLength: 256 };
const REFINE: Record<IngestedType, Record<string, JsonSchema>> = {
  MessageReceived: { campaignId: ID, candidateKey: ID, messageId: ID },
  ConversationClosed: { campaignId: ID, candidateKey: ID, reason: ID },
  StepCompleted: { campaignId: ID, candidateKey: ID, stepId: ID },
};

/**
 * One body per event type, each its .avsc without what the platform fills in (the conversation id
 * comes from the path; the event id is optional), told apart by `type`: a field added to one of
 * these schemas is taken here without an edit.
 */
export function conversationEventBody(
  definitions: Record<IngestedType, { readonly current: object }> = schemaDefinitions,
) {
  return {
    type: 'object',
    oneOf: ingestedTypes.map((type) => {
      const derived = avroToJsonSchema(definitions[type].current, {
        omit: FILLED_IN,
        optional: ['eventId'],
        refine: REFINE[type],
      });
      return {
        ...derived,
        properties: { type: { const: type }, ...(derived.properties as JsonSchema) },
        required: ['type', ...((derived.required as string[] | undefined) ?? [])],
      };
    }),
    // Ajv checks the one branch `type` names, so a 400 says what that type is missing.
    discriminator: { propertyName: 'type' },
  };
}

/** Derived conversation ids are `<campaignId>:<candidate key>`, as long as the planner's lookup route takes. */
const Params = Type.Object({ conversationId: Type.String({ minLength: 1, maxLength: 2048 }) });
const Accepted = Type.Object({
  eventId: Type.String({ format: 'uuid', description: 'The given one, or the one derived or made for the event' }),
  conversationId: Type.String({ description: 'In its canonical form, as the event carries it' }),
  duplicate: Type.Boolean({ description: 'An event with this id was already taken; nothing new was published' }),
});

/**
 * HTTP ingress for conversation events, for systems that cannot produce Avro: a reply
 * (MessageReceived), a close (ConversationClosed), a step carried out (StepCompleted), published
 * on `conversation.events.v1` through the planner's outbox. 202 with the event id: the liveness
 * service and the planner (which stops a reminder sequence on a reply or a close) read it from there.
 */
export default async function conversationEventRoutes(app: FastifyInstance): Promise<void> {
  app.post<{ Params: Static<typeof Params>; Body: { type: IngestedType } & Record<string, unknown> }>(
    '/conversations/:conversationId/events',
    {
      config: { scope: 'publish' },
      schema: { params: Params, body: conversationEventBody(), response: { 202: Accepted } },
    },
    async (request, reply) => {
      const { type } = request.body;
      const fields = avroFromJson<Omit<ConversationEventRequest, 'type'>>(
        schemaDefinitions[type].current,
        request.body,
        { omit: FILLED_IN },
      );
      if (!fields.ok) throw new AppError('BAD_REQUEST', fields.reason);
      const result = await ingestConversationEvent(
        { pool: app.pg, repository: app.planner, hashKey: app.emailHashKey },
        { type, ...fields.value } as ConversationEventRequest,
        {
          conversationId: request.params.conversationId,
          correlationId: String(request.id),
          producer: 'planner-http',
          freshEventId: randomUUID(),
        },
      );
      if (!result.ok) throw new AppError('BAD_REQUEST', result.reason);
      return reply.code(202).send({
        eventId: result.event.eventId,
        conversationId: result.event.conversationId,
        duplicate: result.duplicate,
      });
    },
  );
}
