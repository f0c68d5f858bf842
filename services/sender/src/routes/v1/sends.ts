import { AppError, normalizeCandidateKey, normalizeEmail, sendIdFor } from '@outreach/shared';
import { Type, type Static } from '@sinclair/typebox';
import type { FastifyInstance } from 'fastify';
import type { SendRow } from '../../adapters/sends-repository.js';

const CheckQuery = Type.Object({
  campaignId: Type.String({ minLength: 1 }),
  candidateId: Type.String({ minLength: 1 }),
  step: Type.String({ minLength: 1 }),
  email: Type.Optional(Type.String({ minLength: 3 })),
});
const SendParams = Type.Object({ sendId: Type.String({ format: 'uuid' }) });
const ListQuery = Type.Object({
  status: Type.Union(
    (['claimed', 'sending', 'sent', 'suppressed', 'failed', 'ambiguous', 'held'] as const).map((s) => Type.Literal(s)),
  ),
  campaignId: Type.Optional(Type.String({ minLength: 1 })),
  /** The last sendId of the previous page. */
  after: Type.Optional(Type.String({ format: 'uuid' })),
  limit: Type.Integer({ minimum: 1, maximum: 1000, default: 100 }),
});
const ResolveBody = Type.Object({ resolution: Type.Union([Type.Literal('sent'), Type.Literal('retry')]) });

/** What the API shows of a send: never the address or the body. */
function view(row: SendRow) {
  return {
    sendId: row.sendId,
    campaignId: row.campaignId,
    candidateKey: row.candidateKey,
    emailHash: row.emailHash,
    step: row.step,
    experimentId: row.experimentId,
    variant: row.variant,
    status: row.status,
    reason: row.reason,
    source: row.source,
    attempts: row.attempts,
    providerMessageId: row.providerMessageId,
    claimedAt: row.claimedAt,
    sentAt: row.sentAt,
    updatedAt: row.updatedAt,
  };
}

export default async function sendsRoutes(app: FastifyInstance): Promise<void> {
  /**
   * The agent's check before composing an email: has this (campaign, candidate, step), or this
   * address at this step, been sent or claimed already? A cheap pre-check; the claim is the guarantee.
   */
  app.get<{ Querystring: Static<typeof CheckQuery> }>(
    '/sends/check',
    { schema: { querystring: CheckQuery } },
    async (request) => {
      const { campaignId, candidateId, step, email } = request.query;
      const candidateKey = normalizeCandidateKey(candidateId);
      const existing = await app.sends.check(campaignId, candidateKey, step, email ? normalizeEmail(email) : null);
      return {
        sendId: sendIdFor(campaignId, candidateKey, step),
        alreadySent: existing?.status === 'sent',
        claimed: existing !== undefined,
        existing: existing ? view(existing) : null,
      };
    },
  );

  /** An operator's list: e.g. every ambiguous send to resolve, or the held sends of a paused campaign. */
  app.get<{ Querystring: Static<typeof ListQuery> }>(
    '/sends',
    { schema: { querystring: ListQuery } },
    async (request) => {
      const { status, campaignId, after, limit } = request.query;
      const rows = await app.sends.list({ status, campaignId: campaignId ?? null, after: after ?? null, limit });
      return { sends: rows.map(view), next: rows.length === limit ? (rows.at(-1)?.sendId ?? null) : null };
    },
  );

  app.get<{ Params: Static<typeof SendParams> }>(
    '/sends/:sendId',
    { schema: { params: SendParams } },
    async (request) => {
      const row = await app.sends.find(request.params.sendId);
      if (row) return view(row);
      const skipped = await app.sends.findSkipped(request.params.sendId);
      if (skipped) return { ...skipped, status: 'skipped_duplicate' };
      throw new AppError('NOT_FOUND', `no send ${request.params.sendId}`);
    },
  );

  /** An operator's verdict on an ambiguous send: it went out (`sent`), or it may go again (`retry`). */
  app.post<{ Params: Static<typeof SendParams>; Body: Static<typeof ResolveBody> }>(
    '/sends/:sendId/resolve',
    { schema: { params: SendParams, body: ResolveBody } },
    async (request) => {
      const result = await app.sends.resolveAmbiguous(request.params.sendId, request.body.resolution);
      if (result === 'not_found') throw new AppError('NOT_FOUND', `no send ${request.params.sendId}`);
      if (result === 'not_ambiguous') throw new AppError('CONFLICT', 'only an ambiguous send can be resolved');
      if (request.body.resolution === 'retry') app.reconciler.wake();
      return view((await app.sends.find(request.params.sendId)) as SendRow);
    },
  );
}
