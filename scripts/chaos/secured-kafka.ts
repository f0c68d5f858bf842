/**
 * A scenario's run on the secured broker (ADR 010) instead of the plaintext one: every service and
 * the load driver connect over SASL_SSL with SCRAM-SHA-512, each as its own principal (planner,
 * sender, experiment, liveness; the driver as publisher; the topics created as topics-admin), with
 * only the ACLs kafka/acls.ts generates for the run's topic and group prefixes. Passwords reach the
 * services in files (KAFKA_SASL_PASSWORD_FILE), as production mounts them. The super user only
 * grants the ACLs and removes what the run created.
 */
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import {
  applyKafkaAcls,
  createKafka,
  deleteKafkaAcls,
  ensureTopics,
  kafkaAcls,
  type AclBinding,
  type KafkaRoleName,
  type KafkaSecurity,
} from '@outreach/shared';
import { waitFor } from '@outreach/testkit';
import { runningSecured, securedWanted, up } from '../infra.js';
import { aclsInEffect, scramSecurity, superUserSecurity, type SecuredKafkaInfo } from '../lib/secured.js';
import { services, type Service } from '../lib/stack.js';
import type { Kafka } from './scenario.js';

/** The driver publishes as an upstream system would. */
const DRIVER_ROLE = 'publisher';
const TOPICS_ROLE = 'topics-admin';
const ROLES: readonly KafkaRoleName[] = [...services, DRIVER_ROLE, TOPICS_ROLE];

export class SecuredKafka {
  private constructor(
    private readonly info: SecuredKafkaInfo,
    private readonly admin: ReturnType<Kafka['admin']>,
    private readonly acls: readonly AclBinding[],
    /** The run's prefixes, as lib/stack.ts names them: topics `<run>.`, consumer groups `<run>-<service>`. */
    private readonly prefixes: { readonly topicPrefix: string; readonly groupPrefix: string },
    private readonly secrets: string,
  ) {}

  /** Grants the run's ACLs on the secured broker (started first if INFRA_SECURED allows and it is down). */
  static async open(run: string, dir: string): Promise<SecuredKafka> {
    const info = runningSecured()?.kafka ?? (securedWanted ? (await up({ secured: true })).secured?.kafka : undefined);
    if (!info) {
      throw new Error(
        'this scenario runs on the secured broker, which INFRA_SECURED=off leaves out: unset it, or leave the scenario out with --only',
      );
    }
    const prefixes = { topicPrefix: `${run}.`, groupPrefix: `${run}-` };
    const admin = createKafka({
      brokers: [info.brokers],
      clientId: `${run}-acls`,
      security: superUserSecurity(info),
    }).admin();
    await admin.connect();
    const acls = kafkaAcls({ ...prefixes, roles: ROLES });
    await applyKafkaAcls(admin, acls);
    const secrets = join(dir, 'secrets');
    mkdirSync(secrets, { recursive: true, mode: 0o700 });
    for (const role of ROLES) {
      writeFileSync(join(secrets, role), `${info.passwords[role] ?? ''}\n`, { mode: 0o600 });
    }
    return new SecuredKafka(info, admin, acls, prefixes, secrets);
  }

  get brokers(): string {
    return this.info.brokers;
  }

  /** What the load driver connects with. */
  get driverSecurity(): KafkaSecurity {
    return scramSecurity(this.info, DRIVER_ROLE);
  }

  /** The Kafka settings of a service's process: its own principal, its password in a file. */
  env(service: Service): Record<string, string> {
    return {
      KAFKA_BROKERS: this.info.brokers,
      KAFKA_SSL: 'true',
      KAFKA_SSL_CA_FILE: this.info.caFile,
      KAFKA_SASL_MECHANISM: 'scram-sha-512',
      KAFKA_SASL_USERNAME: service,
      KAFKA_SASL_PASSWORD_FILE: join(this.secrets, service),
    };
  }

  /**
   * Creates the run's topics as topics-admin, then waits until every role passes the start-up check
   * its service makes (fresh ACLs reach the authorizer a moment after they are granted).
   */
  async createTopics(partitions: number): Promise<void> {
    const admin = createKafka({
      brokers: [this.info.brokers],
      clientId: `${this.prefixes.topicPrefix}topics`,
      security: scramSecurity(this.info, TOPICS_ROLE),
    }).admin();
    await admin.connect();
    try {
      await ensureTopics(admin, { prefix: this.prefixes.topicPrefix, partitions });
    } finally {
      await admin.disconnect();
    }
    await aclsInEffect(this.info, [...services, DRIVER_ROLE], this.prefixes);
  }

  /**
   * Resolves once each service's consumer groups have committed everything on the topics they read
   * (none behind the end): proof that all four consumed over SASL_SSL, not merely logged in.
   */
  async drained(timeoutMs: number): Promise<string> {
    const read = await waitFor(
      async () => {
        const groups = (await this.admin.listGroups()).groups
          .map((g) => g.groupId)
          .filter((id) => id.startsWith(this.prefixes.groupPrefix));
        const perService = new Map<string, number>();
        for (const groupId of groups) {
          const service = services.find((s) => groupId.startsWith(`${this.prefixes.groupPrefix}${s}`));
          if (!service) continue;
          for (const { topic, partitions } of await this.admin.fetchOffsets({ groupId })) {
            const ends = new Map((await this.admin.fetchTopicOffsets(topic)).map((p) => [p.partition, Number(p.high)]));
            for (const { partition, offset } of partitions) {
              const committed = Math.max(0, Number(offset));
              if (committed < (ends.get(partition) ?? 0)) return false;
              perService.set(service, (perService.get(service) ?? 0) + committed);
            }
          }
        }
        return services.every((s) => (perService.get(s) ?? 0) > 0) ? perService : false;
      },
      { timeoutMs, intervalMs: 500, description: "every service's consumer groups to reach the end of their topics" },
    );
    return `each service's consumer groups read their topics to the end over SASL_SSL (records: ${services.map((s) => `${s} ${read.get(s)}`).join(', ')})`;
  }

  /** Deletes the run's topics and revokes its ACLs. */
  async close(): Promise<void> {
    try {
      const mine = (await this.admin.listTopics()).filter((t) => t.startsWith(this.prefixes.topicPrefix));
      if (mine.length > 0) await this.admin.deleteTopics({ topics: mine });
      await deleteKafkaAcls(this.admin, this.acls);
    } finally {
      await this.admin.disconnect();
    }
  }
}
