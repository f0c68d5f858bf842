import { randomUUID } from 'node:crypto';
import { AppError, canonicalConversationId, topicName, TransientError, type OutreachRequested } from '@outreach/shared';
import { Type, type Static } from '@sinclair/typebox';
// Unions list Null first: fastify's Ajv coerces types, and would turn null into "" for a string branch.
import type { FastifyInstance } from 'fastify';
import { stepRefKey } from '../../adapters/planner-repository.js';
import { validateRequest, variantCoverage } from '../../domain/request.js';
import { arrivalOf, unstoredStep } from '../../domain/step.js';

/**
 * Bounds at the edge, each with a reason in the 400: an id longer than the domain allows, a delay
 * past what an Avro long and a timestamp can hold, a conversation id no lookup route accepts. The
 * domain (validateRequest) then checks meaning; the body limit (MAX_BODY_BYTES) keeps every request
 * within one Kafka message.
 */
const ID = Type.String({ maxLength: 256 });
/** A follow-up at most a year and a day after the step before it. */
const MAX_DELAY_MS = 366 * 24 * 60 * 60 * 1000;
const Content = Type.Object(
  {
    variant: Type.Optional(Type.Union([Type.Null(), Type.String({ maxLength: 64 })])),
    subject: Type.String(),
    body: Type.String(),
  },
  { additionalProperties: false },
);
const Body = Type.Object(
  {
    requestId: ID,
    campaignId: ID,
    candidateId: ID,
    email: Type.String({ maxLength: 320 }),
    step: ID,
    // The experiment service's own limit on its ids.
    experimentId: Type.Optional(Type.Union([Type.Null(), Type.String({ maxLength: 64 })])),
    conversationId: Type.Optional(Type.Union([Type.Null(), Type.String({ minLength: 1, maxLength: 1024 })])),
    contents: Type.Array(Content, { minItems: 1, maxItems: 20 }),
    sendAt: Type.Optional(Type.Union([Type.Null(), Type.String({ format: 'date-time' })])),
    followUps: Type.Optional(
      Type.Array(
        Type.Object(
          {
            step: ID,
            delayMs: Type.Integer({ minimum: 1, maximum: MAX_DELAY_MS }),
            contents: Type.Array(Content, { minItems: 1, maxItems: 20 }),
          },
          { additionalProperties: false },
        ),
        { maxItems: 20 },
      ),
    ),
  },
  { additionalProperties: false },
);
/** Derived conversation ids are `<campaignId>:<candidate key>`, and a key can outgrow its id under NFC. */
const ConversationParams = Type.Object({ conversationId: Type.String({ minLength: 1, maxLength: 2048 }) });

/** Date.parse, or a 400: `format: date-time` admits leap seconds (`23:59:60Z`), which Date cannot hold. */
function parseSendAt(sendAt: string | null | undefined): number | null {
  if (!sendAt) return null;
  const parsed = Date.parse(sendAt);
  if (Number.isNaN(parsed)) throw new AppError('BAD_REQUEST', 'sendAt is not a representable date-time');
  return parsed;
}

/**
 * HTTP ingress for systems that do not speak Kafka: the same validation as the Kafka path, a 4xx
 * with every reason, then the request goes to `outreach.requested.v1` like any other. A request
 * for a step already emitted or cancelled is answered 409 with the step's state (and counted): it
 * would plan nothing. The same request again (same requestId) is accepted as before, and changes
 * nothing. The check reads the step as it is now; one emitted between this read and the Kafka
 * consumer's is reported there.
 */
export default async function outreachRequestRoutes(app: FastifyInstance): Promise<void> {
  app.post<{ Body: Static<typeof Body> }>(
    '/outreach-requests',
    { config: { scope: 'publish' }, schema: { body: Body } },
    async (request, reply) => {
      const body = request.body;
      const event: OutreachRequested = {
        type: 'OutreachRequested',
        eventId: randomUUID(),
        occurredAt: Date.now(),
        producer: 'planner-http',
        correlationId: String(request.id),
        causationId: null,
        requestId: body.requestId,
        campaignId: body.campaignId,
        candidateId: body.candidateId,
        email: body.email,
        step: body.step,
        experimentId: body.experimentId ?? null,
        conversationId: body.conversationId ?? null,
        contents: body.contents.map((c) => ({ variant: c.variant ?? null, subject: c.subject, body: c.body })),
        sendAt: parseSendAt(body.sendAt),
        followUps: (body.followUps ?? []).map((f) => ({
          step: f.step,
          delayMs: f.delayMs,
          contents: f.contents.map((c) => ({ variant: c.variant ?? null, subject: c.subject, body: c.body })),
        })),
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
