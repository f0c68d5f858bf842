/**
 * Rebuilds the conversation projection from both topics, from the beginning, into a scratch schema,
 * and compares it with the live projection (flags excluded: they depend on when sweeps ran).
 */
import { randomBytes } from 'node:crypto';
import { createPool, migrate, quoteIdent, replayFromBeginning, type createKafka, type Logger } from '@outreach/shared';
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
}): Promise<{ matches: boolean; conversations: number; messages: number; differences: number }> {
  const scratch = `liveness_rebuild_${Date.now().toString(36)}_${randomBytes(3).toString('hex')}`;
  await migrate({ databaseUrl: options.databaseUrl, schema: scratch, dir: options.migrationsDir, outbox: true });
  const pool = createPool({
    connectionString: options.databaseUrl,
    applicationName: 'liveness-rebuild',
    schema: scratch,
    max: 2,
  });
  try {
    // The same per-campaign graces as live, so deadlines compare.
    await pool.query(
      `INSERT INTO campaign_graces SELECT * FROM ${quoteIdent((await options.livePool.query<{ s: string }>('SELECT current_schema() AS s')).rows[0]?.s as string)}.campaign_graces`,
    );
    const repository = new ConversationsRepository(pool, 'unused.rebuild', options.defaults);
    const { messages } = await replayFromBeginning({
      kafka: options.kafka,
      topics: options.topics,
      groupId: `${scratch}_group`,
      handler: projectorHandler(repository, options.logger),
      logger: options.logger,
    });
    const live = await new ConversationsRepository(options.livePool, 'unused', options.defaults).snapshot();
    const rebuilt = await repository.snapshot();
    const differences =
      Math.abs(live.length - rebuilt.length) +
      live.filter((row, i) => JSON.stringify(row) !== JSON.stringify(rebuilt[i])).length;
    return { matches: differences === 0, conversations: rebuilt.length, messages, differences };
  } finally {
    await pool.query(`DROP SCHEMA IF EXISTS ${quoteIdent(scratch)} CASCADE`).catch(() => undefined);
    await pool.end();
  }
}
