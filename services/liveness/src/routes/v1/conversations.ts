import { AppError, campaignIdParam } from '@outreach/shared';
import { canonicalConversationId } from '@outreach/contracts';
import { Type, type Static } from '@sinclair/typebox';
import type { FastifyInstance } from 'fastify';

/** A grace of up to a year: deadlines stay timestamps PostgreSQL can hold (and bigint columns never overflow). */
const MAX_GRACE_MS = 365 * 24 * 60 * 60 * 1000;
/** The planner's derived ids (`<campaignId>:<candidate key>`) stay well below this; see its ingress route. */
const MAX_CONVERSATION_ID = 2048;

const StalledQuery = Type.Object({
  campaignId: Type.Optional(Type.String({ minLength: 1, maxLength: 256 })),
  reason: Type.Optional(Type.Union([Type.Literal('no_next_step'), Type.Literal('next_step_overdue')])),
  limit: Type.Integer({ minimum: 1, maximum: 500, default: 50 }),
  after: Type.Optional(Type.String({ minLength: 1, maxLength: 4 * MAX_CONVERSATION_ID })),
});
const IdParams = Type.Object({ id: Type.String({ minLength: 1, maxLength: MAX_CONVERSATION_ID }) });
const GraceParams = Type.Object({ campaignId: Type.String({ minLength: 1, maxLength: 256 }) });
const GraceBody = Type.Object(
  {
    inboundMs: Type.Integer({ minimum: 1, maximum: MAX_GRACE_MS }),
    outboundMs: Type.Integer({ minimum: 1, maximum: MAX_GRACE_MS }),
    overdueMs: Type.Integer({ minimum: 0, maximum: MAX_GRACE_MS }),
    /** Absent or null: the service's REPLY_WINDOW_MS, whatever it is set to later. */
    replyWindowMs: Type.Optional(Type.Union([Type.Null(), Type.Integer({ minimum: 1, maximum: MAX_GRACE_MS })])),
  },
  { additionalProperties: false },
);

const encodeCursor = (flaggedAt: Date, conversationId: string) =>
  Buffer.from(JSON.stringify([flaggedAt.toISOString(), conversationId])).toString('base64url');
function decodeCursor(cursor: string): { flaggedAt: Date; conversationId: string } {
  try {
    const [flaggedAt, conversationId] = JSON.parse(Buffer.from(cursor, 'base64url').toString('utf8')) as [
      string,
      string,
    ];
    const date = new Date(flaggedAt);
    // Only what encodeCursor writes: a date PostgreSQL can hold, an id a row can have.
    if (Number.isNaN(date.getTime()) || date.toISOString() !== flaggedAt || typeof conversationId !== 'string')
      throw new Error('bad cursor');
    if (date.getUTCFullYear() < 1970 || date.getUTCFullYear() > 9999 || conversationId.includes('\u0000'))
      throw new Error('bad cursor');
    return { flaggedAt: date, conversationId };
  } catch {
    throw new AppError('BAD_REQUEST', 'after is not a cursor returned by this endpoint');
  }
}

export default async function conversationRoutes(app: FastifyInstance): Promise<void> {
  /** Stalled conversations, oldest flag first, paged with `after` = the previous page's `next`. */
  app.get<{ Querystring: Static<typeof StalledQuery> }>(
    '/conversations/stalled',
    { config: { scope: 'read' }, schema: { querystring: StalledQuery } },
    async (request) => {
      const { campaignId, reason, limit, after } = request.query;
      const rows = await app.conversations.stalled({
        limit,
        // `Camp-1` lists the conversations recorded under `camp-1`, as every ingress folds it.
        ...(campaignId ? { campaignId: campaignIdParam(campaignId) } : {}),
        ...(reason ? { reason } : {}),
        ...(after ? { after: decodeCursor(after) } : {}),
      });
      const last = rows.at(-1);
      return {
        conversations: rows,
        next: rows.length === limit && last?.flaggedAt ? encodeCursor(last.flaggedAt, last.conversationId) : null,
      };
    },
  );

  app.get<{ Params: Static<typeof IdParams> }>(
    '/conversations/:id',
    { config: { scope: 'read' }, schema: { params: IdParams } },
    async (request) => {
      // Filed under its canonical form, as every ingress files it.
      const id = canonicalConversationId(request.params.id);
      const conversation = await app.conversations.find(id);
      // Not echoed: a conversation id may be anything the caller typed.
      if (!conversation) throw new AppError('NOT_FOUND', 'no conversation with this id');
      return { ...conversation, timeline: await app.conversations.timeline(id) };
    },
  );

  app.get<{ Params: Static<typeof GraceParams> }>(
    '/campaigns/:campaignId/graces',
    { config: { scope: 'read' }, schema: { params: GraceParams } },
    async (request) => app.conversations.graces(campaignIdParam(request.params.campaignId)),
  );

  /** Per-campaign grace periods; open conversations' deadlines are recomputed at once. */
  app.put<{ Params: Static<typeof GraceParams>; Body: Static<typeof GraceBody> }>(
    '/campaigns/:campaignId/graces',
    { config: { scope: 'operate' }, schema: { params: GraceParams, body: GraceBody } },
    async (request) => {
      // The conversations were recorded under the canonical id (the projector folds what it reads).
      const campaignId = campaignIdParam(request.params.campaignId);
      const { inboundMs, outboundMs, overdueMs, replyWindowMs = null } = request.body;
      const updated = await app.conversations.setGraces(campaignId, {
        inboundMs,
        outboundMs,
        overdueMs,
        replyWindowMs,
      });
      return { campaignId, inboundMs, outboundMs, overdueMs, replyWindowMs, conversationsUpdated: updated };
    },
  );
}
