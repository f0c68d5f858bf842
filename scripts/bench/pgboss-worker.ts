/**
 * The pg-boss peer's worker, with pg-boss 10's documented idioms: `work()` fetches jobs in batches
 * (`batchSize`) and completes them when the handler resolves; several `work()` calls in one process
 * give concurrency. The handler calls the null provider, which appends `<singletonKey>\t<epoch ms>`
 * to DELIVERY_LOG, exactly as the sender's null provider does.
 *
 *   DATABASE_URL SCHEMA QUEUE DELIVERY_LOG WORKERS BATCH node --import tsx pgboss-worker.ts
 */
import { openSync, writeSync } from 'node:fs';
import PgBoss from 'pg-boss';

const log = openSync(process.env.DELIVERY_LOG ?? '', 'a');
// The provider's answer arrives DELAY_MS after it accepted the message, as with the sender's null provider.
const delayMs = Number(process.env.DELAY_MS ?? 0);
const queue = process.env.QUEUE ?? 'bench';
const boss = new PgBoss({
  connectionString: process.env.DATABASE_URL ?? '',
  schema: process.env.SCHEMA ?? 'pgboss',
  max: 8,
  // Expired (killed) jobs are found within seconds rather than the default two minutes.
  maintenanceIntervalSeconds: 5,
  monitorStateIntervalSeconds: 60,
});
boss.on('error', (error) => process.stderr.write(`pg-boss: ${String(error)}\n`));
await boss.start();
const workers = Number(process.env.WORKERS ?? 8);
for (let i = 0; i < workers; i++) {
  await boss.work<{ key: string }>(
    queue,
    { batchSize: Number(process.env.BATCH ?? 50), pollingIntervalSeconds: 0.5 },
    async (jobs) => {
      await Promise.all(
        jobs.map(async (job) => {
          writeSync(log, `${job.data.key}\t${Date.now()}\n`);
          if (delayMs > 0) await new Promise((resolve) => setTimeout(resolve, delayMs));
        }),
      );
    },
  );
}
process.once('SIGTERM', () => {
  void boss.stop({ graceful: true, wait: true }).then(() => process.exit(0));
});
process.stdout.write('pg-boss worker running\n');
