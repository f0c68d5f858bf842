import { readFileSync } from 'node:fs';
import {
  ConfigError,
  loadEmailHashKey,
  registerConsumer,
  registerOutboxRelay,
  retryCap,
  topicName,
  watchPeriodicTask,
  type EmailHashKey,
  type Logger,
} from '@outreach/shared';
import type { FastifyInstance } from 'fastify';
import fp from 'fastify-plugin';
import { NullProvider } from '../adapters/providers/null.js';
import type { MailProvider } from '../adapters/providers/port.js';
import { SmtpProvider } from '../adapters/providers/smtp.js';
import { CampaignsRepository } from '../adapters/campaigns-repository.js';
import { ReportsRepository } from '../adapters/reports-repository.js';
import { SendQueries } from '../adapters/send-queries.js';
import { SendsRepository } from '../adapters/sends-repository.js';
import { SuppressionsRepository } from '../adapters/suppressions-repository.js';
import type { Config } from '../config.js';
import { Reconciler } from '../workflow/reconciler.js';
import { SendPipeline } from '../workflow/send-pipeline.js';
import { registerSenderGauges } from '../adapters/gauges.js';

declare module 'fastify' {
  interface FastifyInstance {
    /** The send state machine's writes (an operator's resolution among them). */
    readonly sends: SendsRepository;
    /** What the API reads of sends. */
    readonly sendQueries: SendQueries;
    readonly campaigns: CampaignsRepository;
    readonly suppressions: SuppressionsRepository;
    readonly reports: ReportsRepository;
    readonly reconciler: Reconciler;
    /** The key emailHash is made with (read once, at start). */
    readonly emailHashKey: EmailHashKey;
  }
}

/** A mounted file's content, trimmed; unreadable is a configuration error naming the variable. */
function readSecretFile(variable: string, path: string): string {
  try {
    return readFileSync(path, 'utf8').trim();
  } catch (error) {
    throw new ConfigError(
      `invalid configuration: ${variable} cannot be read (${(error as NodeJS.ErrnoException).code ?? 'unreadable'})`,
    );
  }
}

export function createProvider(config: Config): MailProvider {
  if (config.MAIL_PROVIDER === 'null')
    return new NullProvider(config.NULL_PROVIDER_LOG || undefined, config.NULL_PROVIDER_DELAY_MS);
  const password = config.SMTP_PASSWORD_FILE
    ? readSecretFile('SMTP_PASSWORD_FILE', config.SMTP_PASSWORD_FILE)
    : config.SMTP_PASSWORD;
  return new SmtpProvider({
    host: config.SMTP_HOST,
    port: config.SMTP_PORT,
    secure: config.SMTP_SECURE,
    requireTLS: config.SMTP_REQUIRE_TLS,
    ...(config.SMTP_TLS_CA_FILE ? { ca: readSecretFile('SMTP_TLS_CA_FILE', config.SMTP_TLS_CA_FILE) } : {}),
    ...(config.SMTP_TLS_SERVERNAME ? { servername: config.SMTP_TLS_SERVERNAME } : {}),
    ...(config.SMTP_USER ? { user: config.SMTP_USER, password } : {}),
    messageIdDomain: config.MESSAGE_ID_DOMAIN,
    timeoutMs: config.PROVIDER_TIMEOUT_MS,
    finalReplyTimeoutMs: config.SMTP_FINAL_REPLY_TIMEOUT_MS,
    maxConnections: config.SEND_CONCURRENCY,
  });
}

/** Wires the sender: repository, provider, pipeline, consumer, reconciler and outbox relay. */
export default fp(
  async (app: FastifyInstance, { config }: { config: Config }) => {
    // A missing or weak key stops the start (ConfigError, exit 78): there is no unkeyed fallback.
    const emailHashKey = loadEmailHashKey(config);
    const repository = new SendsRepository(
      app.pg,
      topicName('sendRecorded', config.TOPIC_PREFIX),
      config.LEASE_MS,
      emailHashKey,
    );
    const campaigns = new CampaignsRepository(app.pg, repository);
    const reports = new ReportsRepository(app.pg, emailHashKey);
    const provider = createProvider(config);
    const logger = app.log.child({ component: 'send-pipeline' }) as Logger;
    const pipeline = new SendPipeline({
      repository,
      campaigns,
      provider,
      logger,
      emailHashKey,
      metrics: app.metrics,
      from: config.MAIL_FROM,
      unsubscribeMailto: config.UNSUBSCRIBE_MAILTO,
      ...(config.UNSUBSCRIBE_URL ? { unsubscribeUrl: config.UNSUBSCRIBE_URL } : {}),
      concurrency: config.SEND_CONCURRENCY,
      ratePerSecond: config.SEND_RATE_PER_SECOND,
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
    const reconciler = new Reconciler(
      repository,
      pipeline,
      provider,
      logger,
      app.metrics,
      config.RECONCILE_INTERVAL_MS,
    );
    app.decorate('sends', repository);
    app.decorate('sendQueries', new SendQueries(app.pg));
    app.decorate('campaigns', campaigns);
    app.decorate('suppressions', new SuppressionsRepository(app.pg));
    app.decorate('reports', reports);
    app.decorate('reconciler', reconciler);
    watchPeriodicTask(app, reconciler.loop);
    app.decorate('emailHashKey', emailHashKey);
    registerSenderGauges(app.metrics, reports);

    registerConsumer(app, {
      partitionsConsumedConcurrently: config.CONSUMER_PARTITION_CONCURRENCY,
      groupId: config.CONSUMER_GROUP,
      topics: [topicName('sendRequested', config.TOPIC_PREFIX)],
      chunkSize: config.SEND_BATCH_SIZE,
      // Sends in flight must finish before a session times out; heartbeats keep it alive between them.
      sessionTimeoutMs: Math.max(10_000, config.PROVIDER_TIMEOUT_MS * 2),
      retry: retryCap(config),
      handler: (events, context) => pipeline.handle(events, context),
    });
    registerOutboxRelay(app, { databaseUrl: config.DATABASE_URL, schema: config.DATABASE_SCHEMA, pollIntervalMs: 500 });
    app.addHook('onReady', async () => reconciler.start());
    app.addHook('onClose', async () => {
      await reconciler.stop();
      // Closing the connections ends every wait for a late verdict; what arrived is recorded first.
      await provider.close();
      await pipeline.drainLateVerdicts();
    });
  },
  { name: 'sender', dependencies: ['postgres', 'kafka'] },
);
