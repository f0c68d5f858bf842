import type { KeyObject } from 'node:crypto';
import {
  AppError,
  credentialRateLimit,
  PeriodicTask,
  registerPeriodicTask,
  type CredentialRateLimit,
  type Logger,
} from '@outreach/shared';
import type { FastifyInstance } from 'fastify';
import fp from 'fastify-plugin';
import { MailgunFeedbackIntake } from '../adapters/feedback/mailgun-intake.js';
import { SnsCertificateCache } from '../adapters/feedback/sns-certificates.js';
import { SnsFeedbackIntake } from '../adapters/feedback/sns-intake.js';
import { SentLogRetention } from '../adapters/sent-log-retention.js';
import { FeedbackRepository } from '../adapters/feedback-repository.js';
import { SharedErrorWindow } from '../adapters/incident-controls.js';
import { mailgunWebhookSigningKey, sendGridWebhookKey, sesTopicArns, type Config } from '../config.js';
import {
  DEFAULT_MAILGUN_LIMITS,
  DEFAULT_SNS_LIMITS,
  DEFAULT_SNS_TIME_WINDOW,
  SNS_MAX_BODY_BYTES,
} from '../domain/feedback/index.js';
import { unsubscribeKey } from '../domain/unsubscribe-token.js';
import { FeedbackIntake } from '../workflow/feedback-intake.js';
import { Unsubscribes } from '../workflow/unsubscribe.js';

export interface FeedbackWiring {
  readonly intake: FeedbackIntake;
  /** Off (undefined) while SES_SNS_TOPIC_ARNS is empty. */
  readonly ses: SnsFeedbackIntake | undefined;
  /** Off (undefined) while no SendGrid verification key is configured. */
  readonly sendGridKey: KeyObject | undefined;
  /** Off (undefined) while no Mailgun webhook signing key is configured. */
  readonly mailgun: MailgunFeedbackIntake | undefined;
  /** The body limit of the SendGrid and DSN routes (FEEDBACK_MAX_BODY_BYTES). */
  readonly maxBodyBytes: number;
  /** The SES route's: what an SNS delivery can be (SNS_MAX_BODY_BYTES), or FEEDBACK_MAX_BODY_BYTES if lower. */
  readonly maxSnsBodyBytes: number;
  /** The Mailgun route's: one event (DEFAULT_MAILGUN_LIMITS), or FEEDBACK_MAX_BODY_BYTES if lower. */
  readonly maxMailgunBodyBytes: number;
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
     * The limits of the routes anyone may call, one per route purpose, each checked after the
     * request's own credential (credentialRateLimit): the unsubscribe page (GET, which link scanners
     * fetch), the one-click unsubscribe (POST), and each provider's webhook. A person over the limit
     * is told 429; a provider's verified webhook 503, which SNS, SendGrid and Mailgun retry (SNS
     * drops a 4xx for good).
     */
    readonly publicRateLimit: {
      readonly unsubscribePage: CredentialRateLimit;
      readonly unsubscribe: CredentialRateLimit;
      readonly ses: CredentialRateLimit;
      readonly sendgrid: CredentialRateLimit;
      readonly mailgun: CredentialRateLimit;
    };
  }
}

/** Feedback rows purged per statement, and statements per run of the retention task. */
const FEEDBACK_PURGE_BATCH = 1_000;
const FEEDBACK_PURGE_ROUNDS = 50;
/** Sends read per statement of the sent log's walk, and statements per run. */
const SENT_LOG_PAGE = 5_000;
const SENT_LOG_PAGES_PER_RUN = 200;

/** Wires unsubscribes and delivery feedback: tokens, SNS, SendGrid and Mailgun verification, intake, limits. */
export default fp(
  async (app: FastifyInstance, { config }: { config: Config }) => {
    const topicArns = sesTopicArns(config);
    const sendGridKey = sendGridWebhookKey(config);
    const mailgunKey = mailgunWebhookSigningKey(config);
    const logger = app.log.child({ component: 'feedback' }) as Logger;
    const repository = new FeedbackRepository(app.pg, app.suppressions, app.emailHashKey, app.sends);
    const intake = new FeedbackIntake({
      repository,
      sends: app.sendQueries,
      errorWindow: new SharedErrorWindow(app.pg, config.AUTO_PAUSE_WINDOW_MS),
      messageIdDomain: config.MESSAGE_ID_DOMAIN,
      identifiers: app.identifiers,
      logger,
      metrics: app.metrics,
    });
    const maxSnsBodyBytes = Math.min(config.FEEDBACK_MAX_BODY_BYTES, SNS_MAX_BODY_BYTES);
    const ses =
      topicArns.length === 0
        ? undefined
        : new SnsFeedbackIntake({
            topicArns,
            certificates: new SnsCertificateCache(),
            snsLimits: { ...DEFAULT_SNS_LIMITS, maxBytes: maxSnsBodyBytes },
            timeWindow: { ...DEFAULT_SNS_TIME_WINDOW, maxAgeMs: config.SNS_MAX_MESSAGE_AGE_MS },
          });
    const maxMailgunBodyBytes = Math.min(config.FEEDBACK_MAX_BODY_BYTES, DEFAULT_MAILGUN_LIMITS.maxBytes);
    const mailgun =
      mailgunKey === undefined
        ? undefined
        : new MailgunFeedbackIntake({ signingKey: mailgunKey, limits: { maxBytes: maxMailgunBodyBytes } });
    app.decorate('feedback', {
      intake,
      ses,
      sendGridKey,
      mailgun,
      maxBodyBytes: config.FEEDBACK_MAX_BODY_BYTES,
      maxSnsBodyBytes,
      maxMailgunBodyBytes,
    });
    app.decorate(
      'unsubscribes',
      new Unsubscribes(
        { identifiers: app.identifiers, legacy: unsubscribeKey(app.emailHashKey) },
        app.sendQueries,
        app.suppressions,
      ),
    );
    app.decorate('unsubscribeMailto', config.UNSUBSCRIBE_MAILTO);

    // Feedback reports past FEEDBACK_RETENTION_DAYS: in batches, bounded per run and ended by a
    // shutdown, so a backlog never holds one up (the next run goes on).
    const retentionLog = app.log.child({ component: 'feedback-retention' }) as Logger;
    registerPeriodicTask(
      app,
      new PeriodicTask(
        'feedback-retention',
        async (stopping) => {
          for (let round = 0; round < FEEDBACK_PURGE_ROUNDS && !stopping.aborted; round++) {
            const purged = await repository.purgeOlderThan(config.FEEDBACK_RETENTION_DAYS, FEEDBACK_PURGE_BATCH);
            if (purged.reports > 0 || purged.softBounces > 0)
              retentionLog.info(
                { ...purged, retentionDays: config.FEEDBACK_RETENTION_DAYS },
                'purged feedback reports',
              );
            if (purged.reports < FEEDBACK_PURGE_BATCH && purged.softBounces < FEEDBACK_PURGE_BATCH) break;
          }
        },
        config.FEEDBACK_PURGE_INTERVAL_MS,
        retentionLog,
      ),
    );

    // The sent log past SENT_LOG_RETENTION_DAYS (0: off): a walk in send-id order, a page per
    // statement and at most SENT_LOG_PAGES_PER_RUN a run; the next run goes on from where this one
    // stopped, and starts over once it reached the end.
    if (config.SENT_LOG_RETENTION_DAYS > 0) {
      const sentLog = new SentLogRetention(app.pg);
      const sentLogLog = app.log.child({ component: 'sent-log-retention' }) as Logger;
      let cursor: string | null = null;
      registerPeriodicTask(
        app,
        new PeriodicTask(
          'sent-log-retention',
          async (stopping) => {
            let scrubbed = 0;
            for (let round = 0; round < SENT_LOG_PAGES_PER_RUN && !stopping.aborted; round++) {
              const page = await sentLog.scrubPage(config.SENT_LOG_RETENTION_DAYS, cursor, SENT_LOG_PAGE);
              scrubbed += page.scrubbed;
              cursor = page.next;
              if (cursor === null) break;
            }
            if (scrubbed > 0)
              sentLogLog.info({ scrubbed, retentionDays: config.SENT_LOG_RETENTION_DAYS }, 'sent log rows retained');
          },
          config.SENT_LOG_PURGE_INTERVAL_MS,
          sentLogLog,
        ),
      );
    }

    // Each purpose its own buckets, so a flood of one kind (link scanners' GETs, garbage posted at
    // a webhook) never uses up another's, nor a verified caller's (credentialRateLimit).
    const limits = { max: config.RATE_LIMIT_MAX, windowMs: config.RATE_LIMIT_WINDOW_MS };
    const windowSeconds = Math.round(config.RATE_LIMIT_WINDOW_MS / 1000);
    const person = (retry: number) =>
      new AppError(
        'RATE_LIMITED',
        `rate limit exceeded: at most ${config.RATE_LIMIT_MAX} requests per ${windowSeconds} s for this link; retry in ${retry} s`,
      );
    const webhook = (retry: number) =>
      new AppError('UNAVAILABLE', `too many deliveries of this message; retry in ${retry} s`);
    app.decorate('publicRateLimit', {
      unsubscribePage: credentialRateLimit(app, { purpose: 'unsubscribe-page', ...limits, refuse: person }),
      unsubscribe: credentialRateLimit(app, { purpose: 'unsubscribe', ...limits, refuse: person }),
      ses: credentialRateLimit(app, { purpose: 'ses', ...limits, refuse: webhook }),
      sendgrid: credentialRateLimit(app, { purpose: 'sendgrid', ...limits, refuse: webhook }),
      mailgun: credentialRateLimit(app, { purpose: 'mailgun', ...limits, refuse: webhook }),
    });
  },
  { name: 'feedback', dependencies: ['sender'] },
);
