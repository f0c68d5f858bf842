/**
 * Replays outreach.send-recorded.v1 and conversation.events.v1 from the beginning into scratch
 * exposure and reply projections and reports whether they match the live ones. Exit 0 when they do.
 *
 *   KAFKA_BROKERS=... DATABASE_URL=... [TOPIC_PREFIX=] [SUPPRESSION_KEY_FILE=] node dist/cli/replay-exposures.js
 */
import { createKafka, createLogger, createPool, loadSuppressionKey, topicName } from '@outreach/shared';
import { migrationsDir } from '../app.js';
import { replayExposures } from '../workflow/replay.js';

const brokers = process.env.KAFKA_BROKERS;
const databaseUrl = process.env.DATABASE_URL;
if (!brokers || !databaseUrl) {
  process.stderr.write('KAFKA_BROKERS and DATABASE_URL are required\n');
  process.exit(2);
}
const logger = createLogger({ name: 'experiment-replay', level: process.env.LOG_LEVEL ?? 'warn' });
const livePool = createPool({
  connectionString: databaseUrl,
  applicationName: 'experiment-replay',
  schema: process.env.DATABASE_SCHEMA ?? 'experiment',
});
try {
  const result = await replayExposures({
    kafka: createKafka({ brokers: brokers.split(','), clientId: 'experiment-replay' }),
    topic: topicName('sendRecorded', process.env.TOPIC_PREFIX ?? ''),
    repliesTopic: topicName('conversationEvents', process.env.TOPIC_PREFIX ?? ''),
    databaseUrl,
    livePool,
    migrationsDir,
    logger,
    suppressionKey: loadSuppressionKey({
      SUPPRESSION_KEY_FILE: process.env.SUPPRESSION_KEY_FILE ?? '',
      SUPPRESSION_KEY: process.env.SUPPRESSION_KEY ?? '',
    }),
  });
  console.log(JSON.stringify(result, null, 2));
  console.log(result.matches ? 'replay matches the live projection' : 'MISMATCH between replay and live projection');
  process.exitCode = result.matches ? 0 : 1;
} finally {
  await livePool.end();
}
