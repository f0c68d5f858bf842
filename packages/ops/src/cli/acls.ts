/**
 * `acls:print`: the Kafka ACLs of every principal, generated from the topic declaration and the role
 * table (kafka/acls.ts), in the form a platform team applies them.
 *
 *   npm run acls:print -- [--format table|kafka-acls|strimzi|json] [--role sender ...]
 *                         [--topic-prefix P] [--group-prefix G] [--principal sender=User:CN=sender ...]
 *                         [--strimzi-cluster my-cluster] [--strimzi-auth scram-sha-512|tls] [--apply]
 *
 * `--apply` creates them through the Admin API instead (KAFKA_BROKERS and the KAFKA_SSL*, KAFKA_SASL*
 * variables of a principal allowed to alter ACLs); creating an existing ACL changes nothing.
 */
import { parseArgs } from 'node:util';
import { brokerList } from '@outreach/shared';
import { explainKafkaError } from '@outreach/shared';
import { applyKafkaAcls } from '@outreach/shared';
import {
  isKafkaRole,
  kafkaAcls,
  renderAclMarkdown,
  renderKafkaAclsCommands,
  renderStrimziKafkaUsers,
  type KafkaRoleName,
} from '@outreach/shared';
import { createKafka } from '@outreach/shared';
import { kafkaSecurityFromEnv } from '@outreach/shared';

function fail(message: string, code: number): never {
  process.stderr.write(`acls: ${message}\n`);
  process.exit(code);
}

const { values } = parseArgs({
  options: {
    format: { type: 'string', default: 'table' },
    role: { type: 'string', multiple: true },
    'topic-prefix': { type: 'string', default: process.env.TOPIC_PREFIX ?? '' },
    'group-prefix': { type: 'string', default: '' },
    principal: { type: 'string', multiple: true },
    'strimzi-cluster': { type: 'string', default: 'my-cluster' },
    'strimzi-auth': { type: 'string', default: 'scram-sha-512' },
    apply: { type: 'boolean', default: false },
  },
});

const roles = (values.role ?? []).map((role) => (isKafkaRole(role) ? role : fail(`no role "${role}"`, 64)));
const principals: Partial<Record<KafkaRoleName, string>> = {};
for (const entry of values.principal ?? []) {
  const [role = '', principal = ''] = entry.split(/=(.*)/s);
  if (!isKafkaRole(role) || !principal.includes(':')) fail(`--principal wants role=Type:name, got "${entry}"`, 64);
  principals[role] = principal;
}
const acls = kafkaAcls({
  topicPrefix: values['topic-prefix'],
  groupPrefix: values['group-prefix'],
  principals,
  ...(roles.length > 0 ? { roles } : {}),
});

if (values.apply) {
  const brokers = process.env.KAFKA_BROKERS ?? fail('--apply needs KAFKA_BROKERS', 64);
  const security = kafkaSecurityFromEnv();
  const admin = createKafka({ brokers: brokerList(brokers), clientId: 'acls-apply', security }).admin();
  try {
    await admin.connect();
    await applyKafkaAcls(admin, acls);
  } catch (error) {
    const known = explainKafkaError(error, security);
    fail(known?.message ?? (error as Error).message, known && known.failure !== 'unreachable' ? 78 : 69);
  } finally {
    await admin.disconnect().catch(() => undefined);
  }
  console.log(`applied ${acls.length} ACLs for ${[...new Set(acls.map((a) => a.principal))].join(', ')}`);
} else {
  switch (values.format) {
    case 'table':
      console.log(renderAclMarkdown(acls));
      break;
    case 'kafka-acls':
      console.log(renderKafkaAclsCommands(acls));
      break;
    case 'strimzi': {
      const authentication = values['strimzi-auth'];
      if (authentication !== 'scram-sha-512' && authentication !== 'tls')
        fail('--strimzi-auth is scram-sha-512 or tls', 64);
      console.log(renderStrimziKafkaUsers(acls, { cluster: values['strimzi-cluster'], authentication }));
      break;
    }
    case 'json':
      console.log(JSON.stringify(acls, null, 2));
      break;
    default:
      fail(`--format is table, kafka-acls, strimzi or json, not "${values.format}"`, 64);
  }
}
