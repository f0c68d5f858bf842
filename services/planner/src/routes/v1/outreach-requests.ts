import { randomUUID } from 'node:crypto';
import { AppError, topicName, TransientError, type OutreachRequested } from '@outreach/shared';
import { Type, type Static } from '@sinclair/typebox';
// Unions list Null first: fastify's Ajv coerces types, and would turn null into "" for a string branch.
import type { FastifyInstance } from 'fastify';
import { validateRequest } from '../../domain/request.js';

const Content = Type.Object(
  { variant: Type.Optional(Type.Union([Type.Null(), Type.String()])), subject: Type.String(), body: Type.String() },
  { additionalProperties: false },
);
const Body = Type.Object(
  {
    requestId: Type.String(),
    campaignId: Type.String(),
    candidateId: Type.String(),
    email: Type.String(),
    step: Type.String(),
    experimentId: Type.Optional(Type.Union([Type.Null(), Type.String()])),
    conversationId: Type.Optional(Type.Union([Type.Null(), Type.String()])),
    contents: Type.Array(Content, { minItems: 1, maxItems: 20 }),
    sendAt: Type.Optional(Type.Union([Type.Null(), Type.String({ format: 'date-time' })])),
    followUps: Type.Optional(
      Type.Array(
        Type.Object(
          { step: Type.String(), delayMs: Type.Integer(), contents: Type.Array(Content, { minItems: 1 }) },
          { additionalProperties: false },
        ),
        {
          maxItems: 20,
        },
      ),
    ),
  },
  { additionalProperties: false },
);

/**
 * HTTP ingress for systems that do not speak Kafka: the same validation as the Kafka path, a 4xx
 * with every reason, then the request goes to `outreach.requested.v1` like any other.
 */
export default async function outreachRequestRoutes(app: FastifyInstance): Promise<void> {
  app.post<{ Body: Static<typeof Body> }>(
    '/outreach-requests',
    { schema: { body: Body }, bodyLimit: 2_000_000 },
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
        sendAt: body.sendAt ? Date.parse(body.sendAt) : null,
        followUps: (body.followUps ?? []).map((f) => ({
          step: f.step,
          delayMs: f.delayMs,
          contents: f.contents.map((c) => ({ variant: c.variant ?? null, subject: c.subject, body: c.body })),
        })),
      };
      const validation = validateRequest(event);
      if (!validation.ok) throw new AppError('BAD_REQUEST', validation.reason);
      let experimentChecked = false;
      if (event.experimentId) {
        try {
          const variants = await app.experimentClient.variants(event.experimentId);
          if (!variants) throw new AppError('UNPROCESSABLE', `unknown experiment ${event.experimentId}`);
          const hasDefault = event.contents.some((c) => c.variant === null);
          const missing = variants.filter((v) => !event.contents.some((c) => c.variant === v));
          if (missing.length > 0 && !hasDefault) {
            throw new AppError(
              'UNPROCESSABLE',
              `no content for variant(s) ${missing.join(', ')} of experiment ${event.experimentId}`,
            );
          }
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

  app.get('/steps/summary', async () => ({ steps: await app.planner.summary() }));

  app.get<{ Params: { conversationId: string } }>('/conversations/:conversationId/steps', async (request) => ({
    conversationId: request.params.conversationId,
    steps: await app.planner.steps(request.params.conversationId),
  }));
}
