/**
 * Replays conversation.events.v1 and outreach.send-recorded.v1 from the beginning into a fresh
 * projection and reports whether it matches the live one (exit 0 when it does).
 *
 *   KAFKA_BROKERS=... DATABASE_URL=... [TOPIC_PREFIX=] [DATABASE_SCHEMA=liveness] node dist/cli/rebuild.js
 */
import { createKafka, createLogger, createPool, loadConfig, loadSuppressionKey, topicName } from '@outreach/shared';
import { migrationsDir } from '../app.js';
import { ConfigSchema } from '../config.js';
import { defaultGraces } from '../plugins/liveness.js';
import { rebuildConversations } from '../workflow/rebuild.js';

const config = loadConfig(ConfigSchema);
const livePool = createPool({
  connectionString: config.DATABASE_URL,
  applicationName: 'liveness-rebuild',
  schema: config.DATABASE_SCHEMA,
});
try {
  const result = await rebuildConversations({
    kafka: createKafka({ brokers: config.KAFKA_BROKERS.split(','), clientId: 'liveness-rebuild' }),
    topics: [topicName('conversationEvents', config.TOPIC_PREFIX), topicName('sendRecorded', config.TOPIC_PREFIX)],
    databaseUrl: config.DATABASE_URL,
    livePool,
    migrationsDir,
    defaults: defaultGraces(config),
    suppressionKey: loadSuppressionKey(config),
    logger: createLogger({ name: 'liveness-rebuild', level: config.LOG_LEVEL }),
  });
  console.log(JSON.stringify(result));
  console.log(
    result.matches ? 'rebuild matches the live projection' : `MISMATCH: ${result.differences} conversations differ`,
  );
  process.exitCode = result.matches ? 0 : 1;
} finally {
  await livePool.end();
}
