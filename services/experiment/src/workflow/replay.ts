/**
 * Rebuilds the exposure projection from `outreach.send-recorded.v1`, from the beginning, into a
 * scratch schema, and compares its counts with the live projection (docs/design.md, guarantee 5: every
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

type Counts = Awaited<ReturnType<ExperimentsRepository['exposureCounts']>>;

export interface ReplayResult {
  readonly matches: boolean;
  readonly live: Counts;
  readonly replayed: Counts;
  readonly messages: number;
}

export async function replayExposures(options: {
  readonly kafka: ReturnType<typeof createKafka>;
  readonly topic: string;
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
      const repository = new ExperimentsRepository(pool, 'unused.replay');
      const { messages } = await replayFromBeginning({
        kafka: options.kafka,
        topics: [options.topic],
        groupId: `${schema}_group`,
        handler: exposureHandler(
          repository,
          options.logger,
          new ErasedSubjects(options.livePool, options.suppressionKey),
        ),
        logger: options.logger,
        ...(options.timeoutMs ? { timeoutMs: options.timeoutMs } : {}),
      });
      const [live, replayed] = await Promise.all([
        new ExperimentsRepository(options.livePool, 'unused').exposureCounts(),
        repository.exposureCounts(),
      ]);
      await options.inspect?.(pool);
      return { matches: JSON.stringify(live) === JSON.stringify(replayed), live, replayed, messages };
    },
  );
}
