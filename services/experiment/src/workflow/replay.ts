/**
 * Rebuilds the exposure projection from `outreach.send-recorded.v1`, from the beginning, into a
 * scratch schema, and compares its counts with the live projection (DESIGN guarantee 5: every
 * projection can be rebuilt from the log and reaches the same state).
 */
import { randomBytes } from 'node:crypto';
import {
  ConsumerRunner,
  createPool,
  migrate,
  quoteIdent,
  waitFor,
  type createKafka,
  type Logger,
} from '@outreach/shared';
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
}): Promise<ReplayResult> {
  const scratch = `experiment_replay_${Date.now().toString(36)}_${randomBytes(3).toString('hex')}`;
  await migrate({ databaseUrl: options.databaseUrl, schema: scratch, dir: options.migrationsDir, outbox: true });
  const pool = createPool({
    connectionString: options.databaseUrl,
    applicationName: 'experiment-replay',
    schema: scratch,
    max: 2,
  });
  const admin = options.kafka.admin();
  await admin.connect();
  try {
    const ends = await admin.fetchTopicOffsets(options.topic);
    const target = new Map(ends.map((p) => [p.partition, Number(p.high)]));
    const reached = new Map<number, number>();
    const repository = new ExperimentsRepository(pool, 'unused.replay');
    const handle = exposureHandler(repository, options.logger);
    let messages = 0;
    const runner = new ConsumerRunner({
      kafka: options.kafka,
      groupId: `${scratch}_group`,
      topics: [options.topic],
      logger: options.logger,
      fromBeginning: true,
      handler: async (events, context) => {
        await handle(events, context);
        messages += events.length;
        for (const e of events) reached.set(e.partition, Math.max(reached.get(e.partition) ?? 0, Number(e.offset) + 1));
      },
    });
    await runner.start();
    try {
      // Caught up when every partition reached the end offsets read before the replay began
      // (offsets of dead-lettered or transaction markers count as reached through the commit).
      await waitFor(
        async () => {
          const committed = await admin.fetchOffsets({ groupId: `${scratch}_group`, topics: [options.topic] });
          return [...target].every(([partition, high]) => {
            const done = Math.max(
              reached.get(partition) ?? 0,
              Number(committed[0]?.partitions.find((p) => p.partition === partition)?.offset ?? 0),
            );
            return high === 0 || done >= high;
          });
        },
        {
          timeoutMs: options.timeoutMs ?? 120_000,
          intervalMs: 250,
          description: `the replay of ${options.topic} to catch up`,
        },
      );
    } finally {
      await runner.stop();
    }
    const [live, replayed] = await Promise.all([
      new ExperimentsRepository(options.livePool, 'unused').exposureCounts(),
      repository.exposureCounts(),
    ]);
    return { matches: JSON.stringify(live) === JSON.stringify(replayed), live, replayed, messages };
  } finally {
    await admin.disconnect();
    await pool.query(`DROP SCHEMA IF EXISTS ${quoteIdent(scratch)} CASCADE`).catch(() => undefined);
    await pool.end();
  }
}
