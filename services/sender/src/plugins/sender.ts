import {
  counter,
  loadEmailHashKey,
  loadSuppressionKey,
  readPemFile,
  readSecretFile,
  registerConsumer,
  registerOutboxRelay,
  retryCap,
  subjectHash,
  topicName,
  watchPeriodicTask,
  type Logger,
} from '@outreach/shared';
import { type EmailHashKey } from '@outreach/contracts';
import type { FastifyInstance } from 'fastify';
import fp from 'fastify-plugin';
import type { Pool } from 'pg';
import { EvidenceLookup } from '../adapters/providers/evidence-lookup.js';
import { lookupOfProvider } from '../adapters/providers/lookup.js';
import { MailgunLookup, MailgunProvider } from '../adapters/providers/mailgun.js';
import { MailpitLookup } from '../adapters/providers/mailpit-lookup.js';
import { NullProvider } from '../adapters/providers/null.js';
import type { MailProvider } from '../adapters/providers/port.js';
import { SmtpProvider } from '../adapters/providers/smtp.js';
import { CampaignsRepository } from '../adapters/campaigns-repository.js';
import { KillSwitch, SharedErrorWindow, SharedRateLimiter } from '../adapters/incident-controls.js';
import { ReportsRepository } from '../adapters/reports-repository.js';
import { SendQueries } from '../adapters/send-queries.js';
import { SendsRepository } from '../adapters/sends-repository.js';
import { SubjectsRepository } from '../adapters/subjects-repository.js';
import { SuppressionsRepository } from '../adapters/suppressions-repository.js';
import { handoverWithinMs, identifierKeyring, lookupSettleMs, type Config } from '../config.js';
import { SendIdentifiers } from '../domain/identifiers.js';
import { rateLimitsOf } from '../domain/rate-limit.js';
import { Reconciler, type LookupSettings } from '../workflow/reconciler.js';
import { SendCommands } from '../workflow/send-commands.js';
import { SendPipeline } from '../workflow/send-pipeline.js';
import { registerSenderGauges } from '../adapters/gauges.js';

declare module 'fastify' {
  interface FastifyInstance {
    /** The send state machine's writes. */
    readonly sends: SendsRepository;
    /** The send state machine's decisions on stored sends (an operator's resolution among them). */
    readonly sendCommands: SendCommands;
    /** What the API reads of sends. */
    readonly sendQueries: SendQueries;
    readonly campaigns: CampaignsRepository;
    /** The global kill switch, shared by every replica. */
    readonly killSwitch: KillSwitch;
    readonly suppressions: SuppressionsRepository;
    /** A data subject's part of an export or erasure (ADR 014). */
    readonly subjects: SubjectsRepository;
    readonly reports: ReportsRepository;
    readonly reconciler: Reconciler;
    /** The key emailHash is made with (read once, at start). */
    readonly emailHashKey: EmailHashKey;
    /** Signs and checks the identifiers our mail carries (ADR 012; read once, at start). */
    readonly identifiers: SendIdentifiers;
    /** MESSAGE_ID_DOMAIN: the right-hand side of our Message-IDs (shown with a send in doubt). */
    readonly messageIdDomain: string;
  }
}

/** Mailgun's API settings (MAIL_PROVIDER or PROVIDER_LOOKUP mailgun; checkConfig requires the domain and one key). */
function mailgunApi(config: Config) {
  return {
    baseUrl: config.MAILGUN_API_URL,
    domain: config.MAILGUN_DOMAIN,
    apiKey: config.MAILGUN_API_KEY_FILE
      ? readSecretFile('MAILGUN_API_KEY_FILE', config.MAILGUN_API_KEY_FILE)
      : config.MAILGUN_API_KEY,
  };
}

/**
 * The delivery lookup that settles sends in doubt (ADR 009), with the timing the reconciler judges
 * its answers by. PROVIDER_LOOKUP=none keeps a provider's own lookup by idempotency key (the null
 * provider's), whose "cannot tell" is `ambiguous` at once as before; SMTP has none.
 */
export function createLookup(
  config: Config,
  provider: MailProvider,
  identifiers: SendIdentifiers,
  pool: Pool,
): LookupSettings | undefined {
  const timing = {
    messageIdDomain: config.MESSAGE_ID_DOMAIN,
    identifiers,
    handoverWithinMs: handoverWithinMs(config),
    recheckMs: config.LOOKUP_RECHECK_MS,
    giveUpAfterMs: config.LOOKUP_GIVE_UP_MS,
    concurrency: config.LOOKUP_CONCURRENCY,
  };
  const settleMs = lookupSettleMs(config);
  switch (config.PROVIDER_LOOKUP) {
    case 'mailpit':
      return {
        ...timing,
        lookup: new MailpitLookup({
          baseUrl: config.MAILPIT_API_URL,
          timeoutMs: config.LOOKUP_TIMEOUT_MS,
          settleMs,
          ...(config.MAILPIT_API_USER
            ? { username: config.MAILPIT_API_USER, password: config.MAILPIT_API_PASSWORD }
            : {}),
        }),
      };
    case 'mailgun':
      return {
        ...timing,
        lookup: new MailgunLookup({
          ...mailgunApi(config),
          timeoutMs: config.LOOKUP_TIMEOUT_MS,
          settleMs,
          retentionMs: config.MAILGUN_EVENT_RETENTION_MS,
        }),
      };
    case 'evidence':
      return { ...timing, lookup: new EvidenceLookup(pool, settleMs) };
    case 'none': {
      // The provider's key is the sendId: the Message-ID's local part up to its first dot.
      const own = lookupOfProvider(provider, (bare) => (bare.split('@')[0] ?? '').split('.')[0] ?? '');
      return own && { ...timing, lookup: own, giveUpAfterMs: 0 };
    }
    default: {
      const exhaustive: never = config.PROVIDER_LOOKUP;
      throw new Error(`unknown PROVIDER_LOOKUP ${String(exhaustive)}`);
    }
  }
}

export function createProvider(config: Config): MailProvider {
  if (config.MAIL_PROVIDER === 'null')
    return new NullProvider(config.NULL_PROVIDER_LOG || undefined, config.NULL_PROVIDER_DELAY_MS);
  if (config.MAIL_PROVIDER === 'mailgun')
    return new MailgunProvider({
      ...mailgunApi(config),
      timeoutMs: config.PROVIDER_TIMEOUT_MS,
      lateWithinMs: config.MAILGUN_LATE_REPLY_MS,
    });
  const password = config.SMTP_PASSWORD_FILE
    ? readSecretFile('SMTP_PASSWORD_FILE', config.SMTP_PASSWORD_FILE)
    : config.SMTP_PASSWORD;
  return new SmtpProvider({
    host: config.SMTP_HOST,
    port: config.SMTP_PORT,
    secure: config.SMTP_SECURE,
    requireTLS: config.SMTP_REQUIRE_TLS,
    ...(config.SMTP_TLS_CA_FILE ? { ca: readPemFile('SMTP_TLS_CA_FILE', config.SMTP_TLS_CA_FILE) } : {}),
    ...(config.SMTP_TLS_SERVERNAME ? { servername: config.SMTP_TLS_SERVERNAME } : {}),
    ...(config.SMTP_USER ? { user: config.SMTP_USER, password } : {}),
    timeoutMs: config.PROVIDER_TIMEOUT_MS,
    finalReplyTimeoutMs: config.SMTP_FINAL_REPLY_TIMEOUT_MS,
    maxConnections: config.SEND_CONCURRENCY,
    successDsn: config.SMTP_DSN_SUCCESS,
  });
}

/** Wires the sender: repository, provider, pipeline, consumer, reconciler and outbox relay. */
export default fp(
  async (app: FastifyInstance, { config }: { config: Config }) => {
    // A missing or weak key stops the start (ConfigError, exit 78): there is no unkeyed fallback.
    const emailHashKey = loadEmailHashKey(config);
    // Optional (ADR 014); a bad one stops the start like the emailHash key's.
    const suppressionKey = loadSuppressionKey(config);
    const keyring = identifierKeyring(config, Date.now());
    const identifiers = new SendIdentifiers(keyring);
    if (keyring.previous) {
      const window = {
        identifierKeyId: keyring.current.id,
        previousKeyId: keyring.previous.id,
        previousUntil: new Date(keyring.previous.until).toISOString(),
      };
      if (keyring.previous.until <= Date.now())
        app.log.warn(window, 'the previous identifier key is past its window and verifies nothing: remove it');
      else app.log.info(window, 'identifiers under the previous key are verified until its window ends');
    }
    const suppressions = new SuppressionsRepository(
      app.pg,
      topicName('suppressions', config.TOPIC_PREFIX),
      emailHashKey,
      suppressionKey ? (emailNorm) => subjectHash(suppressionKey, 'address', emailNorm) : undefined,
    );
    const repository = new SendsRepository(
      app.pg,
      topicName('sendRecorded', config.TOPIC_PREFIX),
      config.LEASE_MS,
      emailHashKey,
      suppressions,
      suppressionKey ? (kind, value) => subjectHash(suppressionKey, kind, value) : undefined,
    );
    const campaigns = new CampaignsRepository(app.pg, repository, config.AUTO_PAUSE_WINDOW_MS);
    const killSwitch = new KillSwitch(app.pg, repository);
    // Set the same on every replica: the buckets are shared, each call refills them at its own rate.
    const rateLimiter = new SharedRateLimiter(
      app.pg,
      rateLimitsOf({
        ratePerSecond: config.SEND_RATE_PER_SECOND,
        burst: config.SEND_RATE_BURST,
        perDomainPerSecond: config.SEND_RATE_PER_DOMAIN_PER_SECOND,
        perDomainBurst: config.SEND_RATE_PER_DOMAIN_BURST,
        concurrency: config.SEND_CONCURRENCY,
      }),
    );
    const reports = new ReportsRepository(app.pg, emailHashKey);
    const provider = createProvider(config);
    const logger = app.log.child({ component: 'send-pipeline' }) as Logger;
    const pipeline = new SendPipeline({
      repository,
      campaigns,
      rateLimiter,
      errorWindow: new SharedErrorWindow(app.pg, config.AUTO_PAUSE_WINDOW_MS),
      provider,
      logger,
      emailHashKey,
      metrics: app.metrics,
      from: config.MAIL_FROM,
      identifiers,
      messageIdDomain: config.MESSAGE_ID_DOMAIN,
      unsubscribeMailto: config.UNSUBSCRIBE_MAILTO,
      ...(config.UNSUBSCRIBE_URL ? { unsubscribeUrl: config.UNSUBSCRIBE_URL } : {}),
      concurrency: config.SEND_CONCURRENCY,
      providerTimeoutMs: config.PROVIDER_TIMEOUT_MS,
      leaseMs: config.LEASE_MS,
      maxAttempts: config.MAX_ATTEMPTS,
      retryBackoffMs: config.RETRY_BACKOFF_MS,
      autoPause: {
        threshold: config.AUTO_PAUSE_THRESHOLD,
        minAttempts: config.AUTO_PAUSE_MIN_SENDS,
        windowMs: config.AUTO_PAUSE_WINDOW_MS,
      },
    });
    const settledByEvidence = counter(app.metrics, 'outreach_sender_settled_by_evidence_total');
    repository.onSettled = (settled) => {
      for (const send of settled) settledByEvidence.inc({ source: send.source, from: send.from });
    };
    const lookup = createLookup(config, provider, identifiers, app.pg);
    const reconciler = new Reconciler(repository, pipeline, logger, app.metrics, {
      intervalMs: config.RECONCILE_INTERVAL_MS,
      policy: { maxAttempts: config.MAX_ATTEMPTS, retryBackoffMs: config.RETRY_BACKOFF_MS, leaseMs: config.LEASE_MS },
      ...(lookup ? { lookup } : {}),
    });
    app.decorate('sends', repository);
    app.decorate('sendCommands', new SendCommands(repository, config.DELIVERY_EVIDENCE_WINDOW_MS));
    app.decorate('sendQueries', new SendQueries(app.pg));
    app.decorate('campaigns', campaigns);
    app.decorate('killSwitch', killSwitch);
    app.decorate('suppressions', suppressions);
    app.decorate(
      'subjects',
      new SubjectsRepository(app.pg, emailHashKey, suppressionKey, topicName('sendRecorded', config.TOPIC_PREFIX)),
    );
    app.decorate('reports', reports);
    app.decorate('reconciler', reconciler);
    watchPeriodicTask(app, reconciler.loop);
    app.decorate('emailHashKey', emailHashKey);
    app.decorate('identifiers', identifiers);
    app.decorate('messageIdDomain', config.MESSAGE_ID_DOMAIN);
    registerSenderGauges(app.metrics, reports, killSwitch);

    registerConsumer(app, {
      partitionsConsumedConcurrently: config.CONSUMER_PARTITION_CONCURRENCY,
      groupId: config.CONSUMER_GROUP,
      topics: [topicName('sendRequested', config.TOPIC_PREFIX)],
      chunkSize: config.SEND_BATCH_SIZE,
      // The default session (8 s): the consumer heartbeats on a timer while sends wait on the provider.
      retry: retryCap(config),
      handler: (events, context) => pipeline.handle(events, context),
    });
    registerOutboxRelay(app, {
      databaseUrl: config.DATABASE_URL,
      schema: config.DATABASE_SCHEMA,
      pollIntervalMs: 500,
      retentionMs: config.OUTBOX_EVENT_IDS_RETENTION_MS,
    });
    app.addHook('onReady', async () => reconciler.start());
    // Before the consumer and the reconciler stop (onClose): a batch waiting for rate tokens gives
    // its claims back at once instead of holding the shutdown until its tokens come.
    app.addHook('preClose', async () => pipeline.close());
    app.addHook('onClose', async () => {
      await reconciler.stop();
      await lookup?.lookup.close?.();
      // Closing the connections ends every wait for a late verdict; what arrived is recorded first.
      await provider.close();
      await pipeline.drainLateVerdicts();
    });
  },
  { name: 'sender', dependencies: ['postgres', 'kafka'] },
);
