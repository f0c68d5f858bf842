import {
  loadEmailHashKey,
  loadSuppressionKey,
  PeriodicTask,
  registerConsumer,
  registerOutboxRelay,
  registerPeriodicTask,
  retryCap,
  topicName,
  type EventBatchHandler,
  type Logger,
} from '@outreach/shared';
import { type EmailHashKey } from '@outreach/contracts';
import type { FastifyInstance } from 'fastify';
import fp from 'fastify-plugin';
import { ExperimentClient } from '../adapters/experiment-client.js';
import { experimentToken, peerToken } from '../adapters/experiment-token.js';
import { SubjectPeers } from '../adapters/subject-peers.js';
import { erasedBefore, SubjectsRepository } from '../adapters/subjects-repository.js';
import { PlannerRepository } from '../adapters/planner-repository.js';
import { RequestsRepository } from '../adapters/requests-repository.js';
import type { Config } from '../config.js';
import { conversationHandler } from '../workflow/conversations.js';
import { ingressHandler } from '../workflow/ingress.js';
import type { OutreachRequestsDeps } from '../workflow/outreach-requests.js';
import { Rerequests } from '../workflow/rerequests.js';
import { emitDue } from '../workflow/scheduler.js';
import { sendOutcomesProjector } from '../workflow/send-outcomes.js';
import { SubjectRequests } from '../workflow/subjects.js';

declare module 'fastify' {
  interface FastifyInstance {
    readonly planner: PlannerRepository;
    readonly experimentClient: ExperimentClient;
    readonly plannerConfig: Config;
    /** The key emailHash is made with (read once, at start): it keys candidates whose id is an address. */
    readonly emailHashKey: EmailHashKey;
    /** Counts and logs requests for steps already emitted or cancelled (every ingress). */
    readonly rerequests: Rerequests;
    /** Each request's record, planned sends and their outcomes (GET /v1/outreach-requests/:requestId). */
    readonly requests: RequestsRepository;
    /** What the one decision about requests works with, whichever ingress calls it (workflow/outreach-requests.ts). */
    readonly outreachRequests: OutreachRequestsDeps;
    /** Data-subject export and erasure (ADR 014); undefined without a suppression key. */
    readonly subjectRequests: SubjectRequests | undefined;
  }
}

/** Request statuses purged per statement, and statements per run of the retention task. */
/**
 * What the conversations consumer's handlers act on (workflow/conversations.ts, send-outcomes.ts):
 * a sent step advances its sequence and every outcome is projected for the request status; a reply
 * or a close cancels the steps still scheduled.
 */
const CONVERSATION_EVENT_TYPES: ReadonlySet<string> = new Set([
  'SendRecorded',
  'MessageReceived',
  'ConversationClosed',
]);

const PURGE_BATCH = 5_000;
const PURGE_ROUNDS_PER_RUN = 50;

/**
 * Wires the two consumers (requests; conversations and sends, whose outcomes it also projects for
 * the status route), the scheduler, the request statuses' retention and the outbox relay.
 */
export default fp(
  async (app: FastifyInstance, { config }: { config: Config }) => {
    const log = (component: string) => app.log.child({ component }) as Logger;
    // A missing or weak key stops the start (ConfigError, exit 78), as in the sender: a candidate id
    // that is an address becomes its keyed hash (schemas/README.md, "Keys"), never the address.
    const emailHashKey = loadEmailHashKey(config);
    const repository = new PlannerRepository(app.pg, {
      sendRequested: topicName('sendRequested', config.TOPIC_PREFIX),
      conversationEvents: topicName('conversationEvents', config.TOPIC_PREFIX),
      outreachRejected: topicName('outreachRejected', config.TOPIC_PREFIX),
    });
    const requests = new RequestsRepository(app.pg);
    // Read now (a bad file or both variables set stop the start: ConfigError, exit 78), then again
    // every SECRET_FILE_REFRESH_MS: a rotated Secret reaches the next call without a restart.
    const token = experimentToken(config, log('experiment-token'));
    app.addHook('onClose', async () => token.stop());
    const experiments = new ExperimentClient(
      config.EXPERIMENT_URL,
      () => token.current() ?? '',
      config.EXPERIMENT_TIMEOUT_MS,
      { logger: log('experiment-client'), metrics: app.metrics },
    );
    app.decorate('planner', repository);
    app.decorate('experimentClient', experiments);
    app.decorate('plannerConfig', config);
    app.decorate('emailHashKey', emailHashKey);
    app.decorate('requests', requests);
    const rerequests = new Rerequests(app.metrics, log('rerequests'));
    app.decorate('rerequests', rerequests);
    const outreachRequests: { -readonly [K in keyof OutreachRequestsDeps]: OutreachRequestsDeps[K] } = {
      pool: app.pg,
      repository,
      requests,
      experiments,
      hashKey: emailHashKey,
      rerequests,
    };
    const suppressionKey = loadSuppressionKey(config);
    if (suppressionKey)
      outreachRequests.erasedBefore = (arriving, client) => erasedBefore(client ?? app.pg, suppressionKey, arriving);
    app.decorate('outreachRequests', outreachRequests);

    const senderToken = peerToken('SENDER_TOKEN', config, log('sender-token'));
    const livenessToken = peerToken('LIVENESS_TOKEN', config, log('liveness-token'));
    app.addHook('onClose', async () => {
      senderToken.stop();
      livenessToken.stop();
    });
    const peers = new SubjectPeers(
      {
        sender: { url: config.SENDER_URL, token: () => senderToken.current() ?? '' },
        experiment: { url: config.EXPERIMENT_URL, token: () => token.current() ?? '' },
        liveness: { url: config.LIVENESS_URL, token: () => livenessToken.current() ?? '' },
      },
      config.SUBJECT_TIMEOUT_MS,
    );
    app.decorate(
      'subjectRequests',
      suppressionKey
        ? new SubjectRequests(new SubjectsRepository(app.pg, suppressionKey), peers, suppressionKey, emailHashKey, {
            concurrency: config.SUBJECT_CONCURRENCY,
            queueMax: config.SUBJECT_QUEUE_MAX,
            perCaller: config.SUBJECT_QUEUE_PER_CALLER,
            inFlightWindowMs: config.SUBJECT_IN_FLIGHT_WINDOW_MS,
          })
        : undefined,
    );

    registerConsumer(app, {
      partitionsConsumedConcurrently: config.CONSUMER_PARTITION_CONCURRENCY,
      groupId: config.CONSUMER_GROUP,
      topics: [topicName('outreachRequested', config.TOPIC_PREFIX)],
      chunkSize: config.REQUEST_BATCH_SIZE,
      // An unavailable experiment service is waited out, backing off up to 30 s between attempts,
      // until the retry cap (CONSUMER_RETRY_MAX_ATTEMPTS / _MS) sends the requests to the DLQ.
      retry: { initialMs: 250, maxMs: 30_000, ...retryCap(config) },
      handler: ingressHandler({ ...outreachRequests, logger: log('ingress') }),
    });
    // Sends' outcomes are projected first (what publishers poll), then the conversations follow them.
    // Both are idempotent, so a chunk retried after either fails does each once in effect.
    const projectOutcomes = sendOutcomesProjector({ pool: app.pg, requests });
    const followConversations = conversationHandler({
      pool: app.pg,
      repository,
      logger: log('conversations'),
      rerequests,
    });
    const conversationsAndOutcomes: EventBatchHandler = async (events, context) => {
      await projectOutcomes(events);
      return followConversations(events, context);
    };
    registerConsumer(app, {
      partitionsConsumedConcurrently: config.CONSUMER_PARTITION_CONCURRENCY,
      groupId: `${config.CONSUMER_GROUP}-conversations`,
      topics: [topicName('conversationEvents', config.TOPIC_PREFIX), topicName('sendRecorded', config.TOPIC_PREFIX)],
      // What the two handlers act on; the rest (the planner's own StepPlanned, one per send, among
      // them) is skipped unread.
      eventTypes: CONVERSATION_EVENT_TYPES,
      retry: retryCap(config),
      handler: conversationsAndOutcomes,
    });
    registerPeriodicTask(
      app,
      new PeriodicTask(
        'scheduler',
        async (stopping) => {
          while ((await emitDue({ pool: app.pg, repository }, 200)) === 200 && !stopping.aborted) {
            // a full batch: more may be due
          }
        },
        config.SCHEDULER_INTERVAL_MS,
        log('scheduler'),
      ),
    );
    registerPeriodicTask(
      app,
      new PeriodicTask(
        'request-status-retention',
        async (stopping) => {
          const logger = log('request-status-retention');
          // Batches, so no statement holds its locks for long; bounded per run, and ended by a
          // shutdown, so a backlog does not hold one up (the next run goes on).
          for (let round = 0; round < PURGE_ROUNDS_PER_RUN && !stopping.aborted; round++) {
            const purged = await requests.purgeOlderThan(config.REQUEST_STATUS_RETENTION_DAYS, PURGE_BATCH);
            if (purged.requests > 0 || purged.outcomes > 0)
              logger.info(
                { ...purged, retentionDays: config.REQUEST_STATUS_RETENTION_DAYS },
                'purged request statuses',
              );
            if (purged.requests < PURGE_BATCH && purged.outcomes < PURGE_BATCH) break;
          }
        },
        config.REQUEST_STATUS_PURGE_INTERVAL_MS,
        log('request-status-retention'),
      ),
    );
    registerOutboxRelay(app, {
      databaseUrl: config.DATABASE_URL,
      schema: config.DATABASE_SCHEMA,
      pollIntervalMs: 200,
      retentionMs: config.OUTBOX_EVENT_IDS_RETENTION_MS,
    });
  },
  { name: 'planner', dependencies: ['postgres', 'kafka'] },
);
