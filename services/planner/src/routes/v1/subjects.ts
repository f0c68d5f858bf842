import { Readable } from 'node:stream';
import { AppError, MAX_SUBJECT_PAGE } from '@outreach/shared';
import { Type, type Static } from '@sinclair/typebox';
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { STORES, type Store, type SubjectName } from '../../workflow/subjects.js';

const CandidateParams = Type.Object({ candidateId: Type.String({ minLength: 1, maxLength: 256 }) });
const ExportQuery = Type.Object(
  {
    limit: Type.Integer({ minimum: 1, maximum: MAX_SUBJECT_PAGE, default: 100 }),
    /** One part only, from its `next` page. */
    part: Type.Optional(Type.Unsafe<Store>({ type: 'string', enum: [...STORES] })),
    page: Type.Integer({ minimum: 0, maximum: 1_000_000, default: 0 }),
  },
  { additionalProperties: false },
);
const Email = Type.String({ minLength: 3, maxLength: 320 });
const SearchBody = Type.Object(
  {
    email: Email,
    limit: Type.Optional(Type.Integer({ minimum: 1, maximum: MAX_SUBJECT_PAGE })),
    part: Type.Optional(Type.Unsafe<Store>({ type: 'string', enum: [...STORES] })),
    page: Type.Optional(Type.Integer({ minimum: 0, maximum: 1_000_000 })),
  },
  { additionalProperties: false },
);
const EraseByAddressBody = Type.Object({ email: Email }, { additionalProperties: false });
const StoreErasure = Type.Object({
  status: Type.Union([Type.Literal('erased'), Type.Literal('already_erased'), Type.Literal('not_found')]),
  rows: Type.Record(Type.String(), Type.Integer()),
});
const ErasureReport = Type.Object({
  requestId: Type.String({ format: 'uuid', description: 'The audit row (subject_requests.id)' }),
  stores: Type.Object(Object.fromEntries(STORES.map((s) => [s, StoreErasure]))),
  inFlight: Type.Object({
    windowMs: Type.Integer({
      description: 'SUBJECT_IN_FLIGHT_WINDOW_MS: how long a request made before the erasure may still be on its way',
    }),
    note: Type.String(),
  }),
});

/** The caller's bearer token, which access control has already verified (the audit hashes it). */
function tokenOf(request: FastifyRequest): string {
  return /Bearer +(\S+)/i.exec(request.headers.authorization ?? '')?.[1] ?? '';
}

/**
 * Data-subject requests (ADR 014, docs/operations.md "Data-subject requests"): export with `read`,
 * erasure with `erase`. An address goes in a body only, never in a URL.
 */
export default async function subjectRoutes(app: FastifyInstance): Promise<void> {
  const subjects = () => {
    if (!app.subjectRequests)
      throw new AppError('UNAVAILABLE', 'no suppression key: set SUPPRESSION_KEY_FILE (docs/operations.md)');
    return app.subjectRequests;
  };
  const exportOf = async (
    request: FastifyRequest,
    reply: FastifyReply,
    name: SubjectName,
    options: Static<typeof ExportQuery>,
  ) => {
    const document = await subjects().exportDocument(name, subjects().actorOf(tokenOf(request)), {
      limit: options.limit,
      page: options.page,
      ...(options.part ? { only: options.part } : {}),
    });
    reply.header('cache-control', 'no-store');
    return reply.type('application/json').send(Readable.from(document));
  };

  app.get(
    '/subjects/:candidateId',
    { config: { scope: 'read' }, schema: { params: CandidateParams, querystring: ExportQuery } },
    async (request, reply) => {
      const { candidateId } = request.params as Static<typeof CandidateParams>;
      return exportOf(request, reply, { candidateId }, request.query as Static<typeof ExportQuery>);
    },
  );
  app.post('/subjects/search', { config: { scope: 'read' }, schema: { body: SearchBody } }, async (request, reply) => {
    const body = request.body as Static<typeof SearchBody>;
    return exportOf(
      request,
      reply,
      { email: body.email },
      { limit: body.limit ?? 100, page: body.page ?? 0, ...(body.part ? { part: body.part } : {}) },
    );
  });
  app.post(
    '/subjects/:candidateId/erase',
    { config: { scope: 'erase' }, schema: { params: CandidateParams, response: { 200: ErasureReport } } },
    async (request) => {
      const { candidateId } = request.params as Static<typeof CandidateParams>;
      return subjects().erase({ candidateId }, subjects().actorOf(tokenOf(request)));
    },
  );
  app.post(
    '/subjects/erase',
    { config: { scope: 'erase' }, schema: { body: EraseByAddressBody, response: { 200: ErasureReport } } },
    async (request) => {
      const { email } = request.body as Static<typeof EraseByAddressBody>;
      return subjects().erase({ email }, subjects().actorOf(tokenOf(request)));
    },
  );
}
