/**
 * The Kafka ACLs of every principal, generated from the topic declaration (topics.ts) and one table
 * of roles: who produces and who consumes which declared topic. Nothing here is written by hand per
 * topic, so a new topic or a new consumer changes the ACLs, the docs (docs/operations.md, checked by
 * a test) and the start-up check (access.ts) together.
 *
 * What a role needs, and why:
 *   consumes T   READ on T; WRITE and DESCRIBE_CONFIGS on T.dlq (the consumer runner dead-letters
 *                there and reads its max.message.bytes)
 *   produces T   WRITE and DESCRIBE_CONFIGS on T (the producer cuts requests below max.message.bytes)
 *   groupPrefix  READ on groups starting with it (the service's CONSUMER_GROUP and its replay groups)
 * READ and WRITE imply DESCRIBE, and WRITE on any topic implies IdempotentWrite on the cluster
 * (Kafka 3.0+; KIP-679), which our idempotent producer needs. No role has a transactional id: the
 * producer is idempotent, not transactional (ADR 004).
 */
import { dlqTopicOf, topics, type TopicId } from './topics.js';

export interface KafkaRole {
  readonly description: string;
  readonly produces: readonly TopicId[];
  readonly consumes: readonly TopicId[];
  /** Consumer groups, PREFIXED: the service's CONSUMER_GROUP default and the groups its commands use. */
  readonly groupPrefix?: string;
  /** Creates and reconfigures every declared topic and its DLQ (topics:ensure, the topics Job). */
  readonly managesTopics?: boolean;
  /** Reads every DLQ and writes back to its source topic (dlq:replay). */
  readonly replaysDeadLetters?: boolean;
}

/**
 * One principal per service, plus the upstream publisher, the two operator commands and the console. A service's
 * role name is its name (buildServiceApp looks it up to check its ACLs at start).
 */
export const kafkaRoles = {
  planner: {
    description: 'the planner service (its HTTP ingress publishes requests too)',
    produces: ['outreachRequested', 'sendRequested', 'conversationEvents', 'outreachRejected'],
    consumes: ['outreachRequested', 'conversationEvents', 'sendRecorded'],
    groupPrefix: 'planner',
  },
  sender: {
    description: 'the sender service',
    produces: ['sendRecorded', 'suppressions'],
    consumes: ['sendRequested'],
    groupPrefix: 'sender',
  },
  experiment: {
    description: 'the experiment service (and its replay-exposures command): exposures, and replies for the reply rate',
    produces: ['assignments'],
    consumes: ['sendRecorded', 'conversationEvents'],
    groupPrefix: 'experiment',
  },
  liveness: {
    description: 'the liveness service (and its rebuild command); it closes conversations too',
    produces: ['liveness', 'conversationEvents'],
    consumes: ['conversationEvents', 'sendRecorded'],
    groupPrefix: 'liveness',
  },
  publisher: {
    description: 'an upstream system that asks for outreach, and reads which of its requests were refused',
    produces: ['outreachRequested'],
    consumes: ['outreachRejected'],
    groupPrefix: 'publisher',
  },
  'topics-admin': {
    description: 'topics:ensure (the topics Job)',
    produces: [],
    consumes: [],
    managesTopics: true,
  },
  'dlq-replay': {
    description: 'dlq:replay, run by an operator',
    produces: [],
    consumes: [],
    groupPrefix: 'dlq-replay.',
    replaysDeadLetters: true,
  },
  /**
   * The operations console's dead-letter pages (ADR 015): it reads the DLQs (browsing in throw-away
   * groups under `dlq-replay.browse.`, never committing) and replays them with dlq:replay's code,
   * under the same groups, so a replay from the console and one from the command resume alike.
   */
  console: {
    description: "the operations console's dead-letter pages: read every DLQ, replay to the source topics",
    produces: [],
    consumes: [],
    groupPrefix: 'dlq-replay.',
    replaysDeadLetters: true,
  },
} as const satisfies Record<string, KafkaRole>;

export type KafkaRoleName = keyof typeof kafkaRoles;

export function isKafkaRole(name: string): name is KafkaRoleName {
  return Object.hasOwn(kafkaRoles, name);
}

export type AclResourceType = 'TOPIC' | 'GROUP' | 'CLUSTER';
export type AclPatternType = 'LITERAL' | 'PREFIXED';
export type AclOperation = 'READ' | 'WRITE' | 'CREATE' | 'DESCRIBE' | 'DESCRIBE_CONFIGS' | 'ALTER_CONFIGS';

/** One ALLOW rule, from any host. */
export interface AclBinding {
  readonly role: KafkaRoleName;
  readonly principal: string;
  readonly resourceType: AclResourceType;
  readonly resourceName: string;
  readonly patternType: AclPatternType;
  readonly operation: AclOperation;
}

export interface KafkaAclOptions {
  /** TOPIC_PREFIX of the deployment (tests, parallel environments); empty in production. */
  readonly topicPrefix?: string;
  /** Prefix of every consumer group (tests give each run its own); empty in production. */
  readonly groupPrefix?: string;
  /** The principal of each role; default `User:<role>` (SASL username, token subject, certificate CN). */
  readonly principals?: Partial<Record<KafkaRoleName, string>>;
  /** Only these roles (default: all). */
  readonly roles?: readonly KafkaRoleName[];
}

/** Every ACL the roles need, in a stable order, without duplicates. Pure. */
export function kafkaAcls(options: KafkaAclOptions = {}): AclBinding[] {
  const prefix = options.topicPrefix ?? '';
  const name = (id: TopicId) => `${prefix}${topics[id].name}`;
  const roleNames = options.roles ?? (Object.keys(kafkaRoles) as KafkaRoleName[]);
  const seen = new Set<string>();
  const out: AclBinding[] = [];
  for (const role of roleNames) {
    const spec: KafkaRole = kafkaRoles[role];
    const principal = options.principals?.[role] ?? `User:${role}`;
    const add = (
      resourceType: AclResourceType,
      resourceName: string,
      operation: AclOperation,
      patternType: AclPatternType = 'LITERAL',
    ) => {
      const key = [principal, resourceType, resourceName, patternType, operation].join('\u0000');
      if (seen.has(key)) return;
      seen.add(key);
      out.push({ role, principal, resourceType, resourceName, patternType, operation });
    };
    for (const id of spec.consumes) {
      add('TOPIC', name(id), 'READ');
      add('TOPIC', dlqTopicOf(name(id)), 'WRITE');
      add('TOPIC', dlqTopicOf(name(id)), 'DESCRIBE_CONFIGS');
    }
    for (const id of spec.produces) {
      add('TOPIC', name(id), 'WRITE');
      add('TOPIC', name(id), 'DESCRIBE_CONFIGS');
    }
    if (spec.groupPrefix !== undefined) {
      add('GROUP', `${options.groupPrefix ?? ''}${spec.groupPrefix}`, 'READ', 'PREFIXED');
    }
    const all = Object.keys(topics) as TopicId[];
    if (spec.managesTopics) {
      for (const topic of all.flatMap((id) => [name(id), dlqTopicOf(name(id))])) {
        for (const operation of ['CREATE', 'DESCRIBE', 'DESCRIBE_CONFIGS', 'ALTER_CONFIGS'] as const) {
          add('TOPIC', topic, operation);
        }
      }
    }
    if (spec.replaysDeadLetters) {
      for (const id of all) {
        add('TOPIC', dlqTopicOf(name(id)), 'READ');
        add('TOPIC', name(id), 'WRITE');
        add('TOPIC', name(id), 'DESCRIBE_CONFIGS');
      }
    }
  }
  return out;
}

/** What a role must be allowed to do, as the start-up check asks it of the broker. */
export interface KafkaAccessNeeds {
  readonly read: readonly string[];
  readonly write: readonly string[];
  readonly groups: readonly string[];
}

/** The topics a role reads and writes (groups are checked by their concrete ids, which the consumers know). */
export function roleAccessNeeds(role: KafkaRoleName, topicPrefix = ''): KafkaAccessNeeds {
  const acls = kafkaAcls({ topicPrefix, roles: [role] });
  const topicsWith = (operation: AclOperation) =>
    acls.filter((a) => a.resourceType === 'TOPIC' && a.operation === operation).map((a) => a.resourceName);
  return { read: topicsWith('READ'), write: topicsWith('WRITE'), groups: [] };
}

// ---------------------------------------------------------------- renderings

const cliOperation: Record<AclOperation, string> = {
  READ: 'Read',
  WRITE: 'Write',
  CREATE: 'Create',
  DESCRIBE: 'Describe',
  DESCRIBE_CONFIGS: 'DescribeConfigs',
  ALTER_CONFIGS: 'AlterConfigs',
};

/** Bindings of one principal and resource together: one command, one Strimzi rule, one table row. */
function grouped(acls: readonly AclBinding[]): Array<{ first: AclBinding; operations: AclOperation[] }> {
  const groups = new Map<string, { first: AclBinding; operations: AclOperation[] }>();
  for (const acl of acls) {
    const key = [acl.principal, acl.resourceType, acl.resourceName, acl.patternType].join('\u0000');
    const group = groups.get(key) ?? { first: acl, operations: [] };
    group.operations.push(acl.operation);
    groups.set(key, group);
  }
  return [...groups.values()];
}

/** `kafka-acls.sh` commands (Apache Kafka, Strimzi, Aiven, MSK with SASL/SCRAM or mTLS). */
export function renderKafkaAclsCommands(acls: readonly AclBinding[]): string {
  return grouped(acls)
    .map(({ first, operations }) => {
      const resource =
        first.resourceType === 'TOPIC'
          ? `--topic '${first.resourceName}'`
          : first.resourceType === 'GROUP'
            ? `--group '${first.resourceName}'`
            : '--cluster';
      const pattern = first.patternType === 'PREFIXED' ? ' --resource-pattern-type prefixed' : '';
      const ops = operations.map((o) => `--operation ${cliOperation[o]}`).join(' ');
      return `kafka-acls.sh --bootstrap-server "$BOOTSTRAP" --command-config "$ADMIN_CONFIG" --add --allow-principal '${first.principal}' ${ops} ${resource}${pattern}`;
    })
    .join('\n');
}

/** Strimzi KafkaUser resources (`spec.authorization` of type simple), one per role. */
export function renderStrimziKafkaUsers(
  acls: readonly AclBinding[],
  options: { cluster: string; authentication: 'scram-sha-512' | 'tls'; namespace?: string },
): string {
  const byRole = new Map<KafkaRoleName, AclBinding[]>();
  for (const acl of acls) byRole.set(acl.role, [...(byRole.get(acl.role) ?? []), acl]);
  const documents = [...byRole].map(([role, roleAcls]) => {
    const rules = grouped(roleAcls).map(({ first, operations }) =>
      [
        '      - resource:',
        `          type: ${first.resourceType === 'TOPIC' ? 'topic' : first.resourceType === 'GROUP' ? 'group' : 'cluster'}`,
        ...(first.resourceType === 'CLUSTER' ? [] : [`          name: ${first.resourceName}`]),
        ...(first.resourceType === 'CLUSTER'
          ? []
          : [`          patternType: ${first.patternType === 'PREFIXED' ? 'prefix' : 'literal'}`]),
        `        operations: [${operations.map((o) => cliOperation[o]).join(', ')}]`,
      ].join('\n'),
    );
    return [
      // Strimzi 1.0 serves only v1 (v1beta2 was removed); v1 requires `operations`, not `operation`.
      'apiVersion: kafka.strimzi.io/v1',
      'kind: KafkaUser',
      'metadata:',
      `  name: ${role}`,
      ...(options.namespace ? [`  namespace: ${options.namespace}`] : []),
      '  labels:',
      `    strimzi.io/cluster: ${options.cluster}`,
      'spec:',
      '  authentication:',
      `    type: ${options.authentication}`,
      '  authorization:',
      '    type: simple',
      '    acls:',
      ...rules,
    ].join('\n');
  });
  return documents.join('\n---\n');
}

/**
 * The table in docs/operations.md ("Kafka ACLs per principal"), one row per role; a test keeps the
 * two equal. Every written topic also has DescribeConfigs; topics-admin's topics have Create,
 * Describe, DescribeConfigs and AlterConfigs.
 */
export function renderAclMarkdown(acls: readonly AclBinding[]): string {
  const roles = [...new Set(acls.map((a) => a.role))];
  const list = (names: string[]) => (names.length === 0 ? '—' : names.map((n) => `\`${n}\``).join(', '));
  const rows = roles.map((role) => {
    const mine = acls.filter((a) => a.role === role);
    const on = (type: AclResourceType, operation: AclOperation) =>
      mine.filter((a) => a.resourceType === type && a.operation === operation).map((a) => a.resourceName);
    return `| \`${mine[0]?.principal}\` | ${list(on('TOPIC', 'READ'))} | ${list(on('TOPIC', 'WRITE'))} | ${list(on('GROUP', 'READ'))} | ${list(on('TOPIC', 'CREATE'))} |`;
  });
  return [
    '| principal | reads (Read) | writes (Write, DescribeConfigs) | consumer groups, by prefix (Read) | manages (Create, Describe, DescribeConfigs, AlterConfigs) |',
    '| --- | --- | --- | --- | --- |',
    ...rows,
  ].join('\n');
}
