/**
 * Rebuilds the conversation projection from both topics, from the beginning, into a scratch schema,
 * and compares it with the live projection (flags excluded: they depend on when sweeps ran).
 */
import {
  ErasedSubjects,
  quoteIdent,
  replayFromBeginning,
  withScratchSchema,
  type createKafka,
  type Logger,
} from '@outreach/shared';
import type { KeyObject } from 'node:crypto';
import type { Pool } from 'pg';
import { ConversationsRepository } from '../adapters/conversations-repository.js';
import type { Graces } from '../domain/conversation.js';
import { projectorHandler } from './projector.js';

export async function rebuildConversations(options: {
  readonly kafka: ReturnType<typeof createKafka>;
  readonly topics: readonly string[];
  readonly databaseUrl: string;
  readonly livePool: Pool;
  readonly migrationsDir: string;
  readonly defaults: Graces;
  readonly logger: Logger;
  /** The suppression key: events of a person erased in the live schema are skipped (ADR 014). */
  readonly suppressionKey?: KeyObject | undefined;
  /** Reads the rebuilt schema before it is dropped (tests: what a rebuild brings back). */
  readonly inspect?: (pool: Pool) => Promise<void>;
}): Promise<{ matches: boolean; conversations: number; messages: number; differences: number }> {
  const liveSchema = (await options.livePool.query<{ schema: string }>('SELECT current_schema() AS schema')).rows[0]
    ?.schema as string;
  return withScratchSchema(
    { databaseUrl: options.databaseUrl, prefix: 'liveness_rebuild', migrationsDir: options.migrationsDir },
    async (pool, schema) => {
      // The same per-campaign graces as live, so the deadlines compare.
      await pool.query(`INSERT INTO campaign_graces SELECT * FROM ${quoteIdent(liveSchema)}.campaign_graces`);
      const unused = { liveness: 'unused.rebuild', conversationEvents: 'unused.rebuild' };
      const repository = new ConversationsRepository(pool, unused, options.defaults);
      const { messages } = await replayFromBeginning({
        kafka: options.kafka,
        topics: options.topics,
        groupId: `${schema}_group`,
        handler: projectorHandler(
          repository,
          options.logger,
          new ErasedSubjects(options.livePool, options.suppressionKey),
        ),
        logger: options.logger,
      });
      const live = await new ConversationsRepository(options.livePool, unused, options.defaults).snapshot();
      const rebuilt = await repository.snapshot();
      await options.inspect?.(pool);
      const differences =
        Math.abs(live.length - rebuilt.length) +
        live.filter((row, i) => JSON.stringify(row) !== JSON.stringify(rebuilt[i])).length;
      return { matches: differences === 0, conversations: rebuilt.length, messages, differences };
    },
  );
}
