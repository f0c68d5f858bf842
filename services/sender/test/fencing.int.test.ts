/**
 * Fencing, deterministically: worker A claims, then stalls between claim and fence; its lease
 * expires (by the database clock); worker B takes the claim over and sends. A, resuming, must not
 * send: its conditional claimed→sending UPDATE finds another token.
 */
import { createLogger, createMetricsRegistry, createPool, topicName } from '@outreach/shared';
import { testEmailHashKey, waitFor } from '@outreach/testkit';
import { afterEach, expect, inject, it } from 'vitest';
import { SmtpProvider } from '../src/adapters/providers/smtp.js';
import { CampaignsRepository } from '../src/adapters/campaigns-repository.js';
import { SharedErrorWindow, SharedRateLimiter } from '../src/adapters/incident-controls.js';
import { SendsRepository } from '../src/adapters/sends-repository.js';
import { validateSendRequest, type ValidSend } from '../src/domain/request.js';
import { alwaysRun, SendPipeline } from '../src/workflow/send-pipeline.js';
import { senderTestEnv, sendRequested, testIdentifiers, type SenderTestEnv } from './harness.js';

let t: SenderTestEnv;
afterEach(() => t?.cleanup());

it('a worker whose lease was taken over does not send', async () => {
  t = await senderTestEnv({ kafkaBrokers: inject('kafkaBrokers'), databaseUrl: inject('databaseUrl') });
  const pool = createPool({ connectionString: t.databaseUrl, applicationName: 'fencing', schema: t.schema });
  const registry = createMetricsRegistry('fencing', false);
  const emailHashKey = testEmailHashKey();
  const repository = new SendsRepository(pool, topicName('sendRecorded', t.prefix), 1_000, emailHashKey);
  const provider = new SmtpProvider({
    host: '127.0.0.1',
    port: t.sink.port,
    secure: false,
    requireTLS: false,
    timeoutMs: 400,
    finalReplyTimeoutMs: 1_000,
    maxConnections: 1,
  });
  const pipeline = new SendPipeline({
    repository,
    campaigns: new CampaignsRepository(pool, repository),
    rateLimiter: new SharedRateLimiter(pool, {
      globalPerSecond: 100,
      globalBurst: 1,
      domainPerSecond: 100,
      domainBurst: 1,
    }),
    errorWindow: new SharedErrorWindow(pool, 60_000),
    provider,
    logger: createLogger({ name: 'fencing', level: 'silent' }),
    emailHashKey,
    metrics: registry,
    from: 'outreach@example.com',
    identifiers: testIdentifiers,
    messageIdDomain: 'test',
    unsubscribeMailto: 'unsubscribe@example.com',
    concurrency: 1,
    providerTimeoutMs: 400,
    leaseMs: 1_000,
    maxAttempts: 3,
    retryBackoffMs: 10,
    autoPause: { threshold: 1, minAttempts: 1_000, windowMs: 60_000 },
  });
  try {
    const validation = validateSendRequest(
      sendRequested({ campaignId: 'c', candidateId: 'fenced', email: 'fenced@example.com' }),
      emailHashKey,
    );
    const send = (validation as { send: ValidSend }).send;

    const { claimed } = await repository.claim([send]);
    const workerA = claimed[0];
    expect(workerA).toBeDefined();
    // Worker A stalls here. Its lease runs out on the database's clock.
    await waitFor(
      async () =>
        (await t.query<{ expired: boolean }>('SELECT lease_expires_at < now() AS expired FROM sends'))[0]?.expired,
      {
        timeoutMs: 5_000,
        description: "worker A's lease to expire",
      },
    );
    const [workerB] = await repository.takeOverExpired(10);
    expect(workerB?.token).toBeDefined();
    expect(workerB?.token).not.toBe(workerA?.token);

    await pipeline.sendOne(workerA as NonNullable<typeof workerA>);
    expect(t.sink.messages).toHaveLength(0);

    await pipeline.process([workerB as NonNullable<typeof workerB>], alwaysRun);
    expect(t.sink.messages).toHaveLength(1);
    await pipeline.sendOne(workerA as NonNullable<typeof workerA>);
    expect(t.sink.messages).toHaveLength(1);
    expect(await registry.getSingleMetricAsString('outreach_sender_fence_lost_total')).toMatch(/ 2$/m);
    expect(await t.query('SELECT status, attempts FROM sends')).toEqual([{ status: 'sent', attempts: 1 }]);
  } finally {
    await pipeline.close();
    await provider.close();
    await pool.end();
  }
});
