import { SubjectPartEraseAnswer, SubjectPartEraseBody, SubjectPartExportBody } from '@outreach/shared';
import type { FastifyInstance } from 'fastify';
import { SubjectsRepository } from '../../adapters/subjects-repository.js';

/**
 * The planner's calls for this service's part of a data subject's export and erasure (ADR 014);
 * not for people: GET/POST /v1/subjects on the planner is the API.
 */
export default async function subjectPartRoutes(app: FastifyInstance): Promise<void> {
  const subjects = new SubjectsRepository(app.pg);
  app.post(
    '/subject-parts/export',
    { config: { scope: 'read' }, schema: { body: SubjectPartExportBody } },
    async (request) => subjects.exportPart(request.body as SubjectPartExportBody),
  );
  app.post(
    '/subject-parts/erase',
    { config: { scope: 'erase' }, schema: { body: SubjectPartEraseBody, response: { 200: SubjectPartEraseAnswer } } },
    async (request) => subjects.erase(request.body as SubjectPartEraseBody),
  );
}
