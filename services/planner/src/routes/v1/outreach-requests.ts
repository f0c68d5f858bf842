import { randomUUID } from 'node:crypto';
import {
  AppError,
  avroFromJson,
  avroToJsonSchema,
  canonicalConversationId,
  schemaDefinitions,
  topicName,
  TransientError,
  type OutreachRequested,
} from '@outreach/shared';
import { Type, type Static } from '@sinclair/typebox';
import type { FastifyInstance } from 'fastify';
import { stepRefKey } from '../../adapters/planner-repository.js';
import { validateRequest, variantCoverage } from '../../domain/request.js';
import { arrivalOf, unstoredStep } from '../../domain/step.js';

/** What the ingress fills in: a caller sends the request's own fields, nothing else. */
const ENVELOPE = ['eventId', 'occurredAt', 'producer', 'correlationId', 'causationId'] as const;
type RequestFields = Omit<OutreachRequested, 'type' | (typeof ENVELOPE)[number]>;

/**
 * Bounds at the edge, each with a reason in the 400: an id longer than the domain allows, a delay
 * past what an Avro long and a timestamp can hold, a conversation id no lookup route accepts. The
 * domain (validateRequest) then checks meaning; the body limit (MAX_BODY_BYTES) keeps every request
 * within one Kafka message.
 */
const ID = { maxLength: 256 };
/** A follow-up at most a year and a day after the step before it. */
const MAX_DELAY_MS = 366 * 24 * 60 * 60 * 1000;
const CONTENTS = { minItems: 1, maxItems: 20 };
// The experiment service's own limit on its ids.
const EXPERIMENT_ID = { maxLength: 64 };

/**
 * The body: OutreachRequested.avsc without the envelope (one contract: a field added to the schema
 * is taken here, documented at /docs and carried into the event without an edit), with the bounds above.
 */
export function outreachRequestBody(schema: object = schemaDefinitions.OutreachRequested.current) {
  return avroToJsonSchema(schema, {
    omit: ENVELOPE,
    refine: {
      requestId: ID,
      campaignId: ID,
      candidateId: ID,
      email: { maxLength: 320 },
      step: ID,
      experimentId: EXPERIMENT_ID,
      conversationId: { minLength: 1, maxLength: 1024 },
      contents: CONTENTS,
      'contents[].variant': EXPERIMENT_ID,
      followUps: { maxItems: 20 },
      'followUps[].step': ID,
      'followUps[].delayMs': { minimum: 1, maximum: MAX_DELAY_MS },
      'followUps[].contents': CONTENTS,
      'followUps[].contents[].variant': EXPERIMENT_ID,
    },
  });
}

const Accepted = Type.Object({
  requestId: Type.String(),
  sendId: Type.String({ format: 'uuid', description: 'UUIDv5 of the canonical (campaignId, candidate key, step)' }),
  conversationId: Type.String({ description: 'In its canonical form; derived when none was given' }),
  experimentChecked: Type.Boolean({
    description:
      'Whether the experiment service confirmed the contents cover every variant (false: it did not answer, or there is no experiment)',
  }),
});

/** Derived conversation ids are `<campaignId>:<candidate key>`, and a key can outgrow its id under NFC. */
const ConversationParams = Type.Object({ conversationId: Type.String({ minLength: 1, maxLength: 2048 }) });

/**
 * HTTP ingress for systems that do not speak Kafka: the same validation as the Kafka path, a 4xx
 * with every reason, then the request goes to `outreach.requested.v1` like any other. A request
 * for a step already emitted or cancelled is answered 409 with the step's state (and counted): it
 * would plan nothing. The same request again (same requestId) is accepted as before, and changes
 * nothing. The check reads the step as it is now; one emitted between this read and the Kafka
 * consumer's is reported there.
 */
export default async function outreachRequestRoutes(app: FastifyInstance): Promise<void> {
  app.post<{ Body: Record<string, unknown> }>(
    '/outreach-requests',
    {
      config: { scope: 'publish' },
      schema: { body: outreachRequestBody(), response: { 202: Accepted } },
    },
    async (request, reply) => {
      const fields = avroFromJson<RequestFields>(schemaDefinitions.OutreachRequested.current, request.body, {
        omit: ENVELOPE,
      });
      if (!fields.ok) throw new AppError('BAD_REQUEST', fields.reason);
      const event: OutreachRequested = {
        type: 'OutreachRequested',
        eventId: randomUUID(),
        occurredAt: Date.now(),
        producer: 'planner-http',
        correlationId: String(request.id),
        causationId: null,
        ...fields.value,
      };
      const validation = validateRequest(event, app.emailHashKey);
      if (!validation.ok) throw new AppError('BAD_REQUEST', validation.reason);
      const planned = validation.request;
      const stored = await app.planner.currentSteps([planned]);
      const arrival = arrivalOf(stored.get(stepRefKey(planned)) ?? unstoredStep, planned.requestId);
      if (arrival.kind === 'rerequested') {
        const { campaignId, step, requestId } = planned;
        app.rerequests.report([{ state: arrival.state, ingress: 'http', campaignId, step, requestId }]);
        // A code and the state; no caller value beyond what the caller sent.
        throw new AppError('CONFLICT', `the step was already ${arrival.state}: nothing was planned`, {
          reason: `step_already_${arrival.state}`,
          state: arrival.state,
          sendId: planned.sendId,
        });
      }
      let experimentChecked = false;
      if (event.experimentId) {
        try {
          const coverage = variantCoverage(
            event.contents,
            (await app.experimentClient.variants(event.experimentId)) ?? null,
          );
          if (!coverage.ok) throw new AppError('UNPROCESSABLE', coverage.reason);
          experimentChecked = true;
        } catch (error) {
          // The experiment service is down: accept; the request waits in Kafka until it answers.
          if (!(error instanceof TransientError)) throw error;
        }
      }
      await app.producer.publish([{ topic: topicName('outreachRequested', app.plannerConfig.TOPIC_PREFIX), event }]);
      return reply.code(202).send({
        requestId: event.requestId,
        sendId: validation.request.sendId,
        conversationId: validation.request.conversationId,
        experimentChecked,
      });
    },
  );

  app.get('/steps/summary', { config: { scope: 'read' } }, async () => ({ steps: await app.planner.summary() }));

  app.get<{ Params: Static<typeof ConversationParams> }>(
    '/conversations/:conversationId/steps',
    { config: { scope: 'read' }, schema: { params: ConversationParams } },
    async (request) => ({
      conversationId: request.params.conversationId,
      // Steps are filed under the canonical id, as the ingress files a given one.
      steps: await app.planner.steps(canonicalConversationId(request.params.conversationId)),
    }),
  );
}
