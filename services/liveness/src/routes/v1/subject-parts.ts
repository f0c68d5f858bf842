import { registerSubjectPartRoutes } from '@outreach/shared';
import type { FastifyInstance } from 'fastify';
import { SubjectsRepository } from '../../adapters/subjects-repository.js';

/**
 * The planner's calls for this service's part of a data subject's export and erasure (ADR 014);
 * not for people: GET/POST /v1/subjects on the planner is the API.
 */
export default async function subjectPartRoutes(app: FastifyInstance): Promise<void> {
  registerSubjectPartRoutes(app, new SubjectsRepository(app.pg));
}
