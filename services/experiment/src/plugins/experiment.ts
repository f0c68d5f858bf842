import {
  ErasedSubjects,
  loadSuppressionKey,
  registerConsumer,
  registerOutboxRelay,
  retryCap,
  topicName,
  type Logger,
} from '@outreach/shared';
import type { FastifyInstance } from 'fastify';
import fp from 'fastify-plugin';
import { ExperimentsRepository } from '../adapters/experiments-repository.js';
import type { Config } from '../config.js';
import { exposureHandler } from '../workflow/exposures.js';
import { experimentEventsHandler, replyHandler } from '../workflow/replies.js';

declare module 'fastify' {
  interface FastifyInstance {
    readonly experiments: ExperimentsRepository;
    readonly experimentConfig: Config;
  }
}

/** Wires the repository, the exposure and reply consumer and the outbox relay. */
export default fp(
  async (app: FastifyInstance, { config }: { config: Config }) => {
    const repository = new ExperimentsRepository(app.pg, topicName('assignments', config.TOPIC_PREFIX));
    app.decorate('experiments', repository);
    app.decorate('experimentConfig', config);
    const suppressionKey = loadSuppressionKey(config);
    if (!suppressionKey)
      app.log.warn('SUPPRESSION_KEY_FILE is not set: exposures of erased people are not recognized (ADR 014)');
    const erased = new ErasedSubjects(app.pg, suppressionKey);
    registerConsumer(app, {
      partitionsConsumedConcurrently: config.CONSUMER_PARTITION_CONCURRENCY,
      groupId: config.CONSUMER_GROUP,
      // Replies for the reply rate per variant; an upgraded group starts the new topic from its beginning.
      topics: [topicName('sendRecorded', config.TOPIC_PREFIX), topicName('conversationEvents', config.TOPIC_PREFIX)],
      // Exposures and replies; the conversation topic's other events (a StepPlanned per send) are skipped unread.
      eventTypes: new Set(['SendRecorded', 'MessageReceived']),
      retry: retryCap(config),
      handler: experimentEventsHandler(
        exposureHandler(repository, app.log.child({ component: 'exposures' }) as Logger, erased),
        replyHandler(repository, erased),
      ),
    });
    registerOutboxRelay(app, {
      databaseUrl: config.DATABASE_URL,
      schema: config.DATABASE_SCHEMA,
      pollIntervalMs: 500,
      retentionMs: config.OUTBOX_EVENT_IDS_RETENTION_MS,
    });
  },
  { name: 'experiment', dependencies: ['postgres', 'kafka'] },
);
