import type { Admin } from 'kafkajs';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { uniqueName } from '@outreach/testkit';
import { waitFor } from '../wait.js';
import { createKafka } from './client.js';
import { declaredTopics, dlqTopicOf, ensureTopics, topicName } from './topics.js';

let admin: Admin;

beforeAll(async () => {
  admin = createKafka({ brokers: inject('kafkaBrokers').split(','), clientId: 'topics-test' }).admin();
  await admin.connect();
});
afterAll(() => admin.disconnect());

describe('ensureTopics', () => {
  it('creates every declared topic and its DLQ once, then changes nothing', async () => {
    const prefix = `${uniqueName('topics')}.`;
    const first = await ensureTopics(admin, { prefix, partitions: 2 });
    expect(first.created.sort()).toEqual(
      declaredTopics(prefix)
        .map((t) => t.name)
        .sort(),
    );
    expect(first.created).toContain(dlqTopicOf(topicName('sendRecorded', prefix)));

    const second = await ensureTopics(admin, { prefix, partitions: 2 });
    expect(second.created).toEqual([]);
    expect(second.reconfigured).toEqual([]);
    expect(second.unchanged).toHaveLength(first.created.length);
    expect(second.partitionMismatch).toEqual([]);
  });

  it('uses the broker clock where the design says so, and restores drifted configuration', async () => {
    const prefix = `${uniqueName('topics_cfg')}.`;
    await ensureTopics(admin, { prefix, partitions: 1 });
    const conversation = topicName('conversationEvents', prefix);
    const describe = async (name: string, config: string) =>
      (await admin.describeConfigs({ includeSynonyms: false, resources: [{ type: 2, name, configNames: [config] }] }))
        .resources[0]?.configEntries[0]?.configValue;
    expect(await describe(conversation, 'message.timestamp.type')).toBe('LogAppendTime');
    expect(await describe(topicName('sendRecorded', prefix), 'message.timestamp.type')).toBe('LogAppendTime');
    expect(await describe(topicName('sendRequested', prefix), 'message.timestamp.type')).toBe('CreateTime');

    await admin.alterConfigs({
      validateOnly: false,
      resources: [
        { type: 2, name: conversation, configEntries: [{ name: 'message.timestamp.type', value: 'CreateTime' }] },
      ],
    });
    // KRaft applies a config change to the broker's metadata image a moment after the controller
    // committed it; a describe in between still shows the old value.
    await waitFor(async () => (await describe(conversation, 'message.timestamp.type')) === 'CreateTime', {
      timeoutMs: 30_000,
      description: 'the drifted configuration visible',
    });
    const result = await ensureTopics(admin, { prefix, partitions: 1 });
    expect(result.reconfigured).toEqual([conversation]);
    await waitFor(async () => (await describe(conversation, 'message.timestamp.type')) === 'LogAppendTime', {
      timeoutMs: 30_000,
      description: 'the declared configuration restored',
    });

    const mismatch = await ensureTopics(admin, { prefix, partitions: 3 });
    expect(mismatch.partitionMismatch).toContainEqual({ name: conversation, declared: 3, actual: 1 });
  });
});
