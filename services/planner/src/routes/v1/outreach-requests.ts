import { randomUUID } from 'node:crypto';
import { AppError, avroFromJson, avroToJsonSchema, topicName } from '@outreach/shared';
import {
  canonicalConversationId,
  exactIdProblem,
  MAX_EXPERIMENT_ID_CHARS,
  schemaDefinitions,
  type OutreachRequested,
} from '@outreach/contracts';
import { Type, type Static } from '@sinclair/typebox';
import type { FastifyError, FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import {
  fieldsNamed,
  fieldsOfValidation,
  invalidRequest,
  pointerPath,
  REJECTION_REASONS,
  type RequestRejection,
} from '../../domain/rejection.js';
import { REQUEST_STATUSES, SEND_STATUSES, type RequestView } from '../../domain/request-status.js';
import { takeOutreachRequests, type Ingress, type RequestVerdict } from '../../workflow/outreach-requests.js';
import { refuse, requestStatus } from '../../workflow/requests.js';

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
// The experiment service's own limit on its ids (the domain checks it again, for the Kafka path).
const EXPERIMENT_ID = { maxLength: MAX_EXPERIMENT_ID_CHARS };

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

const oneOf = <T extends string>(values: readonly T[], description: string) =>
  Type.Unsafe<T>({ type: 'string', enum: [...values], description });
const Timestamp = Type.String({ format: 'date-time' });

const WaitingBody = Type.Object({
  sends: Type.Array(
    Type.Object({
      campaignId: Type.String({ minLength: 1, maxLength: 256 }),
      candidateKey: Type.String({ minLength: 1, maxLength: 512 }),
      step: Type.String({ minLength: 1, maxLength: 256 }),
    }),
    { maxItems: 500 },
  ),
});
const RequestParams = Type.Object({ requestId: Type.String({ minLength: 1, ...ID }) });
const RequestStatusReply = Type.Object({
  requestId: Type.String(),
  status: oneOf(
    REQUEST_STATUSES,
    'accepted (taken over HTTP, not yet planned), rejected (see `rejection`), planned, cancelled (its step was ' +
      'cancelled before any send), or, once a send has an outcome, that of its latest send in sequence order: sent, ' +
      'skipped_duplicate, suppressed, failed, ambiguous, held, or superseded (recorded for another request for the same step)',
  ),
  rejection: Type.Union([
    Type.Null(),
    Type.Object({
      reason: oneOf(REJECTION_REASONS, 'The OutreachRejected reason code (docs/publishers.md has the table)'),
      detail: Type.String({ description: "In the platform's words and the request's field names; never a value" }),
      sendId: Type.Union([Type.Null(), Type.String({ format: 'uuid' })], {
        description: 'The send that holds the step, for step_already_emitted and step_already_cancelled',
      }),
    }),
  ]),
  updatedAt: Timestamp,
  sends: Type.Array(
    Type.Object({
      sendId: Type.String({ format: 'uuid' }),
      step: Type.String(),
      status: oneOf(
        SEND_STATUSES,
        'pending (a follow-up waiting for the step before it), scheduled, requested (handed to the sender), ' +
          'cancelled, an outcome of the sender, or superseded',
      ),
      at: Type.Union([Type.Null(), Timestamp], {
        description: 'When it reached that status; the due time of a scheduled send; null while pending',
      }),
      reason: Type.Union([Type.Null(), Type.String()], {
        description: "The sender's reason for an outcome other than sent",
      }),
    }),
    { description: 'The sends the request planned, in sequence order: its step, then its follow-ups' },
  ),
});
const NotFound = Type.Object({ error: Type.String(), message: Type.String() });

const iso = (ms: number | null) => (ms === null ? null : new Date(ms).toISOString());
function statusReply(view: RequestView) {
  return {
    ...view,
    updatedAt: iso(view.updatedAt),
    sends: view.sends.map((send) => ({ ...send, at: iso(send.at) })),
  };
}

/** The request a body names, when it names one as a string: what a refusal is addressed to. */
function refusedBy(request: FastifyRequest) {
  const requestId = (request.body as { requestId?: unknown } | undefined)?.requestId;
  return typeof requestId === 'string' ? { requestId, eventId: '', correlationId: String(request.id) } : undefined;
}

/**
 * The verdict as HTTP: 202 with the send's ids; a re-request 409 with the step's state (a code and
 * the state, no caller value beyond what the caller sent); a request that breaks the rules 400; an
 * experiment it cannot serve 422.
 */
function answer(verdict: RequestVerdict | undefined, reply: FastifyReply) {
  switch (verdict?.kind) {
    case 'accepted':
      return reply.code(202).send({
        requestId: verdict.request.requestId,
        sendId: verdict.request.sendId,
        conversationId: verdict.request.conversationId,
        experimentChecked: verdict.experimentChecked,
      });
    case 'rejected': {
      const { rerequested, rejection, reason } = verdict;
      if (rerequested !== null)
        throw new AppError('CONFLICT', reason, {
          reason: `step_already_${rerequested}`,
          state: rerequested,
          sendId: rejection.sendId,
        });
      throw new AppError(rejection.reason === 'invalid_request' ? 'BAD_REQUEST' : 'UNPROCESSABLE', reason);
    }
    default:
      throw new Error(`the HTTP ingress takes or refuses a request, it does not ${verdict?.kind ?? 'skip'} it`);
  }
}

/** Derived conversation ids are `<campaignId>:<candidate key>`, and a key can outgrow its id under NFC. */
const ConversationParams = Type.Object({ conversationId: Type.String({ minLength: 1, maxLength: 2048 }) });

/**
 * HTTP ingress for systems that do not speak Kafka: the same validation as the Kafka path, a 4xx
 * with every reason, then the request goes to `outreach.requested.v1` like any other. A request
 * for a step already emitted or cancelled is answered 409 with the step's state (and counted): it
 * would plan nothing. The same request again (same requestId) is accepted as before, and changes
 * nothing. The check reads the step as it is now; one emitted between this read and the Kafka
 * consumer's is reported there. Every refusal whose body names a valid requestId is also told the
 * way the consumer tells one (an OutreachRejected, the request's record) before the 4xx, so a
 * publisher that reads the topic hears of every refusal; a body without one (unparsable, too
 * large, the id itself invalid) gets the 4xx alone.
 *
 * `GET /outreach-requests/:requestId`: what became of a request (domain/request-status.ts), for the
 * `read` scope like every read; 400 for an id no request can have, 404 for one the planner does not know.
 */
export default async function outreachRequestRoutes(app: FastifyInstance): Promise<void> {
  const deps = app.outreachRequests;
  const topic = topicName('outreachRequested', app.plannerConfig.TOPIC_PREFIX);
  const ingress: Ingress = {
    via: 'http',
    publish: async (event) => app.producer.publish([{ topic, event }]),
  };
  // Requests whose refusal was told (or could not be): the error hook below leaves them alone.
  const told = new WeakSet<FastifyRequest>();
  /** Tells the publisher (OutreachRejected, the request's record), then answers with `error`. */
  const refuseWith = async (request: FastifyRequest, rejection: RequestRejection, error: Error): Promise<never> => {
    told.add(request);
    const refused = refusedBy(request);
    if (refused) await refuse(deps, refused, rejection);
    throw error;
  };

  app.post<{ Body: Record<string, unknown> }>(
    '/outreach-requests',
    {
      config: { scope: 'publish' },
      schema: { body: outreachRequestBody(), response: { 202: Accepted } },
      // The handler sees a body that fails the schema, to tell its publisher before the 400.
      attachValidation: true,
      // A body refused before the handler (a NUL character, service/http.ts): told on the way out,
      // best effort (the 400 is already decided; a failure here is logged).
      onError: async (request, reply, error: FastifyError) => {
        if (told.has(request) || (error.statusCode ?? reply.statusCode) !== 400) return;
        const refused = refusedBy(request);
        if (!refused) return;
        const at = /^body(\/\S+)/.exec(error.message)?.[1] ?? '';
        await refuse(deps, refused, invalidRequest([pointerPath(at)])).catch((failure: unknown) =>
          request.log.warn({ err: failure }, 'a refused request could not be told to its publisher'),
        );
      },
    },
    async (request, reply) => {
      // The clock, read once at the edge: the request's event is stamped with it.
      const now = Date.now();
      const invalid = request.validationError as (FastifyError & { validation?: unknown }) | undefined;
      if (invalid)
        return refuseWith(
          request,
          invalidRequest(fieldsOfValidation((invalid.validation as Parameters<typeof fieldsOfValidation>[0]) ?? [])),
          invalid,
        );
      const fields = avroFromJson<RequestFields>(schemaDefinitions.OutreachRequested.current, request.body, {
        omit: ENVELOPE,
      });
      if (!fields.ok)
        return refuseWith(
          request,
          invalidRequest(fieldsNamed([fields.reason])),
          new AppError('BAD_REQUEST', fields.reason),
        );
      const event: OutreachRequested = {
        type: 'OutreachRequested',
        eventId: randomUUID(),
        occurredAt: now,
        producer: 'planner-http',
        correlationId: String(request.id),
        causationId: null,
        ...fields.value,
      };
      // The one decision (workflow/outreach-requests.ts), which tells its publisher of any refusal.
      told.add(request);
      const [verdict] = await takeOutreachRequests(deps, ingress, [event]);
      return answer(verdict, reply);
    },
  );

  app.get<{ Params: Static<typeof RequestParams> }>(
    '/outreach-requests/:requestId',
    {
      config: { scope: 'read' },
      schema: { params: RequestParams, response: { 200: RequestStatusReply, 404: NotFound } },
    },
    async (request) => {
      const { requestId } = request.params;
      // The rules every ingress applies to a request id: one that breaks them names no request.
      const problem = exactIdProblem('requestId', requestId);
      if (problem) throw new AppError('BAD_REQUEST', problem);
      const view = await requestStatus(deps, requestId);
      if (view === undefined)
        throw new AppError(
          'NOT_FOUND',
          'no outreach request with this requestId: never sent, not yet read by the planner (a request sent to Kafka is known once the planner has read it), or older than the retention of request statuses',
        );
      return statusReply(view);
    },
  );

  app.get('/steps/summary', { config: { scope: 'read' } }, async () => ({ steps: await app.planner.summary() }));

  /**
   * What waits behind each of these sends (the console's ambiguous work queue): the candidate's other
   * steps still scheduled in the campaign, and the follow-ups of sequences waiting for this step's
   * outcome. A POST because a page of sends does not fit a URL; it reads only.
   */
  app.post<{ Body: Static<typeof WaitingBody> }>(
    '/steps/waiting',
    { config: { scope: 'read' }, schema: { body: WaitingBody } },
    async (request) => ({ waiting: await app.planner.waitingBehind(request.body.sends) }),
  );

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
