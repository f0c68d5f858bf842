import { Type, type Static } from '@sinclair/typebox';
import type { FastifyInstance } from 'fastify';

const SendingBody = Type.Object({
  paused: Type.Boolean(),
  reason: Type.Optional(Type.String({ maxLength: 500 })),
});

/**
 * The global kill switch (docs/operations.md, "Stopping all sending"): one call stops every send of
 * every campaign on every replica. Sends not yet past the fence are held, never dropped; turning it
 * off releases each held send once (except those of campaigns paused on their own).
 */
export default async function sendingRoutes(app: FastifyInstance): Promise<void> {
  app.get('/sending', { config: { scope: 'read' } }, async () => app.killSwitch.get());

  /**
   * Answers once the switch holds on every replica: `inFlight` sends were already past the fence
   * and may still be delivered (listed by `GET /v1/sends?status=sending`); no other will be.
   */
  app.put<{ Body: Static<typeof SendingBody> }>(
    '/sending',
    { config: { scope: 'operate' }, schema: { body: SendingBody } },
    async (request) => {
      const { paused, reason } = request.body;
      const change = await app.killSwitch.set(
        paused,
        reason ?? (paused ? 'paused by an operator' : null),
        'operator (PUT /v1/sending)',
      );
      if (change.released > 0) app.reconciler.wake();
      return change;
    },
  );
}
