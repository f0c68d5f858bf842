/**
 * Rebuilds the exposure and reply projections from `outreach.send-recorded.v1` and
 * `conversation.events.v1`, from the beginning, into a scratch schema, and compares their counts
 * (exposures, and replying candidates per variant) with the live projections (docs/design.md, guarantee 5: every
 * projection can be rebuilt from the log and reaches the same state).
 */
import {
  ErasedSubjects,
  replayFromBeginning,
  withScratchSchema,
  type createKafka,
  type Logger,
} from '@outreach/shared';
import type { KeyObject } from 'node:crypto';
import type { Pool } from 'pg';
import { ExperimentsRepository } from '../adapters/experiments-repository.js';
import { exposureHandler } from './exposures.js';
import { experimentEventsHandler, replyHandler } from './replies.js';

type Counts = Awaited<ReturnType<ExperimentsRepository['exposureCounts']>>;
type ReplyCounts = Awaited<ReturnType<ExperimentsRepository['replyCounts']>>;

export interface ReplayResult {
  readonly matches: boolean;
  /** Exposures per (experiment, variant). */
  readonly live: Counts;
  readonly replayed: Counts;
  /** Replying candidates per (experiment, variant). */
  readonly replies: { readonly live: ReplyCounts; readonly replayed: ReplyCounts };
  readonly messages: number;
}

export async function replayExposures(options: {
  readonly kafka: ReturnType<typeof createKafka>;
  /** outreach.send-recorded.v1 (exposures). */
  readonly topic: string;
  /** conversation.events.v1 (replies); without it, replies are not replayed or compared. */
  readonly repliesTopic?: string;
  readonly databaseUrl: string;
  readonly livePool: Pool;
  readonly migrationsDir: string;
  readonly logger: Logger;
  readonly timeoutMs?: number;
  /** The suppression key: an erased person's exposures are filed under their pseudonym (ADR 014). */
  readonly suppressionKey?: KeyObject | undefined;
  /** Reads the replayed schema before it is dropped (tests: what a replay brings back). */
  readonly inspect?: (pool: Pool) => Promise<void>;
}): Promise<ReplayResult> {
  return withScratchSchema(
    { databaseUrl: options.databaseUrl, prefix: 'experiment_replay', migrationsDir: options.migrationsDir },
    async (pool, schema) => {
      const erased = new ErasedSubjects(options.livePool, options.suppressionKey);
      const repository = new ExperimentsRepository(pool, 'unused.replay');
      const { messages } = await replayFromBeginning({
        kafka: options.kafka,
        topics: options.repliesTopic ? [options.topic, options.repliesTopic] : [options.topic],
        groupId: `${schema}_group`,
        handler: experimentEventsHandler(
          exposureHandler(repository, options.logger, erased),
          replyHandler(repository, erased),
        ),
        logger: options.logger,
        ...(options.timeoutMs ? { timeoutMs: options.timeoutMs } : {}),
      });
      const liveRepository = new ExperimentsRepository(options.livePool, 'unused');
      const [live, replayed, liveReplies, replayedReplies] = await Promise.all([
        liveRepository.exposureCounts(),
        repository.exposureCounts(),
        options.repliesTopic ? liveRepository.replyCounts() : [],
        options.repliesTopic ? repository.replyCounts() : [],
      ]);
      await options.inspect?.(pool);
      const replies = { live: liveReplies, replayed: replayedReplies };
      const matches =
        JSON.stringify(live) === JSON.stringify(replayed) &&
        JSON.stringify(liveReplies) === JSON.stringify(replayedReplies);
      return { matches, live, replayed, replies, messages };
    },
  );
}
