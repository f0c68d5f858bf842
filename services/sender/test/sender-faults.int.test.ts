/**
 * The sender as processes, under the faults of the seeds (docs/seeds.md): a rebalance mid-batch with a slow
 * provider, SIGKILL at random points, and partitions added mid-run. The SMTP sink counts
 * deliveries; the database says every request reached a terminal outcome.
 */
import { createKafka, topicName } from '@outreach/shared';
import { type SendRequested } from '@outreach/contracts';
import { waitFor, type RunningProcess } from '@outreach/testkit';
import { afterEach, describe, expect, inject, it } from 'vitest';
import { deliveriesByRecipient, messageIdOf, senderTestEnv, sendRequested, type SenderTestEnv } from './harness.js';

const infra = { kafkaBrokers: inject('kafkaBrokers'), databaseUrl: inject('databaseUrl') };
let t: SenderTestEnv;
afterEach(async (context) => {
  if (context.task.result?.state === 'fail') {
    for (const proc of t?.processes ?? []) {
      console.error(
        `--- sender ${proc.child.pid} stderr:\n${proc.stderrLines.slice(-20).join('\n')}\n--- stdout:\n${proc.stdoutLines.slice(-10).join('\n')}`,
      );
    }
  }
  await t?.cleanup();
});

function requests(campaignId: string, count: number, offset = 0): SendRequested[] {
  return Array.from({ length: count }, (_, i) =>
    sendRequested({ campaignId, candidateId: `cand-${offset + i}`, email: `cand-${offset + i}@example.com` }),
  );
}

async function outcomes(): Promise<Record<string, number>> {
  const rows = await t.query<{ status: string; n: number }>(
    'SELECT status, count(*)::int AS n FROM sends GROUP BY status',
  );
  return Object.fromEntries(rows.map((r) => [r.status, r.n]));
}

async function terminal(): Promise<number> {
  const counts = await outcomes();
  return (counts.sent ?? 0) + (counts.ambiguous ?? 0) + (counts.failed ?? 0) + (counts.suppressed ?? 0);
}

function expectNoDuplicates(): void {
  const perRecipient = deliveriesByRecipient(t.sink);
  const duplicated = [...perRecipient].filter(([, n]) => n > 1);
  expect(duplicated, `recipients with more than one email: ${duplicated.map(([r]) => r).join(', ')}`).toEqual([]);
}

async function sentMatchesSink(): Promise<void> {
  const sent = await t.query<{ sendId: string }>(`SELECT send_id AS "sendId" FROM sends WHERE status = 'sent'`);
  const delivered = new Set(t.sink.messages.map((m) => m.messageId));
  for (const { sendId } of sent) expect(delivered.has(messageIdOf(sendId)), sendId).toBe(true);
}

describe('sender processes under faults', { timeout: 240_000 }, () => {
  it('two senders in one group, a slow provider and a rebalance mid-batch: 0 duplicates', async () => {
    t = await senderTestEnv(infra, {
      sink: { behaviour: () => ({ delayMs: 60 }) },
      env: { SEND_CONCURRENCY: '4', SEND_BATCH_SIZE: '50' },
    });
    const all = requests('rebalance', 240);
    await t.publishRequests(all);
    const first = t.startProcess();
    await waitFor(() => t.sink.messages.length >= 20, { timeoutMs: 60_000, description: 'the first sender under way' });
    const second = t.startProcess();
    await waitFor(() => second.stdoutLines.some((l) => l.includes('"memberAssignment"')), {
      timeoutMs: 60_000,
      description: 'the second sender to join the group',
    });
    await waitFor(async () => (await terminal()) === all.length, {
      timeoutMs: 120_000,
      description: 'all 240 sends terminal',
    });

    expectNoDuplicates();
    await sentMatchesSink();
    expect((await outcomes()).sent).toBe(240);
    expect(t.sink.messages).toHaveLength(240);
    expect(first.stdoutLines.some((l) => l.includes('"msg":"sender started"'))).toBe(true);
  });

  it('SIGKILL at random points, five times, with a restart after each: 0 duplicates, every request terminal', async () => {
    const concurrency = 4;
    t = await senderTestEnv(infra, {
      sink: { behaviour: () => ({ delayMs: 25 }) },
      env: {
        SEND_CONCURRENCY: String(concurrency),
        SEND_BATCH_SIZE: '40',
        LEASE_MS: '3000',
        PROVIDER_TIMEOUT_MS: '1000',
      },
    });
    const all = requests('kills', 300);
    await t.publishRequests(all);
    let proc: RunningProcess = t.startProcess();
    for (let kill = 1; kill <= 5; kill++) {
      const target = t.sink.messages.length + 5 + Math.floor(Math.random() * 30);
      await waitFor(() => t.sink.messages.length >= Math.min(target, all.length - 10), {
        timeoutMs: 60_000,
        description: `progress before kill ${kill}`,
      });
      await proc.stop('SIGKILL');
      proc = t.startProcess();
    }
    await waitFor(async () => (await terminal()) === all.length, {
      timeoutMs: 120_000,
      description: 'all 300 sends terminal',
    });

    expectNoDuplicates();
    await sentMatchesSink();
    const counts = await outcomes();
    // Only a send inside the provider call at a kill can be ambiguous: at most `concurrency` per kill.
    expect(counts.ambiguous ?? 0).toBeLessThanOrEqual(5 * concurrency);
    expect((counts.sent ?? 0) + (counts.ambiguous ?? 0)).toBe(all.length);
    expect(t.sink.messages.length).toBeGreaterThanOrEqual(counts.sent ?? 0);
    expect(t.sink.messages.length).toBeLessThanOrEqual(all.length);
    console.info(
      `sender kill test: ${counts.sent} sent, ${counts.ambiguous ?? 0} ambiguous, ${t.sink.messages.length} delivered`,
    );
  });

  it('adding partitions mid-run moves keys between partitions and still sends each request once', async () => {
    t = await senderTestEnv(infra, { partitions: 2, env: { SEND_CONCURRENCY: '4' } });
    const firstBatch = requests('repartition', 150);
    await t.publishRequests(firstBatch);
    t.startProcess();
    await waitFor(() => t.sink.messages.length >= 30, { timeoutMs: 60_000, description: 'sending under way' });

    const admin = createKafka({ brokers: infra.kafkaBrokers.split(','), clientId: 'repartition' }).admin();
    await admin.connect();
    await admin.createPartitions({ topicPartitions: [{ topic: topicName('sendRequested', t.prefix), count: 6 }] });
    await admin.disconnect();
    // The same requests again (now hashed to other partitions), plus new ones, and a second sender
    // whose join makes the group pick up the new partitions.
    await t.publishRequests([...firstBatch, ...requests('repartition', 100, 150)], { fresh: true });
    t.startProcess();
    await waitFor(async () => (await terminal()) === 250, {
      timeoutMs: 120_000,
      description: 'all 250 sends terminal',
    });

    expectNoDuplicates();
    await sentMatchesSink();
    expect(t.sink.messages).toHaveLength(250);
  });
});
