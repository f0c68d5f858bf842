import { Type, type Static } from '@sinclair/typebox';
import type { FastifyInstance } from 'fastify';

const CampaignParams = Type.Object({ campaignId: Type.String({ minLength: 1, maxLength: 200 }) });
const PauseBody = Type.Object({ reason: Type.Optional(Type.String({ maxLength: 500 })) });

export default async function campaignRoutes(app: FastifyInstance): Promise<void> {
  app.get<{ Params: Static<typeof CampaignParams> }>(
    '/campaigns/:campaignId',
    { schema: { params: CampaignParams } },
    async (request) => ({
      campaignId: request.params.campaignId,
      ...(await app.sends.campaign(request.params.campaignId)),
    }),
  );

  /** Sends not yet handed to the provider are held, not dropped. */
  app.post<{ Params: Static<typeof CampaignParams>; Body: Static<typeof PauseBody> }>(
    '/campaigns/:campaignId/pause',
    { schema: { params: CampaignParams, body: Type.Optional(PauseBody) } },
    async (request) => {
      await app.sends.pause(request.params.campaignId, request.body?.reason ?? 'paused by an operator');
      return { campaignId: request.params.campaignId, paused: true };
    },
  );

  /** Releases every held send once: each becomes an expired claim the reconciler sends. */
  app.post<{ Params: Static<typeof CampaignParams> }>(
    '/campaigns/:campaignId/resume',
    { schema: { params: CampaignParams } },
    async (request) => {
      const released = await app.sends.resume(request.params.campaignId);
      app.reconciler.wake();
      return { campaignId: request.params.campaignId, paused: false, released };
    },
  );
}
