/**
 * `dlq:replay`: sends dead-lettered messages back to their source topic once the cause is fixed.
 *
 *   KAFKA_BROKERS=host:9092 [TOPIC_PREFIX=] node cli/dlq-replay.js --topic outreach.send-requested.v1
 *     [--code REJECTED --code HANDLER] [--group sender] [--dry-run]
 *
 * `--topic` names the source topic (its DLQ is `<topic>.dlq`). Prints what it saw by reason, and
 * how many it replayed and skipped, as JSON. Run `--dry-run` first: it changes nothing.
 */
import { parseArgs } from 'node:util';
import { brokerList } from '@outreach/shared';
import { createKafka } from '@outreach/shared';
import { replayDeadLetters } from '@outreach/shared';
import { kafkaSecurityFromEnv, type KafkaSecurity } from '@outreach/shared';
import { exitOnKafkaFailure } from './kafka-failure.js';
import { dlqTopicOf, listTopicsSettled } from '@outreach/shared';

const { values } = parseArgs({
  options: {
    topic: { type: 'string' },
    code: { type: 'string', multiple: true },
    group: { type: 'string' },
    'dry-run': { type: 'boolean', default: false },
  },
});
const brokers = process.env.KAFKA_BROKERS;
if (!brokers || !values.topic) {
  process.stderr.write(
    'usage: KAFKA_BROKERS=host:9092 dlq-replay --topic <source topic> [--code C] [--group G] [--dry-run]\n',
  );
  process.exit(64);
}
const dlqTopic = dlqTopicOf(`${process.env.TOPIC_PREFIX ?? ''}${values.topic}`);
let security: KafkaSecurity | undefined;
let exists = false;
let kafka: ReturnType<typeof createKafka> | undefined;
try {
  security = kafkaSecurityFromEnv();
  kafka = createKafka({ brokers: brokerList(brokers), clientId: 'dlq-replay', security });
  const admin = kafka.admin();
  await admin.connect();
  exists = (await listTopicsSettled(admin)).includes(dlqTopic);
  await admin.disconnect();
} catch (error) {
  exitOnKafkaFailure('dlq-replay', error, security);
}
if (!exists) {
  process.stderr.write(`dlq-replay: no topic ${dlqTopic} (is --topic the source topic, and TOPIC_PREFIX right?)\n`);
  process.exit(66);
}
const result = await replayDeadLetters({
  kafka: kafka as NonNullable<typeof kafka>,
  dlqTopic,
  ...(values.code ? { codes: values.code } : {}),
  ...(values.group ? { group: values.group } : {}),
  dryRun: values['dry-run'],
});
process.stdout.write(`${JSON.stringify({ dlqTopic, dryRun: values['dry-run'], ...result }, null, 2)}\n`);
