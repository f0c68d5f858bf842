import { AppError } from '@outreach/shared';
import { canonicalAddress, emailHash, normalizeEmail } from '@outreach/contracts';
import { Type, type Static } from '@sinclair/typebox';
import type { FastifyInstance } from 'fastify';
import { SUPPRESSION_REASONS } from '../../domain/suppression.js';

const EmailParams = Type.Object({
  email: Type.String({ minLength: 3, maxLength: 254, pattern: '^[^\\s@]+@[^\\s@]+$' }),
});
const SuppressBody = Type.Object({
  reason: Type.Union(SUPPRESSION_REASONS.map((reason) => Type.Literal(reason))),
  note: Type.Optional(Type.String({ maxLength: 500 })),
});

/**
 * The suppression list, by canonical address (the same form sends are checked with: IDNA domain,
 * lower case, invisible characters removed; plus-tags kept, see schemas/README.md "Keys").
 */
export default async function suppressionRoutes(app: FastifyInstance): Promise<void> {
  const hashOf = (emailNorm: string) => ({
    emailHash: emailHash(emailNorm, app.emailHashKey),
    emailHashKeyId: app.emailHashKey.id,
  });
  app.put<{ Params: Static<typeof EmailParams>; Body: Static<typeof SuppressBody> }>(
    '/suppressions/:email',
    { config: { scope: 'operate' }, schema: { params: EmailParams, body: SuppressBody } },
    async (request) => {
      // Only an address a send could have: anything else would be stored and never match.
      const address = canonicalAddress(request.params.email);
      if (!address) throw new AppError('BAD_REQUEST', 'email is not a deliverable address');
      // A new entry, or a new reason, publishes AddressSuppressed (source api); a note edit does not.
      await app.suppressions.suppress({
        emailNorm: address.norm,
        reason: request.body.reason,
        source: 'api',
        note: request.body.note ?? null,
        sendId: null,
        campaignId: null,
        correlationId: request.id,
        replace: true,
      });
      return { ...hashOf(address.norm), suppressed: true, reason: request.body.reason };
    },
  );

  app.get<{ Params: Static<typeof EmailParams> }>(
    '/suppressions/:email',
    { config: { scope: 'read' }, schema: { params: EmailParams } },
    async (request) => {
      const emailNorm = normalizeEmail(request.params.email);
      const suppression = await app.suppressions.suppression(emailNorm);
      if (!suppression) throw new AppError('NOT_FOUND', 'address is not suppressed');
      return { ...hashOf(emailNorm), suppressed: true, ...suppression };
    },
  );

  app.delete<{ Params: Static<typeof EmailParams> }>(
    '/suppressions/:email',
    { config: { scope: 'operate' }, schema: { params: EmailParams } },
    async (request) => {
      const lifted = await app.suppressions.unsuppress(normalizeEmail(request.params.email));
      if (!lifted.plain && !lifted.hashed) throw new AppError('NOT_FOUND', 'address is not suppressed');
      // The audit line: what was lifted, never the address (an erased person's is a hash only).
      request.log.info({ audit: 'suppression_lifted', ...lifted }, 'suppression lifted');
      return { suppressed: false };
    },
  );
}
