/**
 * The one declaration of every topic. `topics:ensure` creates what is missing and aligns the
 * configuration of what exists; it never lowers or raises a partition count on its own, because
 * that would move keys between partitions and break per-candidate order.
 */
import type { Admin, ITopicConfig } from 'kafkajs';
import type { EventType } from '@outreach/contracts';

export interface TopicSpec {
  readonly name: string;
  readonly partitions: number;
  readonly retentionMs: number;
  /** Event time is the broker's append time (liveness relies on it). */
  readonly logAppendTime: boolean;
  readonly eventTypes: readonly EventType[];
  /** Carries a raw email address or body: internal only, never for data teams. */
  readonly pii: boolean;
  readonly description: string;
  /** What the Kafka message key is, when it is not the canonical candidate key. */
  readonly key?: string;
}

const DAY = 24 * 60 * 60 * 1000;
const PARTITIONS = 12;

export const topics = {
  outreachRequested: {
    name: 'outreach.requested.v1',
    partitions: PARTITIONS,
    retentionMs: 14 * DAY,
    logAppendTime: false,
    eventTypes: ['OutreachRequested'],
    pii: true,
    description: 'requests for outreach from other systems and the planner HTTP ingress',
  },
  sendRequested: {
    name: 'outreach.send-requested.v1',
    partitions: PARTITIONS,
    retentionMs: 14 * DAY,
    logAppendTime: false,
    eventTypes: ['SendRequested'],
    pii: true,
    description: 'sends the planner asks the sender to make (internal; carries the address)',
  },
  sendRecorded: {
    name: 'outreach.send-recorded.v1',
    partitions: PARTITIONS,
    retentionMs: 365 * DAY,
    logAppendTime: true,
    eventTypes: ['SendRecorded'],
    pii: false,
    description: 'the terminal outcome of every send',
  },
  assignments: {
    name: 'experiment.assignments.v1',
    partitions: PARTITIONS,
    retentionMs: 365 * DAY,
    logAppendTime: false,
    eventTypes: ['VariantAssigned', 'VariantContaminated'],
    pii: false,
    description: 'sticky A/B assignments and contamination findings',
  },
  conversationEvents: {
    name: 'conversation.events.v1',
    partitions: PARTITIONS,
    retentionMs: 365 * DAY,
    logAppendTime: true,
    eventTypes: [
      'ConversationStarted',
      'MessageReceived',
      'NextStepScheduled',
      'StepCompleted',
      'StepCancelled',
      'ConversationClosed',
      'SequencePlanned',
    ],
    pii: false,
    description: 'what happens in each conversation, from agents, the planner and liveness (closes)',
  },
  liveness: {
    name: 'conversation.liveness.v1',
    partitions: PARTITIONS,
    retentionMs: 365 * DAY,
    logAppendTime: false,
    eventTypes: ['ConversationStalled', 'ConversationRecovered'],
    pii: false,
    description: 'conversations flagged for lacking a next step, and their recovery',
  },
  suppressions: {
    name: 'outreach.suppressions.v1',
    partitions: PARTITIONS,
    retentionMs: 365 * DAY,
    logAppendTime: false,
    eventTypes: ['AddressSuppressed'],
    pii: false,
    description: 'addresses the sender put on its suppression list (unsubscribes, bounces, complaints, operators)',
    key: 'emailHash',
  },
  outreachRejected: {
    name: 'outreach.rejected.v1',
    partitions: PARTITIONS,
    retentionMs: 30 * DAY,
    logAppendTime: false,
    eventTypes: ['OutreachRejected'],
    pii: false,
    description: 'outreach requests the planner refused, with a reason code, for the systems that sent them',
    key: 'requestId',
  },
} as const satisfies Record<string, TopicSpec>;

export type TopicId = keyof typeof topics;

export const DLQ_SUFFIX = '.dlq';
const DLQ_RETENTION_MS = 30 * DAY;

export function dlqTopicOf(topic: string): string {
  return `${topic}${DLQ_SUFFIX}`;
}

/** Topic names as deployed: tests and parallel environments add a prefix. */
export function topicName(id: TopicId, prefix = ''): string {
  return `${prefix}${topics[id].name}`;
}

/**
 * Every topic with its configuration, DLQs included. With three or more replicas a write (acks=all)
 * needs two in sync, so losing one broker loses no acknowledged event.
 */
export function declaredTopics(
  prefix = '',
  partitions?: number,
  replicationFactor?: number,
): Array<{ name: string; partitions: number; config: Record<string, string> }> {
  return Object.values(topics).flatMap((spec: TopicSpec) => {
    const base = {
      'retention.ms': String(spec.retentionMs),
      'message.timestamp.type': spec.logAppendTime ? 'LogAppendTime' : 'CreateTime',
      'cleanup.policy': 'delete',
      'min.insync.replicas': (replicationFactor ?? 1) >= 3 ? '2' : '1',
    };
    return [
      { name: `${prefix}${spec.name}`, partitions: partitions ?? spec.partitions, config: base },
      {
        name: dlqTopicOf(`${prefix}${spec.name}`),
        partitions: partitions ?? spec.partitions,
        config: { ...base, 'retention.ms': String(DLQ_RETENTION_MS), 'message.timestamp.type': 'CreateTime' },
      },
    ];
  });
}

export interface EnsureTopicsResult {
  readonly created: string[];
  readonly reconfigured: string[];
  readonly unchanged: string[];
  /** Existing topics whose partition count differs from the declaration (left as they are). */
  readonly partitionMismatch: Array<{ name: string; declared: number; actual: number }>;
}

/**
 * What a KRaft broker answers while its metadata catches up with a create or a delete: the
 * controller has committed the change, the broker's metadata image does not show it yet (a listing
 * that meets a topic being deleted, a new topic without its leaders), or shows a leader whose replica
 * manager has not taken the partition on yet. kafkajs retries only the second, and only inside
 * createTopics; all pass within moments, more slowly on a busy broker.
 */
const SETTLING = new Set(['UNKNOWN_TOPIC_OR_PARTITION', 'LEADER_NOT_AVAILABLE', 'NOT_LEADER_FOR_PARTITION']);

/** Retries `attempt` while Kafka's metadata settles (see SETTLING), up to `timeoutMs`; rethrows anything else. */
export async function whileMetadataSettles<T>(attempt: () => Promise<T>, timeoutMs = 30_000): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    try {
      return await attempt();
    } catch (error) {
      if (!SETTLING.has((error as { type?: string }).type ?? '') || Date.now() >= deadline) throw error;
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
  }
}

/** admin.listTopics(), retried while a topic being created or deleted elsewhere makes the listing fail. */
export function listTopicsSettled(admin: Admin, timeoutMs?: number): Promise<string[]> {
  return whileMetadataSettles(() => admin.listTopics(), timeoutMs);
}

/**
 * Resolves once every partition of `names` has a leader that answers for it (kafkajs' waitForLeaders
 * gives up on a busy KRaft broker). A leader in the metadata is not enough: a KRaft broker publishes
 * its metadata image before its replica manager takes the partition on, and a produce in between
 * fails on that partition while the others of the same request are written, so a retried
 * non-idempotent produce writes those twice. ListOffsets goes to each partition's leader; kafkajs
 * gives up at once on NOT_LEADER_FOR_PARTITION, so we ask again until every leader answers. (It asks
 * the leader of its cached metadata: a new topic whose leader moves within these moments waits out
 * the deadline, which only a multi-broker cluster in trouble could cause.)
 */
async function leadersElected(admin: Admin, names: readonly string[]): Promise<void> {
  await whileMetadataSettles(async () => {
    const { topics: described } = await admin.fetchTopicMetadata({ topics: [...names] });
    const leaderless = described.filter((t) => t.partitions.length === 0 || t.partitions.some((p) => p.leader < 0));
    if (leaderless.length > 0 || described.length < names.length)
      throw Object.assign(new Error(`no leader yet for ${leaderless.map((t) => t.name).join(', ')}`), {
        type: 'LEADER_NOT_AVAILABLE',
      });
  }, 60_000);
  for (const name of names) await whileMetadataSettles(() => admin.fetchTopicOffsets(name), 60_000);
}

/**
 * admin.createTopics, then waits until every partition has a leader the broker answers for. Use it
 * instead of `createTopics({ waitForLeaders: true })`, which gives up on a busy KRaft broker (see
 * SETTLING); resolves to whether anything was created, like createTopics.
 */
export async function createTopicsSettled(admin: Admin, topics: ITopicConfig[]): Promise<boolean> {
  const created = await admin.createTopics({ waitForLeaders: false, topics });
  await leadersElected(
    admin,
    topics.map((t) => t.topic),
  );
  return created;
}

/** Idempotent: running it twice changes nothing the second time. */
export async function ensureTopics(
  admin: Admin,
  options: { prefix?: string; partitions?: number; replicationFactor?: number } = {},
): Promise<EnsureTopicsResult> {
  const declared = declaredTopics(options.prefix, options.partitions, options.replicationFactor);
  const existing = new Set(await listTopicsSettled(admin));
  const missing = declared.filter((t) => !existing.has(t.name));
  const result: EnsureTopicsResult = { created: [], reconfigured: [], unchanged: [], partitionMismatch: [] };
  if (missing.length > 0) {
    await createTopicsSettled(
      admin,
      missing.map((t) => ({
        topic: t.name,
        numPartitions: t.partitions,
        replicationFactor: options.replicationFactor ?? -1,
        configEntries: Object.entries(t.config).map(([name, value]) => ({ name, value })),
      })),
    );
    result.created.push(...missing.map((t) => t.name));
  }
  const present = declared.filter((t) => existing.has(t.name));
  if (present.length === 0) return result;

  const metadata = await admin.fetchTopicMetadata({ topics: present.map((t) => t.name) });
  const described = await admin.describeConfigs({
    includeSynonyms: false,
    resources: present.map((t) => ({ type: 2 /* TOPIC */, name: t.name, configNames: Object.keys(t.config) })),
  });
  for (const topic of present) {
    const actualPartitions = metadata.topics.find((m) => m.name === topic.name)?.partitions.length ?? 0;
    if (actualPartitions !== topic.partitions) {
      result.partitionMismatch.push({ name: topic.name, declared: topic.partitions, actual: actualPartitions });
    }
    const entries = described.resources.find((r) => r.resourceName === topic.name)?.configEntries ?? [];
    const drift = Object.entries(topic.config).filter(
      ([name, value]) => entries.find((e) => e.configName === name)?.configValue !== value,
    );
    if (drift.length === 0) {
      result.unchanged.push(topic.name);
      continue;
    }
    await admin.alterConfigs({
      validateOnly: false,
      resources: [
        {
          type: 2,
          name: topic.name,
          configEntries: Object.entries(topic.config).map(([name, value]) => ({ name, value })),
        },
      ],
    });
    result.reconfigured.push(topic.name);
  }
  return result;
}
