/**
 * The peer protocol of data-subject requests (ADR 014): `POST /subject-parts/export` (scope `read`)
 * and `POST /subject-parts/erase` (scope `erase`), which the planner calls for a service's part of
 * an export or an erasure. One definition for the sender, the experiment and the liveness services;
 * each gives its own part, and may refuse before it runs (`ready`: throw an AppError).
 */
import type { FastifyInstance } from 'fastify';
import {
  SubjectPartEraseAnswer,
  SubjectPartEraseBody,
  SubjectPartExportBody,
  type SubjectPartExportAnswer,
} from '../subjects.js';

export interface SubjectPart {
  exportPart(body: SubjectPartExportBody): Promise<SubjectPartExportAnswer>;
  erase(body: SubjectPartEraseBody): Promise<SubjectPartEraseAnswer>;
}

export function registerSubjectPartRoutes(
  app: FastifyInstance,
  part: SubjectPart,
  ready: () => void = () => undefined,
): void {
  app.post(
    '/subject-parts/export',
    { config: { scope: 'read' }, schema: { body: SubjectPartExportBody } },
    async (request) => {
      ready();
      return part.exportPart(request.body as SubjectPartExportBody);
    },
  );
  app.post(
    '/subject-parts/erase',
    { config: { scope: 'erase' }, schema: { body: SubjectPartEraseBody, response: { 200: SubjectPartEraseAnswer } } },
    async (request) => {
      ready();
      return part.erase(request.body as SubjectPartEraseBody);
    },
  );
}
