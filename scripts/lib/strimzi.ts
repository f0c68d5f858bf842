/**
 * Strimzi custom resources generated from the topic declaration (packages/shared/src/kafka/topics.ts)
 * and the ACL role table (packages/shared/src/kafka/acls.ts), in Strimzi's `kafka.strimzi.io/v1` API
 * (Strimzi 1.0 serves nothing older). Pure: `scripts/deploy.ts` writes them, the deployment tests
 * compare the committed files and the rendered overlays with them.
 *
 * v1 against v1beta2 (the CRDs of Strimzi 1.0): `spec` is required in both kinds; a KafkaUser ACL rule
 * has `operations` (required), no `operation`; `resource.type` is topic|group|cluster|transactionalId,
 * `resource.patternType` literal|prefix; `host` defaults to `*` and is left out.
 */
import { declaredTopics, kafkaAcls, type AclBinding, type AclOperation, type KafkaRoleName } from '@outreach/shared';

export const STRIMZI_API_VERSION = 'kafka.strimzi.io/v1';
/** The Strimzi `Kafka` resource the topics and users belong to, and the replication factor topics get. */
export const STRIMZI_CLUSTER = 'outreach-kafka';
export const STRIMZI_REPLICAS = 3;
/**
 * The principals that get a KafkaUser: one per service, the console (its dead-letter pages), and the
 * upstream publisher (whose Secret its team copies out). topics-admin has no user: the Topic Operator creates the topics. dlq-replay is an
 * operator's occasional command: `npm run acls:print -- --role dlq-replay --format strimzi` when needed.
 */
export const STRIMZI_USER_ROLES = [
  'planner',
  'sender',
  'experiment',
  'liveness',
  'console',
  'publisher',
] as const satisfies readonly KafkaRoleName[];
export type StrimziAuthentication = 'scram-sha-512' | 'tls';

/**
 * The keys of the Secret the User Operator writes for a KafkaUser, named after it: what a pod may
 * mount from it. `ca.crt` of a tls user is the clients CA, not the cluster CA that signs the brokers.
 */
export const STRIMZI_USER_SECRET_KEYS: Record<StrimziAuthentication, readonly string[]> = {
  'scram-sha-512': ['password', 'sasl.jaas.config'],
  tls: ['ca.crt', 'user.crt', 'user.key', 'user.p12', 'user.password'],
};

export interface StrimziAclRule {
  resource: { type: 'topic' | 'group' | 'cluster'; name?: string; patternType?: 'literal' | 'prefix' };
  operations: string[];
}

export interface KafkaUserResource {
  apiVersion: typeof STRIMZI_API_VERSION;
  kind: 'KafkaUser';
  metadata: { name: string; labels: Record<string, string> };
  spec: {
    authentication: { type: StrimziAuthentication };
    authorization: { type: 'simple'; acls: StrimziAclRule[] };
  };
}

const operationName: Record<AclOperation, string> = {
  READ: 'Read',
  WRITE: 'Write',
  CREATE: 'Create',
  DESCRIBE: 'Describe',
  DESCRIBE_CONFIGS: 'DescribeConfigs',
  ALTER_CONFIGS: 'AlterConfigs',
};

/** One rule per resource, its operations in the generator's order. */
export function strimziAclRules(acls: readonly AclBinding[]): StrimziAclRule[] {
  const rules = new Map<string, StrimziAclRule>();
  for (const acl of acls) {
    const key = [acl.resourceType, acl.resourceName, acl.patternType].join('\u0000');
    const rule = rules.get(key) ?? {
      resource:
        acl.resourceType === 'CLUSTER'
          ? { type: 'cluster' }
          : {
              type: acl.resourceType === 'TOPIC' ? 'topic' : 'group',
              name: acl.resourceName,
              patternType: acl.patternType === 'PREFIXED' ? 'prefix' : 'literal',
            },
      operations: [],
    };
    rule.operations.push(operationName[acl.operation]);
    rules.set(key, rule);
  }
  return [...rules.values()];
}

/** The KafkaUser of each principal, its ACLs those the generator gives its role (no topic prefix). */
export function strimziKafkaUsers(authentication: StrimziAuthentication): KafkaUserResource[] {
  return STRIMZI_USER_ROLES.map((role) => ({
    apiVersion: STRIMZI_API_VERSION,
    kind: 'KafkaUser',
    metadata: { name: role, labels: { 'strimzi.io/cluster': STRIMZI_CLUSTER } },
    spec: {
      authentication: { type: authentication },
      authorization: { type: 'simple', acls: strimziAclRules(kafkaAcls({ roles: [role] })) },
    },
  }));
}

/** One KafkaTopic per declared topic and dead-letter topic. */
export function strimziKafkaTopics(): object[] {
  return declaredTopics('', undefined, STRIMZI_REPLICAS).map((topic) => ({
    apiVersion: STRIMZI_API_VERSION,
    kind: 'KafkaTopic',
    metadata: { name: topic.name, labels: { 'strimzi.io/cluster': STRIMZI_CLUSTER } },
    spec: { topicName: topic.name, partitions: topic.partitions, replicas: STRIMZI_REPLICAS, config: topic.config },
  }));
}

/** An ACL rule back to the generator's bindings (`role`, `principal` as the generator names them). */
export function bindingsOfRules(role: KafkaRoleName, rules: readonly StrimziAclRule[]): AclBinding[] {
  const operationOf = Object.fromEntries(Object.entries(operationName).map(([k, v]) => [v, k])) as Record<
    string,
    AclOperation
  >;
  return rules.flatMap((rule) =>
    (rule.operations ?? []).map((operation) => ({
      role,
      principal: `User:${role}`,
      resourceType: rule.resource.type === 'topic' ? 'TOPIC' : rule.resource.type === 'group' ? 'GROUP' : 'CLUSTER',
      resourceName: rule.resource.name ?? 'kafka-cluster',
      patternType: rule.resource.patternType === 'prefix' ? 'PREFIXED' : 'LITERAL',
      operation: operationOf[operation] ?? (operation as AclOperation),
    })),
  );
}
