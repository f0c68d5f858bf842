/**
 * The BullMQ peer: jobs added in bulk with jobId = campaign:candidate:step (its dedupe key), retried
 * with backoff, run by bullmq-worker.ts.
 */
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { startProcess } from '@outreach/testkit';
import { Queue } from 'bullmq';
import { Redis } from 'ioredis';
import { root } from '../lib/paths.js';
import { runId, tsNode } from './harness.js';
import type { Peer } from './peers.js';

const REDIS_URL = process.env.REDIS_URL ?? 'redis://127.0.0.1:6379';

export function bullmqPeer(): Peer {
  const queueName = runId('bullmq');
  const connection = new Redis(REDIS_URL, { maxRetriesPerRequest: null });
  const queue = new Queue(queueName, { connection });
  return {
    name: 'BullMQ 6.7 (Redis)',
    backend: { name: 'redis', pids: redisPids },
    setUp: async () => undefined,
    async enqueue(chunk) {
      await queue.addBulk(
        chunk.map((r) => ({
          name: 'send',
          data: { to: r.event.email, subject: r.event.contents[0]?.subject, body: r.event.contents[0]?.body },
          // The dedupe key is the job id; failed attempts retry with backoff, as BullMQ's docs advise.
          opts: { jobId: r.jobKey, attempts: 3, backoff: { type: 'exponential', delay: 1_000 } },
        })),
      );
    },
    worker: (deliveryLog, delayMs) =>
      startProcess(
        join(root, 'scripts', 'bench', 'bullmq-worker.ts'),
        {
          PATH: process.env.PATH,
          REDIS_URL,
          QUEUE: queueName,
          DELIVERY_LOG: deliveryLog,
          CONCURRENCY: '64',
          DELAY_MS: String(delayMs),
        },
        [],
        tsNode,
      ),
    async idle() {
      const counts = await queue.getJobCounts('active', 'wait', 'delayed', 'prioritized');
      return Object.values(counts).every((n) => n === 0);
    },
    async tearDown() {
      await queue.obliterate({ force: true });
      await queue.close();
      connection.disconnect();
    },
  };
}

function redisPids(): number[] {
  return readdirSync('/proc')
    .filter((e) => /^\d+$/.test(e))
    .filter((e) => {
      try {
        return readFileSync(`/proc/${e}/comm`, 'utf8').trim().startsWith('redis-server');
      } catch {
        return false;
      }
    })
    .map(Number);
}
