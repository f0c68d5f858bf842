import { campaignIdParam } from '@outreach/shared';
import { Type, type Static } from '@sinclair/typebox';
import type { FastifyInstance } from 'fastify';

const CampaignParams = Type.Object({ campaignId: Type.String({ minLength: 1, maxLength: 256 }) });
/**
 * `Camp-1` and `camp-1 ` are one campaign: the id the sends were recorded under. An id that holds an
 * address is a 400: no send is recorded under one (and a paused campaign becomes a metric label).
 */
const campaignIdOf = (params: Static<typeof CampaignParams>) => campaignIdParam(params.campaignId);
const PauseBody = Type.Object({ reason: Type.Optional(Type.String({ maxLength: 500 })) });

const ListQuery = Type.Object({
  /** The last campaign id of the previous page (the `next` it gave). */
  after: Type.Optional(Type.String({ maxLength: 256 })),
  limit: Type.Integer({ minimum: 1, maximum: 100, default: 50 }),
  /** Only the paused campaigns. */
  paused: Type.Optional(Type.Boolean()),
});

export default async function campaignRoutes(app: FastifyInstance): Promise<void> {
  /**
   * Campaigns in id order, a page at a time: pause and reason (an auto-pause's included), sends by
   * status, held sends, and the provider error rate over the auto-pause window.
   */
  app.get<{ Querystring: Static<typeof ListQuery> }>(
    '/campaigns',
    { config: { scope: 'read' }, schema: { querystring: ListQuery } },
    async (request) => {
      const { after, limit, paused } = request.query;
      const campaigns = await app.campaigns.list(after ?? '', limit, paused === true);
      return { campaigns, next: campaigns.length === limit ? (campaigns.at(-1)?.campaignId ?? null) : null };
    },
  );

  app.get<{ Params: Static<typeof CampaignParams> }>(
    '/campaigns/:campaignId',
    { config: { scope: 'read' }, schema: { params: CampaignParams } },
    async (request) => ({
      campaignId: campaignIdOf(request.params),
      ...(await app.campaigns.campaign(campaignIdOf(request.params))),
    }),
  );

  /** Sends not yet handed to the provider are held, not dropped. */
  app.post<{ Params: Static<typeof CampaignParams>; Body: Static<typeof PauseBody> }>(
    '/campaigns/:campaignId/pause',
    { config: { scope: 'operate' }, schema: { params: CampaignParams, body: Type.Optional(PauseBody) } },
    async (request) => {
      await app.campaigns.pause(campaignIdOf(request.params), request.body?.reason ?? 'paused by an operator');
      return { campaignId: campaignIdOf(request.params), paused: true };
    },
  );

  /** Releases every held send once: each becomes an expired claim the reconciler sends. */
  app.post<{ Params: Static<typeof CampaignParams> }>(
    '/campaigns/:campaignId/resume',
    { config: { scope: 'operate' }, schema: { params: CampaignParams } },
    async (request) => {
      const released = await app.campaigns.resume(campaignIdOf(request.params));
      app.reconciler.wake();
      return { campaignId: campaignIdOf(request.params), paused: false, released };
    },
  );
}
