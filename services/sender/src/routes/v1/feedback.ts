/**
 * Bounces and complaints taken in (workflow/feedback-intake.ts decides and applies):
 *
 *   POST /v1/feedback/ses       SES notifications through SNS. `public`: the SNS signature (topic
 *                               allow-list, SNS's certificate host) is what authenticates. 404 while
 *                               SES_SNS_TOPIC_ARNS is empty.
 *   POST /v1/feedback/sendgrid  The SendGrid Signed Event Webhook. `public`: the ECDSA signature over
 *                               timestamp + raw body authenticates. 404 without a verification key.
 *   POST /v1/feedback/mailgun   Mailgun's webhooks, one event each. `public`: the HMAC of timestamp +
 *                               token under the webhook signing key authenticates, and each token is
 *                               taken once (adapters/feedback/mailgun-intake.ts: the signature does
 *                               not cover the event). 404 without a signing key.
 *   POST /v1/feedback/dsn       One message from the bounce mailbox, as an inbound mail hook delivers
 *                               it (message/rfc822). Scope `dsn`, the hook's own: its token lives in
 *                               a mail system outside the platform, so it must not be one that also
 *                               stops sending or lifts suppressions (`operate`). Mail is
 *                               unauthenticated, so a DSN acts only on a send of ours to that
 *                               recipient, named by a Message-ID or ENVID whose MAC verifies.
 *
 * Signatures are over the bytes as sent, so in this file's scope every body is kept as received
 * (never parsed as JSON first), up to FEEDBACK_MAX_BODY_BYTES (the SES route: what an SNS delivery
 * can be, SNS_MAX_BODY_BYTES; the Mailgun route: one event, DEFAULT_MAILGUN_LIMITS; larger is 413),
 * and its JSON depth is bounded before it is parsed (Mailgun's signature is inside the body).
 * The webhooks' rate limits are counted after the signature check (credentialRateLimit): a verified
 * delivery in its message's own bucket, anything else in the client address's, so garbage never
 * uses up what SNS, SendGrid and Mailgun need. Answers: 400 unreadable, 403 refused signature or
 * origin (and a Mailgun token taken before), 413 too large, 422 mail that is no DSN, 429 a client
 * whose requests keep being refused, 503 (retried by SNS, SendGrid and Mailgun) when a dependency
 * says later or one message is delivered too often; 200 with counts, never an address.
 */
import { createHash } from 'node:crypto';
import { AppError } from '@outreach/shared';
import type { FastifyInstance, FastifyRequest } from 'fastify';
import type { FeedbackTaken } from '../../workflow/feedback-intake.js';
import {
  DEFAULT_DSN_LIMITS,
  DEFAULT_SENDGRID_LIMITS,
  parseDeliveryStatusNotification,
  receiveSendGridWebhook,
  SENDGRID_SIGNATURE_HEADER,
  SENDGRID_TIMESTAMP_HEADER,
  type DeliveryFeedback,
} from '../../domain/feedback/index.js';

/**
 * The body as received. A class with a private field, not a Buffer: the shared preHandler walks the
 * body's own properties for unstorable values, and a Buffer has one per byte.
 */
class RawBody {
  readonly #bytes: Buffer;
  constructor(bytes: Buffer) {
    this.#bytes = bytes;
  }
  get bytes(): Buffer {
    return this.#bytes;
  }
}

const bytesOf = (request: FastifyRequest): Buffer =>
  request.body instanceof RawBody ? request.body.bytes : Buffer.alloc(0);

const headerValue = (request: FastifyRequest, name: string): string | undefined => {
  const value = request.headers[name];
  return typeof value === 'string' ? value : undefined;
};

function summary(received: number, ignoredEntries: number, applied: FeedbackTaken) {
  return {
    received,
    new: applied.fresh.size,
    suppressed: applied.suppressed,
    softBounced: applied.softBounced.length,
    ignored: ignoredEntries + applied.ignored,
    unverified: applied.unverified,
  };
}

export default async function feedbackRoutes(app: FastifyInstance): Promise<void> {
  const { maxBodyBytes, maxSnsBodyBytes, maxMailgunBodyBytes } = app.feedback;
  app.removeAllContentTypeParsers();
  app.addContentTypeParser('*', { parseAs: 'buffer', bodyLimit: maxBodyBytes }, (_request, body, done) =>
    done(null, new RawBody(body as Buffer)),
  );
  const take = (events: readonly DeliveryFeedback[], request: FastifyRequest) =>
    app.feedback.intake.take(events, request.id);

  app.post('/feedback/ses', { config: { scope: 'public' }, bodyLimit: maxSnsBodyBytes }, async (request, reply) => {
    const { ses } = app.feedback;
    const limit = app.publicRateLimit.ses;
    if (!ses) {
      await limit.unverified(request, reply);
      throw new AppError('NOT_FOUND', 'SES feedback intake is not configured');
    }
    const result = await ses.receive(bytesOf(request), new Date());
    if (result.kind === 'invalid' || result.kind === 'refused') await limit.unverified(request, reply);
    else await limit.verified(request, reply, result.kind === 'feedback' ? result.snsMessageId : result.topicArn);
    switch (result.kind) {
      case 'invalid':
        throw new AppError('BAD_REQUEST', result.reason);
      case 'refused':
        request.log.warn({ reason: result.reason }, 'SES feedback refused');
        throw new AppError('FORBIDDEN', result.reason);
      case 'feedback':
        return summary(result.events.length, result.ignored, await take(result.events, request));
      case 'subscribed':
      case 'unsubscribed':
        request.log.info({ topicArn: result.topicArn, kind: result.kind }, 'SNS subscription message');
        return { [result.kind]: true };
      case 'subscription':
        // Only with confirmation turned off: an operator opens the URL (docs/operations.md).
        request.log.warn(
          { topicArn: result.topicArn, confirmationUrl: result.confirmationUrl },
          'SNS subscription to confirm',
        );
        return { subscribed: false };
      default: {
        const exhaustive: never = result;
        throw new Error(`unexpected SNS intake result ${JSON.stringify(exhaustive)}`);
      }
    }
  });

  app.post('/feedback/sendgrid', { config: { scope: 'public' }, bodyLimit: maxBodyBytes }, async (request, reply) => {
    const publicKey = app.feedback.sendGridKey;
    const limit = app.publicRateLimit.sendgrid;
    if (!publicKey) {
      await limit.unverified(request, reply);
      throw new AppError('NOT_FOUND', 'SendGrid feedback intake is not configured');
    }
    const signature = headerValue(request, SENDGRID_SIGNATURE_HEADER);
    const result = receiveSendGridWebhook(
      {
        body: bytesOf(request),
        signature,
        timestamp: headerValue(request, SENDGRID_TIMESTAMP_HEADER),
      },
      { publicKey, now: new Date(), limits: { ...DEFAULT_SENDGRID_LIMITS, maxBytes: maxBodyBytes } },
    );
    // A verified batch is named by what was signed (timestamp and body), never by the signature as
    // spelled: an ECDSA signature verifies as (r, n - s) too, and base64 without its padding or with
    // the last character's unused bits set decodes the same, so one signed batch had 9 to 40 names,
    // each a fresh bucket for its replays.
    if (result.kind === 'refused' || result.kind === 'invalid') await limit.unverified(request, reply);
    else
      await limit.verified(
        request,
        reply,
        createHash('sha256')
          .update(headerValue(request, SENDGRID_TIMESTAMP_HEADER) ?? '')
          .update('\n')
          .update(bytesOf(request))
          .digest('base64url'),
      );
    if (result.kind === 'refused') {
      request.log.warn({ reason: result.reason }, 'SendGrid feedback refused');
      throw new AppError('FORBIDDEN', result.reason);
    }
    if (result.kind === 'invalid') throw new AppError('BAD_REQUEST', result.reason);
    return summary(result.events.length, result.ignored, await take(result.events, request));
  });

  app.post(
    '/feedback/mailgun',
    { config: { scope: 'public' }, bodyLimit: maxMailgunBodyBytes },
    async (request, reply) => {
      const { mailgun } = app.feedback;
      const limit = app.publicRateLimit.mailgun;
      if (!mailgun) {
        await limit.unverified(request, reply);
        throw new AppError('NOT_FOUND', 'Mailgun feedback intake is not configured');
      }
      const now = new Date();
      const result = mailgun.receive(bytesOf(request), now);
      // A verified delivery is named by what Mailgun signed (timestamp and token): a captured pair
      // replayed with other events, or its signature spelled otherwise, counts in that one bucket.
      if (result.kind !== 'ok') await limit.unverified(request, reply);
      else
        await limit.verified(
          request,
          reply,
          createHash('sha256')
            .update(result.signed.timestamp)
            .update('\n')
            .update(result.signed.token)
            .digest('base64url'),
        );
      if (result.kind === 'refused') {
        request.log.warn({ reason: result.reason }, 'Mailgun feedback refused');
        throw new AppError('FORBIDDEN', result.reason);
      }
      if (result.kind === 'invalid') throw new AppError('BAD_REQUEST', result.reason);
      const claim = mailgun.claim(result.signed, now);
      if (claim === 'replayed') {
        request.log.warn({ reason: 'token taken before' }, 'Mailgun feedback refused');
        throw new AppError('FORBIDDEN', 'Mailgun signature token already used');
      }
      if (claim === 'full')
        throw new AppError('UNAVAILABLE', 'too many Mailgun deliveries within the replay window; retry later');
      try {
        return summary(result.events.length, result.ignored, await take(result.events, request));
      } catch (error) {
        // Not taken: Mailgun's retry of this delivery may carry the same token.
        mailgun.release(result.signed);
        throw error;
      }
    },
  );

  app.post('/feedback/dsn', { config: { scope: 'dsn' }, bodyLimit: maxBodyBytes }, async (request) => {
    const result = parseDeliveryStatusNotification(
      bytesOf(request),
      { now: new Date() },
      { ...DEFAULT_DSN_LIMITS, maxBytes: maxBodyBytes },
    );
    if (result.kind === 'invalid') throw new AppError('UNPROCESSABLE', `not a usable DSN: ${result.reason}`);
    return summary(result.events.length, result.ignored, await take(result.events, request));
  });
}
