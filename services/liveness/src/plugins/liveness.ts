import {
  ErasedSubjects,
  loadSuppressionKey,
  PeriodicTask,
  registerConsumer,
  registerPeriodicTask,
  registerOutboxRelay,
  retryCap,
  topicName,
  watchPeriodicTask,
  type Logger,
} from '@outreach/shared';
import type { FastifyInstance } from 'fastify';
import fp from 'fastify-plugin';
import { ConversationsRepository } from '../adapters/conversations-repository.js';
import { registerLivenessGauges } from '../adapters/gauges.js';
import type { Config } from '../config.js';
import { projectorHandler } from '../workflow/projector.js';
import { Sweeper } from '../workflow/sweeper.js';

declare module 'fastify' {
  interface FastifyInstance {
    readonly conversations: ConversationsRepository;
    readonly sweeper: Sweeper;
  }
}

export function defaultGraces(config: Config) {
  return {
    inboundMs: config.GRACE_INBOUND_MS,
    outboundMs: config.GRACE_OUTBOUND_MS,
    overdueMs: config.GRACE_OVERDUE_MS,
    replyWindowMs: config.REPLY_WINDOW_MS,
  };
}

/** Closed conversations purged per statement, and statements per run of the retention task. */
const PURGE_BATCH = 1_000;
const PURGE_ROUNDS_PER_RUN = 100;

/** Wires the projection consumer (both topics), the sweeper, the gauges and the outbox relay. */
export default fp(
  async (app: FastifyInstance, { config }: { config: Config }) => {
    const suppressionKey = loadSuppressionKey(config);
    if (!suppressionKey)
      app.log.warn('SUPPRESSION_KEY_FILE is not set: the projector cannot skip erased people (ADR 014)');
    const repository = new ConversationsRepository(
      app.pg,
      {
        liveness: topicName('liveness', config.TOPIC_PREFIX),
        conversationEvents: topicName('conversationEvents', config.TOPIC_PREFIX),
      },
      defaultGraces(config),
    );
    const sweeper = new Sweeper(
      repository,
      app.log.child({ component: 'sweeper' }) as Logger,
      app.metrics,
      config.SWEEP_INTERVAL_MS,
    );
    app.decorate('conversations', repository);
    app.decorate('sweeper', sweeper);
    watchPeriodicTask(app, sweeper.loop);
    registerLivenessGauges(app.metrics, repository);
    registerConsumer(app, {
      partitionsConsumedConcurrently: config.CONSUMER_PARTITION_CONCURRENCY,
      groupId: config.CONSUMER_GROUP,
      topics: [topicName('conversationEvents', config.TOPIC_PREFIX), topicName('sendRecorded', config.TOPIC_PREFIX)],
      retry: retryCap(config),
      handler: projectorHandler(
        repository,
        app.log.child({ component: 'projector' }) as Logger,
        new ErasedSubjects(app.pg, suppressionKey),
      ),
    });
    const retentionLog = app.log.child({ component: 'conversation-retention' }) as Logger;
    registerPeriodicTask(
      app,
      new PeriodicTask(
        'conversation-retention',
        async (stopping) => {
          // Batches, so no statement holds its locks for long; bounded per run, and ended by a
          // shutdown (the next run goes on).
          for (let round = 0; round < PURGE_ROUNDS_PER_RUN && !stopping.aborted; round++) {
            const purged = await repository.purgeClosed(config.CONVERSATION_RETENTION_DAYS, PURGE_BATCH);
            if (purged.conversations > 0)
              retentionLog.info(
                { ...purged, retentionDays: config.CONVERSATION_RETENTION_DAYS },
                'purged closed conversations',
              );
            if (purged.conversations < PURGE_BATCH) break;
          }
        },
        config.CONVERSATION_PURGE_INTERVAL_MS,
        retentionLog,
      ),
    );
    registerOutboxRelay(app, {
      databaseUrl: config.DATABASE_URL,
      schema: config.DATABASE_SCHEMA,
      pollIntervalMs: 500,
      retentionMs: config.OUTBOX_EVENT_IDS_RETENTION_MS,
    });
    app.addHook('onReady', async () => sweeper.start());
    app.addHook('onClose', async () => sweeper.stop());
  },
  { name: 'liveness', dependencies: ['postgres', 'kafka'] },
);
