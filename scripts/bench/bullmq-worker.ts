/**
 * The BullMQ peer's worker, built with BullMQ's documented idioms: one Worker with `concurrency`
 * (https://docs.bullmq.io/guide/workers/concurrency), a processor that calls the null provider and
 * returns. The provider appends `<jobId>\t<epoch ms>` to DELIVERY_LOG, exactly as the sender's null
 * provider does, so duplicates are counted the same way.
 *
 *   REDIS_URL QUEUE DELIVERY_LOG CONCURRENCY node --import tsx bullmq-worker.ts
 */
import { openSync, writeSync } from 'node:fs';
import { Worker } from 'bullmq';
import { Redis } from 'ioredis';

const log = openSync(process.env.DELIVERY_LOG ?? '', 'a');
// The provider's answer arrives DELAY_MS after it accepted the message, as with the sender's null provider.
const delayMs = Number(process.env.DELAY_MS ?? 0);
const connection = new Redis(process.env.REDIS_URL ?? 'redis://127.0.0.1:6379', { maxRetriesPerRequest: null });
const worker = new Worker(
  process.env.QUEUE ?? 'bench',
  async (job) => {
    writeSync(log, `${job.id}\t${Date.now()}\n`);
    if (delayMs > 0) await new Promise((resolve) => setTimeout(resolve, delayMs));
  },
  { connection, concurrency: Number(process.env.CONCURRENCY ?? 64) },
);
process.once('SIGTERM', () => {
  void worker.close().then(() => process.exit(0));
});
process.stdout.write('bullmq worker running\n');
