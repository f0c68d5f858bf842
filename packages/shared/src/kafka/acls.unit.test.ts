import { readdirSync, readFileSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import {
  kafkaAcls,
  kafkaRoles,
  renderAclMarkdown,
  renderKafkaAclsCommands,
  renderStrimziKafkaUsers,
  roleAccessNeeds,
  type AclBinding,
  type KafkaRoleName,
} from './acls.js';
import { topics, type TopicId } from './topics.js';

const root = join(import.meta.dirname, '..', '..', '..', '..');
const acls = kafkaAcls();
const of = (role: KafkaRoleName) => acls.filter((a) => a.role === role);
const topicsWith = (list: readonly AclBinding[], operation: AclBinding['operation']) =>
  list.filter((a) => a.resourceType === 'TOPIC' && a.operation === operation).map((a) => a.resourceName);

describe('the Kafka ACLs generated from the topic declaration', () => {
  it('lets the sender write only the outcomes, the suppressions and its DLQ: never outreach.requested.v1', () => {
    expect(topicsWith(of('sender'), 'WRITE').sort()).toEqual(
      ['outreach.send-recorded.v1', 'outreach.suppressions.v1', 'outreach.send-requested.v1.dlq'].sort(),
    );
    expect(topicsWith(of('sender'), 'READ')).toEqual(['outreach.send-requested.v1']);
    expect(acls.some((a) => a.role === 'sender' && a.resourceName === 'outreach.requested.v1')).toBe(false);
  });

  it('lets a publisher write outreach.requested.v1 and read only its rejections (outreach.rejected.v1)', () => {
    expect(of('publisher').map((a) => `${a.resourceType} ${a.resourceName} ${a.operation}`)).toEqual([
      'TOPIC outreach.rejected.v1 READ',
      'TOPIC outreach.rejected.v1.dlq WRITE',
      'TOPIC outreach.rejected.v1.dlq DESCRIBE_CONFIGS',
      'TOPIC outreach.requested.v1 WRITE',
      'TOPIC outreach.requested.v1 DESCRIBE_CONFIGS',
      'GROUP publisher READ',
    ]);
    // Nothing else: no internal topic (addresses, bodies), no outcome, no other role's group.
    expect(topicsWith(of('publisher'), 'READ')).toEqual(['outreach.rejected.v1']);
  });

  it('gives each consumer Read on its topics, Write on their DLQs and Read on its group prefix', () => {
    for (const [role, spec] of Object.entries(kafkaRoles) as Array<
      [KafkaRoleName, (typeof kafkaRoles)[KafkaRoleName]]
    >) {
      const mine = of(role);
      for (const id of spec.consumes as readonly TopicId[]) {
        expect(topicsWith(mine, 'READ'), role).toContain(topics[id].name);
        expect(topicsWith(mine, 'WRITE'), role).toContain(`${topics[id].name}.dlq`);
      }
      for (const id of spec.produces as readonly TopicId[]) {
        expect(topicsWith(mine, 'WRITE'), role).toContain(topics[id].name);
        expect(topicsWith(mine, 'DESCRIBE_CONFIGS'), role).toContain(topics[id].name);
      }
      const groups = mine.filter((a) => a.resourceType === 'GROUP');
      if ('groupPrefix' in spec) {
        expect(groups, role).toEqual([
          expect.objectContaining({ resourceName: spec.groupPrefix, patternType: 'PREFIXED', operation: 'READ' }),
        ]);
      } else {
        expect(groups, role).toEqual([]);
      }
    }
  });

  it('has no transactional ids, no cluster-wide rights and no wildcard resources', () => {
    expect(acls.filter((a) => a.resourceType !== 'TOPIC' && a.resourceType !== 'GROUP')).toEqual([]);
    expect(
      acls.filter((a) => a.resourceName === '*' || (a.resourceType === 'TOPIC' && a.patternType !== 'LITERAL')),
    ).toEqual([]);
  });

  it('covers every declared topic and DLQ for topics-admin, and follows a topic prefix', () => {
    const managed = topicsWith(of('topics-admin'), 'CREATE');
    expect(managed.sort()).toEqual(
      Object.values(topics)
        .flatMap((t) => [t.name, `${t.name}.dlq`])
        .sort(),
    );
    const prefixed = kafkaAcls({ topicPrefix: 'run7.', groupPrefix: 'run7-', roles: ['sender'] });
    expect(topicsWith(prefixed, 'WRITE')).toContain('run7.outreach.send-recorded.v1');
    expect(prefixed.find((a) => a.resourceType === 'GROUP')?.resourceName).toBe('run7-sender');
    expect(roleAccessNeeds('sender', 'run7.')).toEqual({
      read: ['run7.outreach.send-requested.v1'],
      write: ['run7.outreach.send-requested.v1.dlq', 'run7.outreach.send-recorded.v1', 'run7.outreach.suppressions.v1'],
      groups: [],
    });
  });

  it("matches what each service's code reads and writes: a new topic or direction changes the role first", () => {
    // A service that starts writing a topic its role lacks would be refused on a secured cluster; one
    // that stops should not keep the grant. In the running service (everything but cli/), a topic in
    // a consumer's `topics: [...]` is read, any other use (a repository, a route) is written.
    for (const service of ['planner', 'sender', 'experiment', 'liveness'] as const) {
      const reads = new Set<string>();
      const writes = new Set<string>();
      const commands = new Set<string>();
      for (const file of sourceFiles(join(root, 'services', service, 'src'))) {
        const text = readFileSync(file, 'utf8');
        const consumed = [...text.matchAll(/topics:\s*\[([^\]]*)\]/g)].map((m) => [m.index, m.index + m[0].length]);
        for (const match of text.matchAll(/topicName\('(\w+)'/g)) {
          const id = match[1] as string;
          if (file.includes(`${join('src', 'cli')}`)) commands.add(id);
          else if (consumed.some(([from = 0, to = 0]) => match.index >= from && match.index < to)) reads.add(id);
          else writes.add(id);
        }
      }
      const spec = kafkaRoles[service];
      expect([...reads].sort(), `${service} reads`).toEqual([...spec.consumes].sort());
      expect([...writes].sort(), `${service} writes`).toEqual([...spec.produces].sort());
      for (const id of commands) expect([...spec.consumes, ...spec.produces], `${service} cli`).toContain(id);
    }
  });

  it('renders kafka-acls commands, Strimzi KafkaUsers and the docs table from the same bindings', () => {
    const sender = of('sender');
    expect(renderKafkaAclsCommands(sender)).toContain(
      "--allow-principal 'User:sender' --operation Read --group 'sender' --resource-pattern-type prefixed",
    );
    const strimzi = renderStrimziKafkaUsers(sender, { cluster: 'c1', authentication: 'scram-sha-512' });
    expect(strimzi).toContain('kind: KafkaUser');
    expect(strimzi).toContain('patternType: prefix');
    expect(strimzi).toContain('operations: [Write, DescribeConfigs]');

    // docs/operations.md carries the table between markers; prettier pads its cells, so compare cells.
    const docs = readFileSync(join(root, 'docs', 'operations.md'), 'utf8');
    const block = /<!-- kafka-acls:begin -->([\s\S]*?)<!-- kafka-acls:end -->/.exec(docs)?.[1];
    expect(block, 'docs/operations.md has the generated ACL table (npm run acls:print)').toBeDefined();
    const cells = (table: string) =>
      table
        .split('\n')
        .filter((line) => line.startsWith('|') && !/^\|[\s|:-]+\|$/.test(line))
        .map((line) =>
          line
            .split('|')
            .slice(1, -1)
            .map((cell) => cell.trim()),
        );
    expect(cells(block ?? ''), 'run `npm run acls:print` and paste the table into docs/operations.md').toEqual(
      cells(renderAclMarkdown(acls)),
    );
  });
});

function sourceFiles(dir: string): string[] {
  return readdirSync(dir).flatMap((name) => {
    const path = join(dir, name);
    if (statSync(path).isDirectory()) return sourceFiles(path);
    return name.endsWith('.ts') && !name.endsWith('.test.ts') ? [path] : [];
  });
}
