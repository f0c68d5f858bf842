import { AppError, campaignIdParam } from '@outreach/shared';
import {
  candidateKeyFor,
  canonicalStep,
  emailHash,
  normalizeEmail,
  sendIdFor,
  type EmailHashKey,
} from '@outreach/contracts';
import { Type, type Static } from '@sinclair/typebox';
import type { FastifyInstance } from 'fastify';
import type { SendRow } from '../../adapters/send-rows.js';
import type { SendIdentifiers } from '../../domain/identifiers.js';
import { SEND_STATUSES } from '../../domain/send.js';

const CheckQuery = Type.Object({
  campaignId: Type.String({ minLength: 1, maxLength: 256 }),
  candidateId: Type.String({ minLength: 1, maxLength: 256 }),
  step: Type.String({ minLength: 1, maxLength: 256 }),
  email: Type.Optional(Type.String({ minLength: 3, maxLength: 320 })),
});
const SendParams = Type.Object({ sendId: Type.String({ format: 'uuid' }) });
const ListQuery = Type.Object({
  status: Type.Union(SEND_STATUSES.map((s) => Type.Literal(s))),
  campaignId: Type.Optional(Type.String({ minLength: 1, maxLength: 256 })),
  /** The last sendId of the previous page. */
  after: Type.Optional(Type.String({ format: 'uuid' })),
  limit: Type.Integer({ minimum: 1, maximum: 1000, default: 100 }),
});
const ResolveBody = Type.Object({ resolution: Type.Union([Type.Literal('sent'), Type.Literal('retry')]) });

/**
 * What the API shows of a send: never the address or the body. With an attempt, the Message-ID it
 * went out under (what to look for in the provider's logs); for a send in doubt whose lease still
 * runs, until when a late reply or the lookup's verdict is awaited (a retry is refused until then).
 */
function view(row: SendRow, key: EmailHashKey, ids: { identifiers: SendIdentifiers; domain: string }) {
  // A row from before keyed hashes holds an unsalted SHA-256 (reversible): shown under the key.
  const hashed =
    row.emailHashKeyId === null
      ? { emailHash: emailHash(row.emailNorm, key), emailHashKeyId: key.id }
      : { emailHash: row.emailHash, emailHashKeyId: row.emailHashKeyId };
  return {
    sendId: row.sendId,
    campaignId: row.campaignId,
    candidateKey: row.candidateKey,
    ...hashed,
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
    messageId: row.attempts > 0 ? (ids.identifiers.messageId(row.sendId, ids.domain, row.messageKeyId) ?? null) : null,
    verdictAwaitedUntil:
      row.status === 'ambiguous' && row.leaseExpiresAt !== null && row.leaseExpiresAt.getTime() > Date.now()
        ? row.leaseExpiresAt
        : null,
  };
}

export default async function sendsRoutes(app: FastifyInstance): Promise<void> {
  /**
   * The agent's check before composing an email: has this (campaign, candidate, step), or this
   * address at this step, been sent or claimed already? A cheap pre-check; the claim is the guarantee.
   */
  app.get<{ Querystring: Static<typeof CheckQuery> }>(
    '/sends/check',
    { config: { scope: 'read' }, schema: { querystring: CheckQuery } },
    async (request) => {
      const campaignId = campaignIdParam(request.query.campaignId);
      const step = canonicalStep(request.query.step);
      const { candidateId, email } = request.query;
      // The key the send was filed under: an address given as candidate id is its keyed hash.
      const candidateKey = candidateKeyFor(candidateId, app.emailHashKey);
      const existing = await app.sendQueries.check(
        campaignId,
        candidateKey,
        step,
        email ? normalizeEmail(email) : null,
      );
      return {
        sendId: sendIdFor(campaignId, candidateKey, step),
        alreadySent: existing?.status === 'sent',
        claimed: existing !== undefined,
        existing: existing
          ? view(existing, app.emailHashKey, { identifiers: app.identifiers, domain: app.messageIdDomain })
          : null,
      };
    },
  );

  /** An operator's list: e.g. every ambiguous send to resolve, or the held sends of a paused campaign. */
  app.get<{ Querystring: Static<typeof ListQuery> }>(
    '/sends',
    { config: { scope: 'read' }, schema: { querystring: ListQuery } },
    async (request) => {
      const { status, campaignId, after, limit } = request.query;
      const rows = await app.sendQueries.list({
        status,
        campaignId: campaignId === undefined ? null : campaignIdParam(campaignId),
        after: after ?? null,
        limit,
      });
      return {
        sends: rows.map((row) =>
          view(row, app.emailHashKey, { identifiers: app.identifiers, domain: app.messageIdDomain }),
        ),
        next: rows.length === limit ? (rows.at(-1)?.sendId ?? null) : null,
      };
    },
  );

  app.get<{ Params: Static<typeof SendParams> }>(
    '/sends/:sendId',
    { config: { scope: 'read' }, schema: { params: SendParams } },
    async (request) => {
      const row = await app.sendQueries.find(request.params.sendId);
      if (row) return view(row, app.emailHashKey, { identifiers: app.identifiers, domain: app.messageIdDomain });
      const skipped = await app.sendQueries.findSkipped(request.params.sendId);
      if (skipped) return { ...skipped, status: 'skipped_duplicate' };
      throw new AppError('NOT_FOUND', 'no send with this sendId');
    },
  );

  /** An operator's verdict on an ambiguous send: it went out (`sent`), or it may go again (`retry`). */
  app.post<{ Params: Static<typeof SendParams>; Body: Static<typeof ResolveBody> }>(
    '/sends/:sendId/resolve',
    { config: { scope: 'operate' }, schema: { params: SendParams, body: ResolveBody } },
    async (request) => {
      const result = await app.sendCommands.resolveAmbiguous(request.params.sendId, request.body.resolution);
      if (result === 'not_found') throw new AppError('NOT_FOUND', 'no send with this sendId');
      if (result === 'not_ambiguous') throw new AppError('CONFLICT', 'only an ambiguous send can be resolved');
      if (result === 'verdict_pending') {
        throw new AppError(
          'CONFLICT',
          'the provider may still answer for this send (a late reply is awaited); resolve it as sent, or retry once the wait is over',
        );
      }
      if (result === 'evidence_pending') {
        throw new AppError(
          'CONFLICT',
          "the provider's delivery evidence for this send may still arrive (DELIVERY_EVIDENCE_WINDOW_MS after its last attempt); resolve it as sent, or retry once the window has passed",
        );
      }
      if (request.body.resolution === 'retry') app.reconciler.wake();
      return view((await app.sendQueries.find(request.params.sendId)) as SendRow, app.emailHashKey, {
        identifiers: app.identifiers,
        domain: app.messageIdDomain,
      });
    },
  );
}
