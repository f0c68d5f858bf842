import { Type, type Static } from '@sinclair/typebox';
import type { FastifyInstance } from 'fastify';

const DuplicatesQuery = Type.Object({ campaignId: Type.Optional(Type.String({ minLength: 1 })) });

export default async function reportRoutes(app: FastifyInstance): Promise<void> {
  /**
   * Deliveries to the same candidate, or the same address, within one campaign step: from the sent
   * log and from imported provider history. Live sends cannot produce any (the constraints forbid
   * it); imported history shows what happened before.
   */
  app.get<{ Querystring: Static<typeof DuplicatesQuery> }>(
    '/reports/duplicates',
    { schema: { querystring: DuplicatesQuery } },
    async (request) => {
      const duplicates = await app.sends.duplicates(request.query.campaignId ?? null);
      return { duplicates, total: duplicates.length };
    },
  );
}
