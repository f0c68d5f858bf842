import type { KeyObject } from 'node:crypto';
import { AppError, clientRateLimit, type Logger } from '@outreach/shared';
import type { FastifyInstance, onRequestAsyncHookHandler } from 'fastify';
import fp from 'fastify-plugin';
import { SnsCertificateCache } from '../adapters/feedback/sns-certificates.js';
import { SnsFeedbackIntake } from '../adapters/feedback/sns-intake.js';
import { FeedbackRepository } from '../adapters/feedback-repository.js';
import { SharedErrorWindow } from '../adapters/incident-controls.js';
import { sendGridWebhookKey, sesTopicArns, type Config } from '../config.js';
import { DEFAULT_SNS_TIME_WINDOW } from '../domain/feedback/index.js';
import { unsubscribeKey } from '../domain/unsubscribe-token.js';
import { FeedbackIntake } from '../workflow/feedback-intake.js';
import { Unsubscribes } from '../workflow/unsubscribe.js';

export interface FeedbackWiring {
  readonly intake: FeedbackIntake;
  /** Off (undefined) while SES_SNS_TOPIC_ARNS is empty. */
  readonly ses: SnsFeedbackIntake | undefined;
  /** Off (undefined) while no SendGrid verification key is configured. */
  readonly sendGridKey: KeyObject | undefined;
  readonly maxBodyBytes: number;
}

declare module 'fastify' {
  interface FastifyInstance {
    /** Bounce and complaint intake (routes/v1/feedback.ts). */
    readonly feedback: FeedbackWiring;
    /** One-click unsubscribes (routes/v1/unsubscribe.ts). */
    readonly unsubscribes: Unsubscribes;
    /** The address people write to when a link fails (UNSUBSCRIBE_MAILTO). */
    readonly unsubscribeMailto: string;
    /**
     * Per client address limits for the routes anyone may call (clientRateLimit). A person's browser
     * or mail client is told 429; a provider's webhook 503, which SNS and SendGrid retry (SNS drops a
     * 4xx for good).
     */
    readonly publicRateLimit: {
      readonly person: onRequestAsyncHookHandler;
      readonly webhook: onRequestAsyncHookHandler;
    };
  }
}

/** Wires unsubscribes and delivery feedback: tokens, SNS and SendGrid verification, intake, limits. */
export default fp(
  async (app: FastifyInstance, { config }: { config: Config }) => {
    const topicArns = sesTopicArns(config);
    const sendGridKey = sendGridWebhookKey(config);
    const logger = app.log.child({ component: 'feedback' }) as Logger;
    const intake = new FeedbackIntake({
      repository: new FeedbackRepository(app.pg, app.suppressions, app.emailHashKey),
      sends: app.sendQueries,
      errorWindow: new SharedErrorWindow(app.pg, config.AUTO_PAUSE_WINDOW_MS),
      messageIdDomain: config.MESSAGE_ID_DOMAIN,
      identifiers: app.identifiers,
      logger,
      metrics: app.metrics,
    });
    const ses =
      topicArns.length === 0
        ? undefined
        : new SnsFeedbackIntake({
            topicArns,
            certificates: new SnsCertificateCache(),
            snsLimits: { maxBytes: config.FEEDBACK_MAX_BODY_BYTES },
            timeWindow: { ...DEFAULT_SNS_TIME_WINDOW, maxAgeMs: config.SNS_MAX_MESSAGE_AGE_MS },
          });
    app.decorate('feedback', { intake, ses, sendGridKey, maxBodyBytes: config.FEEDBACK_MAX_BODY_BYTES });
    app.decorate(
      'unsubscribes',
      new Unsubscribes(
        { identifiers: app.identifiers, legacy: unsubscribeKey(app.emailHashKey) },
        app.sendQueries,
        app.suppressions,
      ),
    );
    app.decorate('unsubscribeMailto', config.UNSUBSCRIBE_MAILTO);

    // Each its own bucket per client address, so a flood of one kind never starves the other.
    const limits = { max: config.RATE_LIMIT_MAX, windowMs: config.RATE_LIMIT_WINDOW_MS };
    const windowSeconds = Math.round(config.RATE_LIMIT_WINDOW_MS / 1000);
    app.decorate('publicRateLimit', {
      person: clientRateLimit(app, {
        name: 'person',
        ...limits,
        refuse: (retry) =>
          new AppError(
            'RATE_LIMITED',
            `rate limit exceeded: at most ${config.RATE_LIMIT_MAX} requests per ${windowSeconds} s per client; retry in ${retry} s`,
          ),
      }),
      webhook: clientRateLimit(app, {
        name: 'webhook',
        ...limits,
        refuse: (retry) => new AppError('UNAVAILABLE', `too many requests from this client; retry in ${retry} s`),
      }),
    });
  },
  { name: 'feedback', dependencies: ['sender'] },
);
