import { AppError, emailHash, normalizeEmail } from '@outreach/shared';
import { Type, type Static } from '@sinclair/typebox';
import type { FastifyInstance } from 'fastify';

const EmailParams = Type.Object({
  email: Type.String({ minLength: 3, maxLength: 254, pattern: '^[^\\s@]+@[^\\s@]+$' }),
});
const SuppressBody = Type.Object({
  reason: Type.Union([
    Type.Literal('unsubscribe'),
    Type.Literal('bounce'),
    Type.Literal('complaint'),
    Type.Literal('manual'),
  ]),
  note: Type.Optional(Type.String({ maxLength: 500 })),
});

/** The suppression list, by normalized address; checked before every send. */
export default async function suppressionRoutes(app: FastifyInstance): Promise<void> {
  app.put<{ Params: Static<typeof EmailParams>; Body: Static<typeof SuppressBody> }>(
    '/suppressions/:email',
    { schema: { params: EmailParams, body: SuppressBody } },
    async (request) => {
      const emailNorm = normalizeEmail(request.params.email);
      await app.sends.suppress(emailNorm, request.body.reason, request.body.note ?? null);
      return { emailHash: emailHash(emailNorm), suppressed: true, reason: request.body.reason };
    },
  );

  app.get<{ Params: Static<typeof EmailParams> }>(
    '/suppressions/:email',
    { schema: { params: EmailParams } },
    async (request) => {
      const emailNorm = normalizeEmail(request.params.email);
      const suppression = await app.sends.suppression(emailNorm);
      if (!suppression) throw new AppError('NOT_FOUND', 'address is not suppressed');
      return { emailHash: emailHash(emailNorm), suppressed: true, ...suppression };
    },
  );

  app.delete<{ Params: Static<typeof EmailParams> }>(
    '/suppressions/:email',
    { schema: { params: EmailParams } },
    async (request) => {
      if (!(await app.sends.unsuppress(normalizeEmail(request.params.email))))
        throw new AppError('NOT_FOUND', 'address is not suppressed');
      return { suppressed: false };
    },
  );
}
