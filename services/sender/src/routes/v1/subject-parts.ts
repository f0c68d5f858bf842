import { AppError, SubjectPartEraseAnswer, SubjectPartEraseBody, SubjectPartExportBody } from '@outreach/shared';
import type { FastifyInstance } from 'fastify';

/**
 * The planner's calls for the sender's part of a data subject's export and erasure (ADR 014; the
 * API is the planner's /v1/subjects). Addresses come in the body only.
 */
export default async function subjectPartRoutes(app: FastifyInstance): Promise<void> {
  const configured = () => {
    if (!app.subjects.configured)
      throw new AppError('UNAVAILABLE', 'no suppression key: set SUPPRESSION_KEY_FILE (docs/operations.md)');
  };
  app.post(
    '/subject-parts/export',
    { config: { scope: 'read' }, schema: { body: SubjectPartExportBody } },
    async (request) => {
      configured();
      return app.subjects.exportPart(request.body as SubjectPartExportBody);
    },
  );
  app.post(
    '/subject-parts/erase',
    { config: { scope: 'erase' }, schema: { body: SubjectPartEraseBody, response: { 200: SubjectPartEraseAnswer } } },
    async (request) => {
      configured();
      return app.subjects.erase(request.body as SubjectPartEraseBody);
    },
  );
}
