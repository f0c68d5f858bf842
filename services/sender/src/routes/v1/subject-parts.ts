import { AppError, registerSubjectPartRoutes } from '@outreach/shared';
import type { FastifyInstance } from 'fastify';

/**
 * The planner's calls for the sender's part of a data subject's export and erasure (ADR 014; the
 * API is the planner's /v1/subjects). Addresses come in the body only.
 */
export default async function subjectPartRoutes(app: FastifyInstance): Promise<void> {
  registerSubjectPartRoutes(
    app,
    { exportPart: (body) => app.subjects.exportPart(body), erase: (body) => app.subjects.erase(body) },
    () => {
      if (!app.subjects.configured)
        throw new AppError('UNAVAILABLE', 'no suppression key: set SUPPRESSION_KEY_FILE (docs/operations.md)');
    },
  );
}
