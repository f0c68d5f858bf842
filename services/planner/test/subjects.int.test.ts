/**
 * Data-subject export and erasure (ADR 014) across the four services: the planner in-process, the
 * sender (mailing a real SMTP sink), the experiment and liveness services as processes, all on one
 * topic prefix and each in its own schema.
 */
import { randomUUID } from 'node:crypto';
import { join } from 'node:path';
import type { FastifyInstance } from 'fastify';
import { candidateKeyFor, normalizeEmail, sendIdFor, type SendRequested } from '@outreach/contracts';
import { subjectHash, loadSuppressionKey } from '@outreach/shared';
import {
  freePort,
  serviceTestEnv,
  SmtpSink,
  TEST_SUPPRESSION_KEY_ENV,
  testEmailHashKey,
  waitFor,
  type ServiceTestEnv,
} from '@outreach/testkit';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { infra, outreachRequested, plannerTestEnv } from './harness.js';

const auth = { authorization: 'Bearer test-token' };
const STORE_NAMES = ['planner', 'sender', 'experiment', 'liveness'] as const;
const readOnly = { authorization: 'Bearer read-only-token' };
const key = loadSuppressionKey({ ...TEST_SUPPRESSION_KEY_ENV, SUPPRESSION_KEY_FILE: '' });

let planner: ServiceTestEnv;
let app: FastifyInstance;
let sink: SmtpSink;
const peers: Record<'sender' | 'experiment' | 'liveness', ServiceTestEnv> = {} as never;

async function peer(name: 'sender' | 'experiment' | 'liveness', env: Record<string, string> = {}): Promise<string> {
  const service = await serviceTestEnv(
    {
      name,
      migrationsDir: join(import.meta.dirname, `../../${name}/migrations`),
      entry: join(import.meta.dirname, `../../${name}/src/server.ts`),
    },
    infra,
  );
  peers[name] = service;
  const port = await freePort();
  const url = `http://127.0.0.1:${port}`;
  service.startProcess({ HTTP_PORT: String(port), TOPIC_PREFIX: planner.prefix, LOG_LEVEL: 'warn', ...env });
  await waitFor(async () => (await fetch(`${url}/health/ready`).catch(() => undefined))?.ok === true, {
    timeoutMs: 60_000,
    description: `the ${name} service`,
  });
  return url;
}

beforeAll(async () => {
  planner = await plannerTestEnv({ SCHEDULER_INTERVAL_MS: '100' });
  sink = await new SmtpSink({}).start();
  const [senderUrl, experimentUrl, livenessUrl] = await Promise.all([
    peer('sender', {
      SMTP_HOST: '127.0.0.1',
      SMTP_REQUIRE_TLS: 'false',
      SMTP_PORT: String(sink.port),
      SEND_RATE_PER_SECOND: '1000',
      RECONCILE_INTERVAL_MS: '300',
    }),
    peer('experiment'),
    peer('liveness'),
  ]);
  app = await planner.startApp({
    SENDER_URL: senderUrl,
    EXPERIMENT_URL: experimentUrl,
    LIVENESS_URL: livenessUrl,
    SENDER_TOKEN: 'test-token',
    EXPERIMENT_TOKEN: 'test-token',
    LIVENESS_TOKEN: 'test-token',
    API_TOKENS_READ: 'test-token,read-only-token',
    RATE_LIMIT_MAX: '100000',
  });
}, 180_000);

afterAll(async () => {
  await app?.close();
  for (const service of Object.values(peers)) await service.cleanup();
  await planner?.cleanup();
  await sink?.stop();
});

/** Sends a request and waits until the sink holds its message. */
async function mailed(candidateId: string, email: string, campaignId = 'camp-subj'): Promise<void> {
  await planner.publish('outreachRequested', [outreachRequested({ candidateId, email, campaignId })]);
  await waitFor(() => sink.deliveredTo(email.toLowerCase()).length >= 1 || undefined, {
    timeoutMs: 60_000,
    description: `the message to ${candidateId}`,
  });
}

/** The sender's send for the campaign, its status settled. */
async function sendStatus(campaignId: string): Promise<string | undefined> {
  const rows = await peers.sender.query<{ status: string }>('SELECT status FROM sends WHERE campaign_id = $1', [
    campaignId,
  ]);
  return rows[0]?.status;
}

/**
 * A SendRequested as the planner emitted it before an erasure ran: on its way to the sender, with
 * the address and the content.
 */
function sendRequestedFor(candidateId: string, email: string, campaignId: string): SendRequested {
  const candidateKey = candidateKeyFor(candidateId, testEmailHashKey());
  return {
    type: 'SendRequested',
    eventId: randomUUID(),
    occurredAt: Date.now(),
    producer: 'test',
    correlationId: `corr-${campaignId}`,
    causationId: null,
    sendId: sendIdFor(campaignId, candidateKey, 'intro'),
    requestId: `req-${campaignId}`,
    campaignId,
    candidateId,
    candidateKey,
    email,
    emailNorm: normalizeEmail(email),
    step: 'intro',
    experimentId: null,
    variant: null,
    subject: `Hello ${candidateId}`,
    body: 'Private content for the late request.',
    scheduledFor: null,
    conversationId: `conv-${campaignId}`,
  };
}

/** Every row of every table of the schemas (the four services' by default), as text. */
async function everyRow(
  envs: readonly ServiceTestEnv[] = [planner, peers.sender, peers.experiment, peers.liveness],
): Promise<Array<{ where: string; text: string }>> {
  const found: Array<{ where: string; text: string }> = [];
  for (const env of envs) {
    const tables = await env.query<{ table_name: string }>(
      `SELECT table_name FROM information_schema.tables WHERE table_schema = $1 AND table_type = 'BASE TABLE'`,
      [env.schema],
    );
    for (const { table_name } of tables) {
      const rows = await env.query<{ text: string }>(`SELECT t::text AS text FROM "${env.schema}"."${table_name}" t`);
      for (const row of rows) found.push({ where: `${env.schema}.${table_name}`, text: row.text });
    }
  }
  return found;
}

describe('data-subject requests', () => {
  it('exports each store, refuses without read, erases everywhere, and a second erasure says already_erased', async () => {
    await mailed('Subj-Ada', 'Subj.Ada@Example.com');
    await waitFor(
      async () =>
        (await peers.liveness.query('SELECT 1 FROM conversations WHERE candidate_key = $1', ['Subj-Ada'])).length > 0 ||
        undefined,
      { timeoutMs: 30_000, description: 'the liveness conversation' },
    );

    const exported = await app.inject({ url: '/v1/subjects/Subj-Ada?limit=10', headers: readOnly });
    expect(exported.statusCode, exported.body).toBe(200);
    const document = exported.json();
    expect(Object.keys(document)).toEqual([
      'requestId',
      'subject',
      'planner',
      'sender',
      'experiment',
      'liveness',
      'log',
    ]);
    // The log part: per topic the retention and what the stores know of the person's records.
    const send = document.sender.tables.sends[0];
    expect(document.log.topics['outreach.requested.v1']).toMatchObject({
      retentionDays: 14,
      eventIds: expect.arrayContaining([send.request_event_id]),
    });
    expect(document.log.topics['outreach.send-requested.v1'].sendIds).toContain(send.send_id);
    expect(document.log.topics['outreach.send-recorded.v1']).toMatchObject({ retentionDays: 365 });
    expect(document.log.topics['outreach.send-recorded.v1'].sendIds).toContain(send.send_id);
    expect(document.log.topics['conversation.events.v1'].offsets.length).toBeGreaterThan(0);
    expect(JSON.stringify(document.log)).not.toMatch(/subj\.ada@/i);
    expect(document.sender.tables.sends).toHaveLength(1);
    expect(document.sender.tables.sends[0].email_norm).toBe('subj.ada@example.com');
    expect(document.liveness.tables.conversations.length).toBeGreaterThan(0);
    expect(document.planner.tables).toHaveProperty('scheduled_steps');
    expect(document.experiment.tables).toHaveProperty('assignments');

    const byAddress = await app.inject({
      method: 'POST',
      url: '/v1/subjects/search',
      headers: readOnly,
      payload: { email: 'SUBJ.ADA@example.com' },
    });
    expect(byAddress.statusCode).toBe(200);
    expect(byAddress.json().sender.tables.sends).toHaveLength(1);

    expect((await app.inject({ url: '/v1/subjects/Subj-Ada' })).statusCode).toBe(401);
    expect(
      (await app.inject({ method: 'POST', url: '/v1/subjects/Subj-Ada/erase', headers: readOnly })).statusCode,
    ).toBe(403);

    const first = await app.inject({ method: 'POST', url: '/v1/subjects/Subj-Ada/erase', headers: auth });
    expect(first.statusCode).toBe(200);
    expect(first.json().stores.sender.status).toBe('erased');
    expect(first.json().stores.liveness.status).toBe('erased');
    expect(first.json().stores.planner.status).toBe('erased');
    const second = await app.inject({ method: 'POST', url: '/v1/subjects/Subj-Ada/erase', headers: auth });
    expect(second.json().stores).toMatchObject({
      planner: { status: 'already_erased' },
      sender: { status: 'already_erased' },
      liveness: { status: 'already_erased' },
    });

    // The audit: kinds and stores, the subject as a hash only.
    const audit = await planner.query<{ kind: string; subject_hash: string }>(
      'SELECT kind, subject_hash FROM subject_requests ORDER BY requested_at',
    );
    expect(audit.map((a) => a.kind)).toEqual(['export', 'export', 'erase', 'erase']);
    expect(audit[3]?.subject_hash).toBe(subjectHash(key!, 'candidate', 'Subj-Ada'));

    // Every spelling of the address, and the candidate id, gone from every table of the four schemas
    // (once the outboxes have drained: a published record is deleted).
    await waitFor(
      async () =>
        (await planner.query('SELECT 1 FROM outbox')).length === 0 &&
        (await peers.sender.query('SELECT 1 FROM outbox')).length === 0,
      { timeoutMs: 30_000, description: 'the outboxes to drain' },
    );
    const spellings = ['subj.ada@example.com', 'Subj.Ada@Example.com', 'SUBJ.ADA@EXAMPLE.COM', 'subj-ada'];
    const hits = (await everyRow()).filter((row) =>
      spellings.some((s) => row.text.toLowerCase().includes(s.toLowerCase())),
    );
    expect(hits).toEqual([]);
    const kept = await peers.sender.query<{ address_hash: string }>('SELECT address_hash FROM suppression_hashes');
    expect(kept.map((k) => k.address_hash)).toContain(subjectHash(key!, 'address', 'subj.ada@example.com'));

    // A new request for the erased address ends suppressed, not mailed.
    const before = sink.deliveredTo('subj.ada@example.com').length;
    await planner.publish('outreachRequested', [
      outreachRequested({ candidateId: 'Someone-New', email: 'Subj.Ada@example.com', campaignId: 'camp-after' }),
    ]);
    await waitFor(async () => (await sendStatus('camp-after')) === 'suppressed' || undefined, {
      timeoutMs: 60_000,
      description: 'the new request suppressed',
    });
    expect(sink.deliveredTo('subj.ada@example.com')).toHaveLength(before);
  }, 240_000);

  it('a SendRequested on its way when the erasure ran is written scrubbed and ends suppressed, unmailed', async () => {
    // Erased three ways: known to the sender (by candidate), by candidate with a later request at a
    // new address, and by an address the sender had never seen (the request was still in the topic).
    await mailed('Late-Lee', 'late.lee@example.com', 'camp-late-1');
    await mailed('Late-Kim', 'late.kim@example.com', 'camp-late-2');
    for (const erase of [
      { url: '/v1/subjects/Late-Lee/erase' },
      { url: '/v1/subjects/Late-Kim/erase' },
      { url: '/v1/subjects/erase', payload: { email: 'Late.Nobody@Example.com' } },
    ]) {
      const erased = await app.inject({ method: 'POST', headers: auth, ...erase });
      expect(erased.statusCode, erased.body).toBe(200);
    }
    const late = [
      sendRequestedFor('Late-Lee', 'Late.Lee@example.com', 'camp-late-3'),
      sendRequestedFor('Late-Kim', 'kim.elsewhere@example.com', 'camp-late-4'),
      sendRequestedFor('Late-Nobody', 'late.nobody@example.com', 'camp-late-5'),
    ];
    const delivered = (e: string) => sink.deliveredTo(e).length;
    const before = late.map((e) => delivered(e.emailNorm));
    await planner.publish('sendRequested', late);
    for (const event of late)
      await waitFor(async () => (await sendStatus(event.campaignId)) === 'suppressed' || undefined, {
        timeoutMs: 60_000,
        description: `the late request of ${event.candidateId} suppressed`,
      });
    expect(late.map((e) => delivered(e.emailNorm))).toEqual(before);
    const rows = await peers.sender.query<{ candidate_key: string; email: string }>(
      `SELECT candidate_key, email FROM sends WHERE campaign_id = ANY($1::text[])`,
      [late.map((e) => e.campaignId)],
    );
    expect(rows).toHaveLength(3);
    for (const row of rows) {
      expect(row.candidate_key).toMatch(/^erased:[0-9a-f]{64}$/);
      expect(row.email).toBe('');
    }
    // The candidate erased under another address: the new address's objection is kept as a hash.
    const kept = await peers.sender.query<{ address_hash: string }>('SELECT address_hash FROM suppression_hashes');
    expect(kept.map((k) => k.address_hash)).toContain(subjectHash(key!, 'address', 'kim.elsewhere@example.com'));
    await waitFor(async () => (await peers.sender.query('SELECT 1 FROM outbox')).length === 0, {
      timeoutMs: 30_000,
      description: "the sender's outbox to drain",
    });
    const spellings = [
      'late.lee@example.com',
      'late.kim@example.com',
      'kim.elsewhere@example.com',
      'late.nobody@example.com',
      'late-lee',
      'late-kim',
      'late-nobody',
      'private content',
      'conv-camp-late',
      ...late.map((e) => e.candidateKey),
    ];
    const hits = (await everyRow([peers.sender])).filter((row) =>
      spellings.some((s) => row.text.toLowerCase().includes(s.toLowerCase())),
    );
    expect(hits).toEqual([]);
  }, 180_000);

  it('a request made before the erasure and read after it: refused, and nothing of the person in any store', async () => {
    const statusOf = async (requestId: string) =>
      (await app.inject({ url: `/v1/outreach-requests/${encodeURIComponent(requestId)}`, headers: auth })).json() as {
        status: string;
        rejection: { detail: string } | null;
      };
    // The attack: POST answers 202, an erasure right after it answers not_found (the request is still
    // in the topic), and the pipeline then plans it. Whichever side of the race it lands on, the
    // person must end up nowhere.
    const posted = await app.inject({
      method: 'POST',
      url: '/v1/outreach-requests',
      headers: auth,
      payload: {
        requestId: 'req-race-post',
        campaignId: 'camp-race-post',
        candidateId: 'Racy-Post',
        email: 'racy.post@example.com',
        step: 'intro',
        contents: [{ subject: 'Hello', body: 'Private racy content' }],
      },
    });
    expect(posted.statusCode, posted.body).toBe(202);
    const raced = await app.inject({ method: 'POST', url: '/v1/subjects/Racy-Post/erase', headers: auth });
    expect(raced.statusCode, raced.body).toBe(200);
    expect(raced.json().inFlight).toMatchObject({ windowMs: expect.any(Number), note: expect.any(String) });

    // Deterministic: erased (by candidate and by address) while their requests wait in the topic.
    const candidateErased = await app.inject({ method: 'POST', url: '/v1/subjects/Late-Req/erase', headers: auth });
    const addressErased = await app.inject({
      method: 'POST',
      url: '/v1/subjects/erase',
      headers: auth,
      payload: { email: 'Late.Addr@Example.com' },
    });
    for (const erased of [candidateErased, addressErased])
      for (const store of STORE_NAMES) expect(erased.json().stores[store].status).toBe('not_found');
    const madeBefore = Date.now() - 5_000;
    await planner.publish('outreachRequested', [
      outreachRequested({
        candidateId: 'Late-Req',
        email: 'late.req@example.com',
        campaignId: 'camp-lr',
        requestId: 'req-late-1',
        occurredAt: madeBefore,
      }),
      outreachRequested({
        candidateId: 'Late-Addr',
        email: 'late.addr@example.com',
        campaignId: 'camp-lr',
        requestId: 'req-late-2',
        occurredAt: madeBefore,
      }),
    ]);
    for (const requestId of ['req-late-1', 'req-late-2']) {
      const status = await waitFor(
        async () => {
          const s = await statusOf(requestId);
          return s.status === 'rejected' ? s : undefined;
        },
        { timeoutMs: 60_000, description: `${requestId} refused` },
      );
      expect(status.rejection?.detail).toMatch(/erased/);
    }
    // The raced request settles one way or the other: refused, or planned and its send suppressed.
    await waitFor(
      async () => {
        const s = await statusOf('req-race-post');
        return ['rejected', 'suppressed', 'sent'].includes(s.status) || undefined;
      },
      { timeoutMs: 60_000, description: 'the raced request settled' },
    );
    // Then the pipeline behind it: a control person mailed after, seen by liveness, and the outboxes drained.
    await mailed('Control-After', 'control.after@example.com', 'camp-late-control');
    await waitFor(
      async () =>
        (await peers.liveness.query("SELECT 1 FROM conversations WHERE campaign_id = 'camp-late-control'")).length >
          0 &&
        (await planner.query('SELECT 1 FROM outbox')).length === 0 &&
        (await peers.sender.query('SELECT 1 FROM outbox')).length === 0,
      { timeoutMs: 60_000, description: 'the pipeline behind the late requests' },
    );
    // The raced request may have been claimed by the sender while its erasure ran (the window the
    // report's inFlight names): the erasure repeated after the pipeline settled leaves nothing.
    const again = await app.inject({ method: 'POST', url: '/v1/subjects/Racy-Post/erase', headers: auth });
    expect(again.statusCode).toBe(200);
    await waitFor(async () => (await peers.sender.query('SELECT 1 FROM outbox')).length === 0, {
      timeoutMs: 30_000,
      description: "the sender's outbox to drain",
    });
    const spellings = [
      'racy-post',
      'racy.post@example.com',
      'private racy content',
      'late-req',
      'late.req@example.com',
      'late-addr',
      'late.addr@example.com',
      ...['Racy-Post', 'Late-Req', 'Late-Addr'].map((c) => candidateKeyFor(c, testEmailHashKey())),
    ];
    const hits = (await everyRow()).filter((row) =>
      spellings.some((s) => row.text.toLowerCase().includes(s.toLowerCase())),
    );
    expect(hits).toEqual([]);
    expect(sink.deliveredTo('late.req@example.com').length + sink.deliveredTo('late.addr@example.com').length).toBe(0);
  }, 240_000);

  it('an unknown candidate is not_found in every store, audited the same; bad input is a 400', async () => {
    const unknown = await app.inject({ method: 'POST', url: '/v1/subjects/nobody-at-all/erase', headers: auth });
    expect(unknown.statusCode).toBe(200);
    for (const store of ['planner', 'sender', 'experiment', 'liveness'])
      expect(unknown.json().stores[store].status).toBe('not_found');
    const audited = await planner.query('SELECT 1 FROM subject_requests WHERE id = $1', [unknown.json().requestId]);
    expect(audited).toHaveLength(1);
    const unknownAddress = await app.inject({
      method: 'POST',
      url: '/v1/subjects/erase',
      headers: auth,
      payload: { email: 'never-seen@example.com' },
    });
    expect(unknownAddress.json().stores.sender.status).toBe('not_found');
    const bad = await app.inject({
      method: 'POST',
      url: '/v1/subjects/erase',
      headers: auth,
      payload: { email: 'not an address' },
    });
    expect(bad.statusCode).toBe(400);
  });

  it('an erasure racing an in-flight send: at most one delivery, and the erasure completes', async () => {
    const email = 'racer@example.com';
    await planner.publish('outreachRequested', [
      outreachRequested({ candidateId: 'Racer', email, campaignId: 'camp-race', requestId: 'req-race' }),
    ]);
    // Erase as soon as the sender holds the send, whatever its status.
    await waitFor(async () => (await sendStatus('camp-race')) !== undefined || undefined, {
      timeoutMs: 60_000,
      intervalMs: 5,
      description: 'the claim',
    });
    const erased = await app.inject({ method: 'POST', url: '/v1/subjects/Racer/erase', headers: auth });
    expect(erased.statusCode).toBe(200);
    const settled = await waitFor(
      async () => {
        const status = await sendStatus('camp-race');
        return status === 'sent' || status === 'suppressed' ? status : undefined;
      },
      { timeoutMs: 60_000, description: 'the raced send settled' },
    );
    expect(sink.deliveredTo(email).length).toBe(settled === 'sent' ? 1 : 0);
  }, 120_000);

  it("one token's flood of exports leaves another token's erasure answered 2xx", async () => {
    const flood = Array.from({ length: 800 }, () =>
      app
        .inject({
          method: 'POST',
          url: '/v1/subjects/search',
          headers: readOnly,
          payload: { email: 'flooded@example.com', limit: 500 },
        })
        .then((response) => response.statusCode),
    );
    const erased = await app.inject({ method: 'POST', url: '/v1/subjects/Flood-Victim/erase', headers: auth });
    expect(erased.statusCode, erased.body).toBe(200);
    const statuses = await Promise.all(flood);
    expect(statuses.filter((s) => s >= 500)).toEqual([]);
    // The flooding token got its share (SUBJECT_QUEUE_PER_CALLER, 50) and 429 past it.
    expect(statuses.filter((s) => s === 429).length).toBeGreaterThanOrEqual(700);
    expect(statuses.filter((s) => s === 200).length).toBeGreaterThan(0);
  }, 180_000);

  it('1,000 erasures in a burst are all answered 2xx or 4xx, never 5xx', async () => {
    const statuses = await Promise.all(
      Array.from({ length: 1_000 }, (_, i) =>
        app
          .inject({ method: 'POST', url: `/v1/subjects/burst-${i}/erase`, headers: auth })
          .then((response) => response.statusCode),
      ),
    );
    const counts = new Map<number, number>();
    for (const status of statuses) counts.set(status, (counts.get(status) ?? 0) + 1);
    expect([...counts.keys()].filter((s) => s >= 500)).toEqual([]);
    expect(counts.get(200) ?? 0).toBeGreaterThan(0);
  }, 180_000);
});
