import { campaignIdParam } from '@outreach/shared';
import { Type, type Static } from '@sinclair/typebox';
import type { FastifyInstance } from 'fastify';

const DuplicatesQuery = Type.Object({ campaignId: Type.Optional(Type.String({ minLength: 1, maxLength: 256 })) });

export default async function reportRoutes(app: FastifyInstance): Promise<void> {
  /**
   * Deliveries to the same candidate, or the same address, within one campaign step: from the sent
   * log and from imported provider history. Live sends cannot produce any (the constraints forbid
   * it); imported history shows what happened before. Each group lists its deliveries (time and
   * source: `live` or `backfill`) and their window (first, last, the span in ms).
   */
  app.get<{ Querystring: Static<typeof DuplicatesQuery> }>(
    '/reports/duplicates',
    { config: { scope: 'read' }, schema: { querystring: DuplicatesQuery } },
    async (request) => {
      const { campaignId } = request.query;
      const duplicates = await app.reports.duplicates(campaignId === undefined ? null : campaignIdParam(campaignId));
      return { duplicates, total: duplicates.length };
    },
  );
}
